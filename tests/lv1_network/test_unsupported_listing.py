"""A model with several unsupported operators gets ONE UnsupportedError from every
training executor, listing every unsupported node (name, operator, domain, opset
version) grouped by operator, and for each operator the registered executors that do
support it (asked from the framework registry)."""
import re

import onnx
import pytest
from onnx import TensorProto, helper

from deep500.frameworks import registry
from deep500.utils.errors import UnsupportedError
from deep500.utils.onnx_interop.support import unsupported_operators_error

OPSET = 20
# ONNX operators taking one float tensor [4, 6, 1] to one of the same shape, with no
# required attribute, rarest first: each test picks the first three an executor does
# not build, so it keeps testing the listing while executors gain operators.
CANDIDATES = ("Bernoulli", "RandomUniformLike", "RandomNormalLike", "GlobalLpPool",
              "MeanVarianceNormalization", "LpNormalization", "Hardmax",
              "Shrink", "ThresholdedRelu", "Celu", "Mish", "Softsign", "HardSwish", "Selu",
              "Atanh", "Acosh", "Asinh", "Cosh", "Sinh", "Atan", "Acos", "Asin", "Tan",
              "HardSigmoid", "Softplus", "Elu", "Round", "Sign", "Cos", "Sin")


def unsupported_by(framework: str) -> list[str]:
    """Three candidates the framework's executor does not build (its visitor's
    ``visit_<op>`` methods, as the executor itself decides)."""
    entry = registry.get(framework)
    visitor = registry._attribute(entry.visitor, entry)()
    missing = [op for op in CANDIDATES if not visitor.supports(op)]
    if len(missing) < 3:
        pytest.skip(f"{framework} builds all but {missing} of {CANDIDATES}")
    return missing[:3]


def three_unsupported(ops) -> onnx.ModelProto:
    """x[4, 6, 1] → Relu → A (twice) → Relu → B → Relu → C → y: three unsupported
    operators, the first used by two nodes, with supported nodes between them."""
    a, b, c = ops
    chain = [("Relu", "relu_in"), (a, "first_a"), (a, "first_b"), ("Relu", "relu_mid"),
             (b, "second"), ("Relu", "relu_out"), (c, "third")]
    nodes = [helper.make_node(op, [f"t{i}"], [f"t{i + 1}" if i + 1 < len(chain) else "y"],
                              name=name) for i, (op, name) in enumerate(chain)]
    graph = helper.make_graph(
        nodes, "three_unsupported",
        [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [4, 6, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6, 1])])
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
    ops = unsupported_by(framework)
    expected = {ops[0]: ["first_a", "first_b"], ops[1]: ["second"], ops[2]: ["third"]}
    with pytest.raises(UnsupportedError) as info:
        entry.executor_factory()(three_unsupported(ops))
    message = str(info.value)
    assert "does not support 3 operators of model 'three_unsupported' (4 nodes)" in message
    lines = listed_lines(message)
    assert sorted(lines) == sorted(expected), message
    for op_type, nodes in expected.items():
        line = lines[op_type]
        version = onnx.defs.get_schema(op_type, OPSET).since_version
        assert f"{op_type} (domain ai.onnx, opset version {version}): " in line
        assert ("nodes " if len(nodes) > 1 else "node ") + ", ".join(
            f"'{n}'" for n in nodes) + ";" in line
        # the executors that support it, as the registry says, never this one
        supported, _ = registry.supporters(op_type, "", [n for n in registry.FRAMEWORKS
                                                         if n != framework])
        words = ("supported by " + ", ".join(supported) if supported
                 else "supported by no other registered executor")
        assert line.endswith(words) or f"{words} (not checked" in line, line
        assert framework not in line.split("supported by")[1].split("(not checked")[0]
    for name in ("relu_in", "relu_mid", "relu_out"):   # supported nodes are not listed
        assert f"'{name}'" not in message


def test_single_unsupported_operator_reads_as_one_sentence():
    op = unsupported_by("reference")[0]
    model = three_unsupported([op, op, op])
    del model.graph.node[3:]
    model.graph.node[-1].output[0] = "y"
    with pytest.raises(UnsupportedError) as info:
        registry.get("reference").executor_factory()(model)
    message = str(info.value)
    assert "\n" not in message
    assert re.search(rf"does not support operator {op} \(opset version \d+\), used by 2 "
                     rf"nodes: 'first_a', 'first_b' of model 'three_unsupported'; supported "
                     rf"by ", message), message


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
