"""The normalised form of parsed models (deep500.utils.onnx_interop.normalize): older
opsets' nodes become the newest opset's, computing the same thing. The oracle is
onnx.reference.ReferenceEvaluator run on the file as written and on the normalised
graph written back as ONNX."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from deep500.utils.errors import UnsupportedError
from deep500.utils.onnx_interop.normalize import normalize_model
from deep500.utils.onnx_interop.parser import load_and_parse_model
from deep500.utils.onnx_interop.schemas import operator_class

F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, opset, initializers=()):
    """A model whose outputs (names, or (name, shape)) are typed as given or as ONNX
    shape inference finds them."""
    graph = helper.make_graph(nodes, "legacy",
                              [helper.make_tensor_value_info(n, F32, s) for n, s in inputs],
                              [helper.make_tensor_value_info(o[0], F32, o[1])
                               if isinstance(o, tuple) else onnx.ValueInfoProto(name=o)
                               for o in outputs],
                              list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    graph = onnx.shape_inference.infer_shapes(model).graph
    inferred = {v.name: v for v in list(graph.value_info) + list(graph.output)
                if v.type.tensor_type.HasField("shape")}
    for output in model.graph.output:
        if not output.type.tensor_type.HasField("shape"):
            output.CopyFrom(inferred[output.name])
    return model


def _normalised_proto(parsed):
    """The normalised model written back as ONNX at the newest opset."""
    nodes = [op.to_node() for op in parsed.operations]
    graph = parsed.proto.graph
    initializers = list(graph.initializer) + [numpy_helper.from_array(v, n) for n, v in
                                              parsed.constants.items()]
    new = helper.make_graph(nodes, "normalised", list(graph.input), list(graph.output),
                            initializers)
    return helper.make_model(new, opset_imports=[
        helper.make_opsetid("", onnx.defs.onnx_opset_version())])


def _check_same_results(model, feeds, tolerance=1e-6, expected=None):
    parsed = load_and_parse_model(model)
    if expected is None:
        expected = ReferenceEvaluator(model).run(None, feeds)
    got = ReferenceEvaluator(_normalised_proto(parsed)).run(None, feeds)
    for e, g in zip(expected, got):
        assert e.shape == g.shape and e.dtype == g.dtype
        np.testing.assert_allclose(g, e, rtol=tolerance, atol=tolerance)
    return parsed


X = np.random.default_rng(0).standard_normal((3, 3, 5)).astype(np.float32)


def _coerced(op_type, x, axis):
    """Softmax/LogSoftmax/Hardmax of opset < 13 by their spec: over the rows of x
    flattened to 2-D at ``axis`` (onnx's evaluator applies opset 13's rule to every
    version, so it is no oracle here)."""
    rows = x.reshape(int(np.prod(x.shape[:axis % x.ndim])), -1).astype(np.float64)
    if op_type == "Hardmax":
        result = np.eye(rows.shape[1])[rows.argmax(axis=1)]
    else:
        shifted = rows - rows.max(axis=1, keepdims=True)
        log = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        result = log if op_type == "LogSoftmax" else np.exp(log)
    return result.reshape(x.shape).astype(x.dtype)


def test_opset9_attributes_become_constant_inputs():
    nodes = [
        helper.make_node("Slice", ["x"], ["s"], starts=[0, 1], ends=[2, 100], axes=[0, 2]),
        helper.make_node("Clip", ["s"], ["c"], min=-0.5, max=0.8),
        helper.make_node("Pad", ["c"], ["p"], pads=[0, 1, 0, 0, 1, 0], value=0.25),
        helper.make_node("Unsqueeze", ["p"], ["u"], axes=[0]),
        helper.make_node("Squeeze", ["u"], ["q"], axes=[0]),
        helper.make_node("Split", ["q"], ["a", "b"], axis=2, split=[1, 3]),
        helper.make_node("ReduceSum", ["b"], ["r"], axes=[2], keepdims=0),
        helper.make_node("ReduceMean", ["q"], ["m"], axes=[1, 2]),
        helper.make_node("Dropout", ["m"], ["d"], ratio=0.3),
        helper.make_node("Split", ["a"], ["a1", "a2"], axis=0),
    ]
    model = _model(nodes, [("x", [3, 3, 5])], ["a1", "a2", "r", "d"], opset=9)
    parsed = _check_same_results(model, {"x": X})
    for op in parsed.operations:
        assert type(op) is operator_class(op.op_type), op   # the newest opset's class
        assert op.original_version <= 9
        assert not set(op.given_attributes) & {"starts", "ends", "axes", "min", "max",
                                               "pads", "value", "split", "ratio"}
    slice_op = parsed.operation("Slice_0")
    assert [parsed.constants[n].tolist() for n in slice_op.inputs[1:4]] == [
        [0, 1], [2, 100], [0, 2]]
    clip = parsed.operation("Clip_1")
    assert parsed.constants[clip.inputs[1]].dtype == np.float32
    assert parsed.operation("Split_9").attributes["num_outputs"] == 2
    # constants are neither initializers nor parameters
    assert not set(parsed.constants) & (set(parsed.initializers) | set(parsed.parameters))


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis,shape", [(1, [3, 3, 5]), (0, [3, 3, 5]), (2, [3, 3, 5]),
                                        (-1, [3, 3, 5]), (1, ["n", 3, 5])])
def test_coerced_to_2d_before_opset13(op_type, axis, shape):
    model = _model([helper.make_node(op_type, ["x"], ["y"], axis=axis)],
                   [("x", shape)], ["y"], opset=11)
    parsed = _check_same_results(model, {"x": X}, expected=[_coerced(op_type, X, axis)])
    core = [op for op in parsed.operations if op.op_type == op_type]
    assert len(core) == 1 and core[0].attributes["axis"] == -1
    assert core[0].name == f"{op_type}_0" and core[0].original_version == 11
    if axis % 3 == 2:
        assert len(parsed.operations) == 1   # the axis is last: one opset-13 node
    else:
        kinds = [op.op_type for op in parsed.operations]
        assert kinds[-3:] == ["Flatten", op_type, "Reshape"]
        assert ("Shape" in kinds) == (shape[0] == "n")


def test_opset_one_to_six_forms():
    w = numpy_helper.from_array(np.ones(5, np.float32), "w")
    nodes = [
        helper.make_node("Add", ["x", "w"], ["a"], broadcast=1, axis=1),
        helper.make_node("Mul", ["a", "a"], ["m"]),
        helper.make_node("Relu", ["m"], ["y"], consumed_inputs=[0]),
        helper.make_node("Reshape", ["y"], ["r"], shape=[3, 15]),
        helper.make_node("TopK", ["r"], ["values", "indices"], k=2),
    ]
    model = _model(nodes, [("x", [9, 5])], [("values", [3, 2])], opset=4, initializers=[w])
    # onnx's evaluator has no Reshape-1: the expected values by the spec
    y = np.maximum((X.reshape(9, 5) + 1) ** 2, 0).reshape(3, 15)
    expected = -np.sort(-y, axis=1)[:, :2]
    parsed = _check_same_results(model, {"x": X.reshape(9, 5)}, tolerance=1e-5,
                                 expected=[expected])
    assert parsed.operation("Relu_2").given_attributes == {}
    assert "broadcast" not in parsed.operation("Add_0").given_attributes
    assert parsed.constants[parsed.operation("Reshape_3").inputs[1]].tolist() == [3, 15]
    topk = parsed.operation("TopK_4")
    assert parsed.constants[topk.inputs[1]].tolist() == [2]


def test_batch_normalization_before_opset14():
    stats = [numpy_helper.from_array(np.full(3, v, np.float32), n) for n, v in
             (("scale", 1.5), ("bias", 0.1), ("mean", 0.2), ("var", 2.0))]
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"],
                            ["y"], is_test=1, spatial=1, epsilon=1e-3)
    model = _model([node], [("x", [3, 3, 5])], ["y"], opset=6, initializers=stats)
    parsed = _check_same_results(model, {"x": X}, tolerance=1e-5)
    bn = parsed.operations[0]
    assert bn.attributes["training_mode"] == 0 and bn.original_version == 6
    training = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"],
                                ["y", "running_mean", "running_var", "saved_mean", "saved_var"])
    parsed = load_and_parse_model(_model([training], [("x", [3, 3, 5])], ["y"], opset=9,
                                         initializers=stats))
    assert parsed.operations[0].attributes["training_mode"] == 1
    assert parsed.operations[0].outputs == ["y", "running_mean", "running_var"]
    uses_saved = helper.make_node("Neg", ["saved_var"], ["z"])
    with pytest.raises(UnsupportedError, match="saved_mean/saved_var"):
        load_and_parse_model(_model([training, uses_saved], [("x", [3, 3, 5])], ["y", ("z", [3])],
                                    opset=9, initializers=stats))


def test_legacy_forms_without_a_modern_equivalent_are_refused():
    w = numpy_helper.from_array(np.ones(3, np.float32), "w")
    add = helper.make_node("Add", ["x", "w"], ["y"], name="bias_add", broadcast=1, axis=1)
    with pytest.raises(UnsupportedError, match="bias_add.*broadcast=1, axis=1.*opset 7"):
        load_and_parse_model(_model([add], [("x", [3, 3, 5])], ["y"], opset=6,
                                    initializers=[w]), check=False)
    stats = [numpy_helper.from_array(np.ones(3, np.float32), n) for n in "sbmv"]
    bn = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                          name="bn", spatial=0)
    with pytest.raises(UnsupportedError, match="bn.*spatial=0"):
        load_and_parse_model(_model([bn], [("x", [3, 3])], ["y"], opset=7,
                                    initializers=stats))


def test_normalisation_is_idempotent_and_keeps_new_models_as_they_are():
    nodes = [helper.make_node("Squeeze", ["x"], ["q"], axes=[0]),
             helper.make_node("Softmax", ["q"], ["y"], axis=0)]
    parsed = load_and_parse_model(_model(nodes, [("x", [1, 3, 5])], ["y"], opset=11))
    before = [(type(op), op.inputs, op.outputs, op.given_attributes)
              for op in parsed.operations]
    constants = dict(parsed.constants)
    normalize_model(parsed)
    assert [(type(op), op.inputs, op.outputs, op.given_attributes)
            for op in parsed.operations] == before
    assert parsed.constants.keys() == constants.keys()
    modern = _model([helper.make_node("Softmax", ["x"], ["y"], axis=0)], [("x", [2, 3])],
                    ["y"], opset=17)
    op = load_and_parse_model(modern).operations[0]
    assert op.since_version == op.original_version == 13


@pytest.mark.parametrize("framework", ["reference", "pytorch", "tensorflow"])
def test_executors_run_the_normalised_form(framework):
    """Every executor computes a legacy model as onnx's reference does, with no
    per-opset code of its own."""
    from deep500.frameworks import registry
    entry = registry.get(framework)
    if not entry.is_installed():
        pytest.skip(entry.missing_dependency_message())
    module = entry.load()
    nodes = [
        helper.make_node("Slice", ["x"], ["s"], starts=[0], ends=[2], axes=[0]),
        helper.make_node("Clip", ["s"], ["c"], min=-0.5, max=0.8),
        helper.make_node("Pad", ["c"], ["p"], pads=[0, 1, 0, 0, 1, 0], value=0.25),
        helper.make_node("Softmax", ["p"], ["y"], axis=1),
    ]
    model = _model(nodes, [("x", [3, 3, 5])], ["p", "y"], opset=9)
    padded = ReferenceEvaluator(model).run(None, {"x": X})[0]
    expected = _coerced("Softmax", padded, 1)
    got = module.from_onnx(model).inference({"x": X})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("framework", ["reference", "pytorch", "tensorflow"])
def test_a_node_added_to_a_built_network_is_normalised(framework):
    """network.add_node of an older opset's node (ReduceSum-11 with an ``axes``
    attribute, Clip-6 with ``min``/``max``) runs in the normalised form."""
    from deep500.frameworks import registry
    entry = registry.get(framework)
    if not entry.is_installed():
        pytest.skip(entry.missing_dependency_message())
    model = _model([helper.make_node("Relu", ["x"], ["r"])], [("x", [3, 3, 5])], ["r"],
                   opset=17)
    executor = entry.load().from_onnx(model)
    network = executor.network
    network.add_node(operator_class("ReduceSum", 11)("sum", ["r"], ["s"],
                                                      {"axes": [2], "keepdims": 0}))
    network.add_node(operator_class("Clip", 6)("clip", ["s"], ["c"],
                                               {"min": 0.5, "max": 2.0}))
    network.add_output("c")
    got = executor.inference({"x": X})["c"]
    np.testing.assert_allclose(got, np.clip(np.maximum(X, 0).sum(axis=2), 0.5, 2.0),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("key,value,dtype", [("value_float", 2.5, np.float32),
                                             ("value_floats", [1.0, -2.0], np.float32),
                                             ("value_int", 7, np.int64),
                                             ("value_ints", [3, 4, 5], np.int64)])
def test_constant_lists_become_a_value_tensor(key, value, dtype):
    model = _model([helper.make_node("Constant", [], ["c"], **{key: value})], [], ["c"],
                   opset=17)
    op = load_and_parse_model(model).operations[0]
    assert set(op.given_attributes) == {"value"}
    array = numpy_helper.to_array(op.given_attributes["value"])
    assert array.dtype == dtype and array.tolist() == value
