"""The oracle of the reference-operator tests: onnx's own ``ReferenceEvaluator`` run on a
model of one node (an independent implementation written from the same spec)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator


def onnx_run(op_type: str, inputs: list, attributes: dict | None = None,
             outputs: int = 1, opset: int | None = None, domain: str = "",
             domain_opset: int = 1) -> list:
    """The outputs of ONNX ``op_type`` on ``inputs`` (None: an omitted optional input);
    an operator of another ``domain`` than ai.onnx is taken from its ``domain_opset``."""
    names = ["" if x is None else f"x{i}" for i, x in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op_type, names, [f"y{i}" for i in range(outputs)],
                            domain=domain or None, **(attributes or {}))
    graph_inputs = [helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype), np.shape(x))
        for name, x in zip(names, inputs) if name]
    graph_outputs = [helper.make_tensor_value_info(f"y{i}", onnx.TensorProto.UNDEFINED, None)
                     for i in range(outputs)]
    graph = helper.make_graph([node], "oracle", graph_inputs, graph_outputs)
    opsets = [helper.make_opsetid("", opset or onnx.defs.onnx_opset_version())]
    if domain:
        opsets.append(helper.make_opsetid(domain, domain_opset))
    model = helper.make_model(graph, opset_imports=opsets)
    feeds = {name: np.asarray(x) for name, x in zip(names, inputs) if name}
    return ReferenceEvaluator(model).run(None, feeds)


def onnxruntime_run(op_type: str, inputs: list, attributes: dict | None = None,
                    outputs: int = 1, opset: int = 18, domain: str = "",
                    domain_opset: int = 1) -> list:
    """``onnx_run`` on onnxruntime, for operators where ONNX's evaluator departs from the
    specification."""
    node = helper.make_node(op_type, [f"x{i}" for i in range(len(inputs))],
                            [f"y{i}" for i in range(outputs)], domain=domain or None,
                            **(attributes or {}))
    graph_inputs = [helper.make_tensor_value_info(
        f"x{i}", helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype), np.shape(x))
        for i, x in enumerate(inputs)]
    graph_outputs = [helper.make_empty_tensor_value_info(f"y{i}") for i in range(outputs)]
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, domain_opset))
    model = helper.make_model(helper.make_graph([node], "oracle", graph_inputs, graph_outputs),
                              opset_imports=opsets)
    model.ir_version = 8   # what onnxruntime reads at least
    return onnxruntime_model_run(model, {f"x{i}": np.asarray(x) for i, x in enumerate(inputs)})


def onnx_model_run(model: onnx.ModelProto, feeds: dict) -> list:
    """The outputs of ``model`` under ONNX's ReferenceEvaluator (sequences as lists)."""
    return ReferenceEvaluator(model).run(None, feeds)


def onnxruntime_model_run(model: onnx.ModelProto, feeds: dict) -> list:
    """The outputs of ``model`` under onnxruntime: sequences as lists, an optional as its
    element or None, as the reference executor carries them. (ONNX's ReferenceEvaluator
    wraps an optional's element in a list and reads no outer-scope names in a
    SequenceMap body.)"""
    import onnxruntime
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, feeds)
