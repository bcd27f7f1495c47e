"""Loading ONNX files into Deep500's object model.

``load_and_parse_model`` checks the model with ``onnx.checker``, runs ONNX shape
inference, types every node by the schema of the opset the model imports, and turns
initializers into NumPy parameters. Any problem is a Deep500Error that names the file
and, where it applies, the node.
"""
from __future__ import annotations

import os

import onnx
import onnx.checker
import onnx.numpy_helper
import onnx.shape_inference
from google.protobuf.message import DecodeError

from deep500.utils.errors import ModelError, UnsupportedError
from deep500.utils.onnx_interop.onnx_objects import OnnxModel, OnnxValueInfo
from deep500.utils.onnx_interop.schemas import operator_class


def load_model_proto(path_or_proto) -> tuple[onnx.ModelProto, str]:
    if isinstance(path_or_proto, onnx.ModelProto):
        return path_or_proto, f"<in-memory model {path_or_proto.graph.name!r}>"
    path = os.fspath(path_or_proto)
    if not os.path.isfile(path):
        raise ModelError(f"ONNX file {path!r} does not exist")
    try:
        return onnx.load(path), path
    except (DecodeError, ValueError, RuntimeError, onnx.onnx_cpp2py_export.checker.ValidationError
            ) as exc:
        raise ModelError(f"{path} is not a valid ONNX file (it could not be decoded: "
                         f"{exc}). Re-export the model or check that the download is "
                         f"complete") from None


def load_and_parse_model(path_or_proto, check: bool = True) -> OnnxModel:
    """Parse an ONNX file (path) or ``onnx.ModelProto`` into an :class:`OnnxModel`."""
    proto, source = load_model_proto(path_or_proto)
    if check:
        try:
            onnx.checker.check_model(proto)
        except onnx.checker.ValidationError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise ModelError(f"{source} fails the ONNX checker: {first}") from None
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except (onnx.shape_inference.InferenceError, RuntimeError) as exc:
        raise ModelError(f"{source}: ONNX shape inference failed: {exc}") from None
    return _object_model(inferred, source)


def _default_opset(proto: onnx.ModelProto) -> int:
    for opset in proto.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return opset.version
    return onnx.defs.onnx_opset_version()


def _object_model(proto: onnx.ModelProto, source: str) -> OnnxModel:
    graph = proto.graph
    opset = _default_opset(proto)
    domains = {o.domain: o.version for o in proto.opset_import}
    model_name = graph.name or os.path.basename(source)
    operations = []
    for index, node in enumerate(graph.node):
        name = node.name or f"{node.op_type}_{index}"
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        try:
            cls = operator_class(node.op_type, domains.get(node.domain, opset), domain)
            operations.append(cls.from_node(node, name))
        except UnsupportedError as exc:
            raise UnsupportedError(f"{source}: node '{name}' ({node.op_type}): {exc}"
                                   ) from None
    initializers = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    value_info = {v.name: OnnxValueInfo.from_proto(v)
                  for v in list(graph.value_info) + list(graph.input) + list(graph.output)}
    return OnnxModel(
        name=model_name, opset=opset,
        inputs=[OnnxValueInfo.from_proto(v) for v in graph.input],
        outputs=[OnnxValueInfo.from_proto(v) for v in graph.output],
        initializers=initializers, operations=operations, value_info=value_info,
        proto=proto, source=source)
