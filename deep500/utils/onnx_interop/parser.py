"""Loading ONNX files into Deep500's object model.

``load_and_parse_model`` checks the model with ``onnx.checker``, runs ONNX shape
inference, types every node by the schema of the opset the model imports, rewrites the
nodes into one normalised form (``normalize.py``: the newest opset's), and turns
initializers into NumPy parameters. Any problem is a Deep500Error that names the file
and, where it applies, the node.
"""
from __future__ import annotations

import json
import os

import onnx
import onnx.checker
import onnx.numpy_helper
import onnx.shape_inference

from deep500.utils.errors import Deep500Error, ModelError, UnsupportedError
from deep500.utils.onnx_interop.normalize import normalize_model
from deep500.utils.onnx_interop.onnx_objects import OnnxModel, OnnxValueInfo
from deep500.utils.onnx_interop.schemas import operator_class


# Not the model's fault: passed on as they are, never turned into a ModelError.
_NOT_THE_MODEL = (MemoryError,)


def load_model_proto(path_or_proto) -> tuple[onnx.ModelProto, str]:
    """The ``ModelProto`` of a path (or the proto itself) and a name for messages."""
    if isinstance(path_or_proto, onnx.ModelProto):
        return path_or_proto, f"<in-memory model {path_or_proto.graph.name!r}>"
    try:
        path = os.fspath(path_or_proto)
    except TypeError:
        raise ModelError(f"An ONNX model is a file path or an onnx.ModelProto, got "
                         f"{type(path_or_proto).__name__}") from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not os.path.isfile(path):
        raise ModelError(f"ONNX file {path!r} does not exist")
    try:
        return onnx.load(path), path
    except OSError as exc:
        raise ModelError(f"ONNX file {path} cannot be read: {exc}") from exc
    except _NOT_THE_MODEL:
        raise
    except Exception as exc:  # protobuf's DecodeError, onnx's ValueError, ...
        raise ModelError(f"{path} is not a valid ONNX file (it could not be decoded: "
                         f"{type(exc).__name__}: {_first_line(exc)}). Re-export the model "
                         f"or check that the download is complete") from exc


def load_and_parse_model(path_or_proto, check: bool = True) -> OnnxModel:
    """Parse an ONNX file (path) or ``onnx.ModelProto`` into an :class:`OnnxModel`.

    With ``check`` (the default) the model must pass ``onnx.checker.check_model`` and
    ONNX shape inference in strict mode (the type and shape checks of every operator's
    schema, as ``onnx.checker.check_model(full_check=True)`` runs them): a model whose
    shapes do not fit together fails here, naming the node, rather than inside a
    framework, where some (TensorFlow's oneDNN kernels) abort the process; errors
    inside the body of a function or subgraph are the exception (some of ONNX's own
    function bodies fail strict inference). Without ``check``, shape inference still
    annotates what it can and stops at nothing.
    Every problem is a :class:`ModelError` (an operator ONNX does not define: an
    :class:`UnsupportedError`) naming the file and, where known, the node or tensor.
    """
    proto, source = load_model_proto(path_or_proto)
    if check:
        try:
            onnx.checker.check_model(proto)
        except _NOT_THE_MODEL:
            raise
        except Exception as exc:  # onnx.checker.ValidationError, and others on odd protos
            raise ModelError(f"{source} fails the ONNX checker: {_first_lines(exc)}. Fix "
                             f"or re-export the model (onnx.checker.check_model lists the "
                             f"problem)") from exc
        _check_opset(proto, source)
    try:
        try:
            inferred = onnx.shape_inference.infer_shapes(proto, check_type=check,
                                                         strict_mode=check)
        except onnx.shape_inference.InferenceError as exc:
            if not _inside_function_body(exc):
                raise
            # Some of ONNX's own function bodies fail strict inference (opset 13's
            # MeanVarianceNormalization: its Constant nodes), so a valid model would
            # fail here: errors inside a function's or subgraph's body are not held
            # against the model; inference then annotates what it can.
            inferred = onnx.shape_inference.infer_shapes(proto)
    except _NOT_THE_MODEL:
        raise
    except Exception as exc:  # onnx.shape_inference.InferenceError, RuntimeError, ...
        raise ModelError(f"{source}: ONNX shape inference failed: {_first_lines(exc)}. "
                         f"The shapes or element types of the named node's inputs do not "
                         f"fit its operator; fix or re-export the model") from exc
    return _object_model(inferred, source)


def _check_opset(proto: onnx.ModelProto, source: str) -> None:
    """The default domain's opset must be one the installed ONNX defines (the checker
    lets any number through, and operators would then silently take the newest
    schema)."""
    newest = onnx.defs.onnx_opset_version()
    for opset in proto.opset_import:
        if opset.domain in ("", "ai.onnx") and not 1 <= opset.version <= newest:
            raise ModelError(f"{source} imports opset {opset.version} of the default ONNX "
                             f"domain; the installed ONNX ({onnx.__version__}) defines "
                             f"opsets 1 to {newest}. Re-export the model with an opset in "
                             f"that range, or install a newer onnx")


def _inside_function_body(exc: BaseException) -> bool:
    """Whether ONNX's inference error arose in the body of a node that expands to a
    function or holds a subgraph (ONNX nests the body's error list in the node's)."""
    return str(exc).count("Inference error(s)") > 1


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].rstrip(".") if text else type(exc).__name__


def _first_lines(exc: BaseException, count: int = 3) -> str:
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    more = f" (and {len(lines) - count} more lines)" if len(lines) > count else ""
    return " ".join(line.strip() for line in lines[:count]).rstrip(".") + more


def _default_opset(proto: onnx.ModelProto) -> int:
    for opset in proto.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return opset.version
    return onnx.defs.onnx_opset_version()


#: Metadata key of a model file: a JSON list of regular expressions naming floating
#: initializers that stay constant in training (``OnnxModel.freeze``).
FROZEN_METADATA = "deep500.frozen"


def _object_model(proto: onnx.ModelProto, source: str) -> OnnxModel:
    opset = _default_opset(proto)
    domains = {o.domain: o.version for o in proto.opset_import}
    model = graph_model(proto.graph, opset, domains, source, proto=proto)
    for entry in proto.metadata_props:
        if entry.key == FROZEN_METADATA:
            try:
                patterns = json.loads(entry.value)
                if not isinstance(patterns, list):
                    raise ValueError("not a list")
            except ValueError as exc:
                raise ModelError(f"{source}: metadata {FROZEN_METADATA!r} must be a JSON list "
                                 f"of regular expressions, got {entry.value!r} ({exc})"
                                 ) from None
            try:
                model.freeze(*patterns)
            except Deep500Error as exc:
                raise ModelError(f"{source}: metadata {FROZEN_METADATA!r}: {exc}") from None
    return model


def graph_model(graph: onnx.GraphProto, opset: int, domains: dict, source: str,
                proto: onnx.ModelProto | None = None, scope: str = "") -> OnnxModel:
    """The :class:`OnnxModel` of one graph: the main graph, or (with ``scope``, the
    enclosing node and attribute for messages) the body of a control-flow node. Every
    node's graph attributes are parsed too (``OnnxOperation.subgraphs``), and a body's
    ``outer_inputs`` lists the names it reads from the enclosing scopes; the node's
    ``implicit_inputs`` (the union over its bodies) are inputs for scheduling, freeing
    and gradients like its explicit ones."""
    where = f"{source}{scope}"
    model_name = graph.name or os.path.basename(source)
    operations = []
    for index, node in enumerate(graph.node):
        name = node.name or f"{node.op_type}_{index}"
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        try:
            cls = operator_class(node.op_type, domains.get(node.domain, opset), domain)
            operations.append(cls.from_node(node, name))
        except UnsupportedError as exc:
            raise UnsupportedError(f"{where}: node '{name}' ({node.op_type}): {exc}"
                                   ) from exc
        except _NOT_THE_MODEL:
            raise
        except Exception as exc:  # attributes of an undefined type, non-UTF-8 strings
            raise ModelError(f"{where}: node '{name}' ({node.op_type}) has attributes "
                             f"that cannot be read: {type(exc).__name__}: "
                             f"{_first_line(exc)}. Fix or re-export the model") from exc
    initializers = {}
    for tensor in graph.initializer:
        try:
            initializers[tensor.name] = onnx.numpy_helper.to_array(tensor)
        except _NOT_THE_MODEL:
            raise
        except Exception as exc:  # data of another size than dims say, unknown types
            raise ModelError(f"{where}: initializer {tensor.name!r} (element type "
                             f"{tensor.data_type}, dims {list(tensor.dims)}) cannot be read: "
                             f"{type(exc).__name__}: {_first_line(exc)}. Its stored data "
                             f"does not match its dims and element type; fix or re-export "
                             f"the model") from exc
    model = OnnxModel(
        name=model_name, opset=opset,
        inputs=[_value_info(v, where) for v in graph.input],
        outputs=[_value_info(v, where) for v in graph.output],
        initializers=initializers, operations=operations,
        value_info={v.name: _value_info(v, where) for v in
                    list(graph.value_info) + list(graph.input) + list(graph.output)},
        proto=proto, source=source)
    normalize_model(model)
    for op in model.operations:
        parse_bodies(op, opset, domains, source, scope)
    model.outer_inputs = _outer_inputs(model)
    return model


def parse_bodies(op, opset: int, domains: dict | None = None, source: str = "<in memory>",
                 scope: str = "") -> None:
    """Parse a node's graph attributes into ``op.subgraphs`` and set its
    ``implicit_inputs`` (a node added to a built network gets them here too)."""
    op.subgraphs = {
        key: graph_model(value, opset, domains or {"": opset}, source,
                         scope=f"{scope}: body {key!r} of node '{op.name}' ({op.op_type})")
        for key, value in op.attributes.items() if isinstance(value, onnx.GraphProto)}
    op.implicit_inputs = [name for name in dict.fromkeys(
        n for body in op.subgraphs.values() for n in body.outer_inputs)]


def _outer_inputs(model: OnnxModel) -> list[str]:
    """Names a graph's nodes (and their bodies) read that the graph neither takes as
    input nor computes nor stores: ONNX's outer-scope references, resolved from the
    enclosing graphs when the body runs."""
    defined = {v.name for v in model.inputs} | set(model.initializers) | set(
        model.constants)
    outer = []
    for op in model.operations:
        read = list(op.present_inputs)
        for body in getattr(op, "subgraphs", {}).values():
            read.extend(body.outer_inputs)
        for name in read:
            if name and name not in defined and name not in outer:
                outer.append(name)
        defined.update(n for n in op.outputs if n)
    return outer


def _value_info(proto: onnx.ValueInfoProto, source: str) -> OnnxValueInfo:
    try:
        return OnnxValueInfo.from_proto(proto)
    except _NOT_THE_MODEL:
        raise
    except Exception as exc:  # an element type ONNX does not define
        raise ModelError(f"{source}: tensor {proto.name!r} has a type Deep500 cannot read "
                         f"(element type {proto.type.tensor_type.elem_type}): "
                         f"{type(exc).__name__}: {_first_line(exc)}. Fix or re-export the "
                         f"model") from exc
