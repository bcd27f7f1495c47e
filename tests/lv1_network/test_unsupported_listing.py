"""A model with several unsupported operators gets ONE UnsupportedError from every
training executor, listing every unsupported node (name, operator, domain, opset
version) grouped by operator, and for each operator the registered executors that do
support it (asked from the framework registry)."""
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deep500.frameworks import registry
from deep500.utils.errors import UnsupportedError
from deep500.utils.onnx_interop.support import unsupported_operators_error

OPSET = 20
# Operators no training executor builds (none is in issue 19's list of operators to add);
# onnxruntime has a kernel or inlines the function body of each.
UNSUPPORTED = {"Bernoulli": ["coin_a", "coin_b"], "CenterCropPad": ["crop"], "DFT": ["dft"]}


def three_unsupported() -> onnx.ModelProto:
    """x[4, 6] → Relu → Bernoulli (twice) → CenterCropPad → DFT → y, with supported
    nodes between the unsupported ones."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["p"], name="squash"),
             helper.make_node("Bernoulli", ["p"], ["b1"], name="coin_a", seed=1.0),
             helper.make_node("Bernoulli", ["p"], ["b2"], name="coin_b", seed=2.0),
             helper.make_node("Add", ["b1", "b2"], ["s"], name="add"),
             helper.make_node("CenterCropPad", ["s", "crop_shape"], ["c"], name="crop"),
             helper.make_node("Unsqueeze", ["c", "last"], ["c3"], name="unsqueeze"),
             helper.make_node("DFT", ["c3", "", "axis"], ["y"], name="dft")]
    initializers = [numpy_helper.from_array(np.array([4, 4], np.int64), "crop_shape"),
                    numpy_helper.from_array(np.array([2], np.int64), "last"),
                    numpy_helper.from_array(np.array(1, np.int64), "axis")]
    graph = helper.make_graph(
        nodes, "three_unsupported", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                   [4, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4, 2])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model, full_check=True)
    return model


def listed_lines(message: str) -> dict:
    """``{op_type: line}`` of the error's per-operator lines."""
    lines = {}
    for line in message.splitlines():
        match = re.match(r"\s+- (\w+) \(", line)
        if match:
            lines[match.group(1)] = line
    return lines


@pytest.mark.parametrize("framework", ["reference", "pytorch", "tensorflow"])
def test_one_error_lists_every_unsupported_operator(framework):
    entry = registry.get(framework)
    if not entry.is_installed():
        pytest.skip(entry.missing_dependency_message())
    from_onnx = entry.executor_factory()
    with pytest.raises(UnsupportedError) as info:
        from_onnx(three_unsupported())
    message = str(info.value)
    assert "does not support 3 operators of model 'three_unsupported' (4 nodes)" in message
    lines = listed_lines(message)
    assert sorted(lines) == sorted(UNSUPPORTED), message
    for op_type, nodes in UNSUPPORTED.items():
        line = lines[op_type]
        assert f"(domain ai.onnx, opset version {onnx.defs.get_schema(op_type, OPSET).since_version})" in line
        assert ("nodes " if len(nodes) > 1 else "node ") + ", ".join(f"'{n}'" for n in nodes) in line
        # the executors that support it, as the registry says, never this one
        supported, _ = registry.supporters(op_type, "", [n for n in registry.FRAMEWORKS
                                                         if n != framework])
        assert "onnxruntime" in supported
        assert line.endswith("supported by " + ", ".join(supported)) or \
            ("supported by " + ", ".join(supported) + " (not checked") in line, line
        assert framework not in line.split("supported by")[1].split("(not checked")[0]
    # supported nodes are not listed
    for name in ("squash", "add", "unsqueeze"):
        assert f"'{name}'" not in message


def test_single_unsupported_operator_reads_as_one_sentence():
    model = three_unsupported()
    del model.graph.node[1:]   # only Sigmoid is left: replace the rest by one DFT
    model.graph.node.extend([
        helper.make_node("Unsqueeze", ["p", "last"], ["p3"], name="unsqueeze"),
        helper.make_node("DFT", ["p3", "", "axis"], ["y"], name="dft")])
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                 [4, 6, 2]))
    with pytest.raises(UnsupportedError) as info:
        registry.get("reference").executor_factory()(model)
    message = str(info.value)
    assert "\n" not in message
    assert re.search(r"does not support operator DFT \(opset version \d+\), used by node "
                     r"'dft' of model 'three_unsupported'.*supported by onnxruntime", message)


class _Op:
    def __init__(self, name, op_type, domain="", since_version=1):
        self.name, self.op_type, self.domain, self.since_version = (
            name, op_type, domain, since_version)


def test_error_groups_by_operator_and_names_custom_domains():
    ops = [_Op("a", "Frob", "my.ops"), _Op("b", "Mod", "", 13), _Op("c", "Frob", "my.ops")]
    calls = []

    def supporters(op_type, domain, exclude):
        calls.append((op_type, domain, exclude))
        return "supported by nobody"

    message = str(unsupported_operators_error("X", ops, exclude="x", supporters=supporters))
    lines = listed_lines(message)
    assert lines["Frob"].startswith("  - Frob (domain my.ops, opset version 1): nodes 'a', 'c'")
    assert lines["Mod"].startswith("  - Mod (domain ai.onnx, opset version 13): node 'b'")
    assert calls == [("Frob", "my.ops", "x"), ("Mod", "", "x")]
    assert message.index("Frob") < message.index("Mod")   # first-use order


def preview_training_model() -> onnx.ModelProto:
    """Adagrad twice and Momentum: operators of onnx's preview training domain, which
    onnxruntime's inference build lacks."""
    shapes = {"R": [], "T": [], "X": [3], "G": [3], "H": [3], "V": [3]}
    types = {"T": TensorProto.INT64}
    nodes = [helper.make_node("Adagrad", ["R", "T", "X", "G", "H"], ["X1", "H1"],
                              domain="ai.onnx.preview.training", name="ada_1"),
             helper.make_node("Adagrad", ["R", "T", "X1", "G", "H1"], ["X2", "H2"],
                              domain="ai.onnx.preview.training", name="ada_2"),
             helper.make_node("Relu", ["X2"], ["X3"], name="relu"),
             helper.make_node("Momentum", ["R", "T", "X3", "G", "V"], ["X4", "V1"],
                              domain="ai.onnx.preview.training", name="momentum",
                              alpha=0.9, beta=1.0, mode="standard", norm_coefficient=0.0)]
    graph = helper.make_graph(
        nodes, "preview_training",
        [helper.make_tensor_value_info(n, types.get(n, TensorProto.FLOAT), shape)
         for n, shape in shapes.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("X4", "V1")])
    return helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", OPSET), helper.make_opsetid("ai.onnx.preview.training", 1)])


def test_onnxruntime_adds_every_operator_it_does_not_declare():
    entry = registry.get("onnxruntime")
    if not entry.is_installed():
        pytest.skip(entry.missing_dependency_message())
    with pytest.raises(UnsupportedError) as info:
        entry.executor_factory()(preview_training_model())
    message = str(info.value)
    assert message.splitlines()[0].startswith("onnxruntime")   # its own message first
    lines = listed_lines(message)
    assert sorted(lines) == ["Adagrad", "Momentum"], message
    assert "(domain ai.onnx.preview.training, opset version 1): nodes 'ada_1', 'ada_2'" \
        in lines["Adagrad"]
    assert "(domain ai.onnx.preview.training, opset version 1): node 'momentum'" \
        in lines["Momentum"]
    assert "'relu'" not in message
