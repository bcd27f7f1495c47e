"""Sequence- and optional-typed values in the TensorFlow executor (the sequence family,
``deep500/frameworks/tensorflow/ops/sequence.py``, and the values of
``_value_kinds.py``): whole models in both modes against ONNX's ReferenceEvaluator, or
onnxruntime where that evaluator departs from the spec (it inserts at position n at the
front and carries an optional as a one-element list). Values are moved, not computed:
they must be equal exactly. Gradients flow through the tensors a sequence holds."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

tf = pytest.importorskip("tensorflow")

import deep500.frameworks.tensorflow as d5tf  # noqa: E402
from deep500.lv1_network import gradient_name  # noqa: E402
from deep500.utils.errors import Deep500Error, ShapeError  # noqa: E402
from tests.frameworks.reference.onnx_oracle import (onnx_model_run,  # noqa: E402
                                                    onnxruntime_model_run)

FLOAT = TensorProto.FLOAT
MODES = ["eager", "function"]


def tensor_info(name, shape, elem=FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def sequence_info(name, elem=FLOAT, rank=1):
    return helper.make_tensor_sequence_value_info(name, elem, [None] * rank)


def optional_info(name, element):
    return helper.make_value_info(name, helper.make_optional_type_proto(element))


def model_of(nodes, inputs, outputs, initializers=(), opset=18):
    graph = helper.make_graph(nodes, "sequences", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def assert_same(expected, actual):
    """Equal values: arrays exactly (dtype included), sequences element by element,
    None as None."""
    if expected is None:
        assert actual is None
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected)
        for e, a in zip(expected, actual):
            assert_same(e, a)
    else:
        assert isinstance(actual, np.ndarray)
        assert actual.dtype == np.asarray(expected).dtype
        np.testing.assert_array_equal(actual, expected)


def check_model(model, feeds, mode, oracle=onnx_model_run):
    expected = oracle(model, feeds)
    outputs = d5tf.from_onnx(model, mode=mode).inference(feeds)
    for info, want in zip(model.graph.output, expected):
        assert_same(want, outputs[info.name])
    return outputs


def arrays(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("index", [0, 2, -1, -3])
def test_construct_at_and_length(index, mode):
    nodes = [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]),
             helper.make_node("SequenceAt", ["s", "i"], ["y"]),
             helper.make_node("SequenceLength", ["s"], ["n"])]
    shapes = [(2, 3), (4,), (1, 1, 2)]
    model = model_of(nodes, [tensor_info("a", [2, 3]), tensor_info("b", [4]),
                             tensor_info("c", [1, 1, 2]),
                             tensor_info("i", [], TensorProto.INT64)],
                     [tensor_info("y", [None] * len(shapes[index])),
                      tensor_info("n", [], TensorProto.INT64)])
    a, b, c = arrays(*shapes)
    check_model(model, {"a": a, "b": b, "c": c, "i": np.array(index)}, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("index", [None, 0, 2, -1])
def test_insert_and_erase(index, mode):
    at = [] if index is None else ["i"]
    nodes = [helper.make_node("SequenceInsert", ["s", "x"] + at, ["t"]),
             helper.make_node("SequenceErase", ["t"] + at, ["u"])]
    graph_inputs = [sequence_info("s"), tensor_info("x", [5])]
    feeds = {"s": arrays((2,), (3,)), "x": arrays((5,), seed=1)[0]}
    if index is not None:
        graph_inputs.append(tensor_info("i", [], TensorProto.INT64))
        feeds["i"] = np.array(index)
    model = model_of(nodes, graph_inputs, [sequence_info("t"), sequence_info("u")])
    check_model(model, feeds, mode, onnxruntime_model_run)


@pytest.mark.parametrize("mode", MODES)
def test_empty_sequence_then_inserts(mode):
    nodes = [helper.make_node("SequenceEmpty", [], ["e"], dtype=FLOAT),
             helper.make_node("SequenceInsert", ["e", "x"], ["s"]),
             helper.make_node("SequenceInsert", ["s", "x"], ["t"]),
             helper.make_node("SequenceLength", ["e"], ["n"])]
    model = model_of(nodes, [tensor_info("x", [2, 2])],
                     [sequence_info("t", rank=2), tensor_info("n", [], TensorProto.INT64)])
    check_model(model, {"x": arrays((2, 2))[0]}, mode)


@pytest.mark.parametrize("axis,new_axis", [(0, 0), (1, 0), (-1, 0), (0, 1), (2, 1), (-3, 1)])
def test_concat_from_sequence(axis, new_axis):
    node = helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=axis, new_axis=new_axis)
    model = model_of([node], [sequence_info("s", rank=2)],
                     [tensor_info("y", [None] * (2 + new_axis))])
    check_model(model, {"s": arrays((2, 3), (2, 3), (2, 3))}, "eager")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("split,attributes", [
    (None, {}), (None, {"keepdims": 0}), (np.array(2), {}), (np.array([1, 3, 2]), {}),
    (None, {"axis": 1}), (np.array([2, 1]), {"axis": -1})])
def test_split_to_sequence(split, attributes, mode):
    x = arrays((6, 3))[0]
    inputs = [tensor_info("x", [6, 3])]
    feeds = {"x": x}
    initializers = []
    if split is not None:
        initializers.append(numpy_helper.from_array(split.astype(np.int64), "split"))
    node = helper.make_node("SplitToSequence", ["x"] + (["split"] if split is not None
                                                         else []), ["s"], **attributes)
    rank = 1 if attributes.get("keepdims") == 0 else 2
    model = model_of([node], inputs, [sequence_info("s", rank=rank)], initializers)
    check_model(model, feeds, mode)


@pytest.mark.parametrize("mode", MODES)
def test_sequence_map_with_two_sequences_and_a_tensor(mode):
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["ab"]),
         helper.make_node("Mul", ["ab", "c"], ["out"])], "body",
        [tensor_info("a", [None]), tensor_info("b", [None]), tensor_info("c", [1])],
        [tensor_info("out", [None])])
    node = helper.make_node("SequenceMap", ["s", "t", "c"], ["y"], body=body)
    model = model_of([node], [sequence_info("s"), sequence_info("t"), tensor_info("c", [1])],
                     [sequence_info("y")])
    feeds = {"s": arrays((2,), (3,)), "t": arrays((2,), (3,), seed=1),
             "c": np.array([2.0], np.float32)}
    check_model(model, feeds, mode, onnxruntime_model_run)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("value", [None, "tensor", "sequence"])
def test_optionals(value, mode):
    """OptionalHasElement of a fed optional (None: empty), then Optional and
    OptionalGetElement pass a tensor through."""
    element = (helper.make_tensor_type_proto(FLOAT, [2]) if value != "sequence" else
               helper.make_sequence_type_proto(helper.make_tensor_type_proto(FLOAT, [2])))
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("Optional", ["x"], ["wrapped"]),
             helper.make_node("OptionalGetElement", ["wrapped"], ["y"])]
    model = model_of(nodes, [optional_info("o", element), tensor_info("x", [2])],
                     [tensor_info("has", [], TensorProto.BOOL), tensor_info("y", [2])])
    fed = {None: None, "tensor": arrays((2,))[0], "sequence": arrays((2,), (2,))}[value]
    outputs = d5tf.from_onnx(model, mode=mode).inference({"o": fed, "x": arrays((2,))[0]})
    assert outputs["has"].dtype == np.bool_ and bool(outputs["has"]) == (value is not None)
    assert_same(arrays((2,))[0], outputs["y"])


def test_an_omitted_optional_has_no_element():
    node = helper.make_node("OptionalHasElement", [""], ["has"])
    outputs = d5tf.from_onnx(model_of([node], [], [tensor_info("has", [],
                                                               TensorProto.BOOL)])
                             ).inference({})
    assert outputs["has"].dtype == np.bool_ and not outputs["has"]


@pytest.mark.parametrize("mode", MODES)
def test_a_loop_carries_a_sequence(mode):
    """Loop inserts its iteration counter into a loop-carried sequence (the trip count is
    a constant, so a traced function unrolls it)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["value"], to=FLOAT),
         helper.make_node("SequenceInsert", ["seq_in", "value"], ["seq_out"])], "body",
        [tensor_info("i", [], TensorProto.INT64), tensor_info("cond_in", [], TensorProto.BOOL),
         sequence_info("seq_in", rank=0)],
        [tensor_info("cond_out", [], TensorProto.BOOL), sequence_info("seq_out", rank=0)])
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=FLOAT),
             helper.make_node("Loop", ["trips", "", "empty"], ["out"], body=body)]
    model = model_of(nodes, [], [sequence_info("out", rank=0)],
                     [numpy_helper.from_array(np.array(4, np.int64), "trips")])
    check_model(model, {}, mode, onnxruntime_model_run)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cond", [True, False])
def test_if_returns_a_sequence(cond, mode):
    then_branch = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x", "x"], ["s"])], "then", [],
        [sequence_info("s")])
    else_branch = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x"], ["t"])], "else", [],
        [sequence_info("t")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_branch,
                            else_branch=else_branch)
    model = model_of([node], [tensor_info("c", [], TensorProto.BOOL), tensor_info("x", [3])],
                     [sequence_info("y")])
    check_model(model, {"c": np.array(cond), "x": arrays((3,))[0]}, mode)


@pytest.mark.parametrize("mode", MODES)
def test_gradients_flow_through_a_sequences_tensors(mode):
    """loss = Σ ConcatFromSequence(SequenceConstruct(w·2, w)): d loss / d w = 3 per
    element (float64: exact)."""
    w = np.array([0.5, -1.0, 2.0])
    nodes = [helper.make_node("Mul", ["w", "two"], ["w2"]),
             helper.make_node("SequenceConstruct", ["w2", "w"], ["s"]),
             helper.make_node("ConcatFromSequence", ["s"], ["joined"], axis=0),
             helper.make_node("ReduceSum", ["joined"], ["loss"], keepdims=0)]
    model = model_of(nodes, [], [tensor_info("loss", [], TensorProto.DOUBLE)],
                     [numpy_helper.from_array(w, "w"),
                      numpy_helper.from_array(np.array(2.0), "two")])
    result = d5tf.from_onnx(model, mode=mode).inference_and_backprop({}, "loss")
    np.testing.assert_allclose(result["loss"], 3 * w.sum(), rtol=1e-15)
    np.testing.assert_array_equal(result[gradient_name("w")], np.full(3, 3.0))


def test_sequence_errors_say_what_and_where():
    nodes = [helper.make_node("SequenceConstruct", ["x"], ["s"], name="build"),
             helper.make_node("SequenceAt", ["s", "i"], ["y"], name="pick")]
    model = model_of(nodes, [tensor_info("x", [2]), tensor_info("i", [], TensorProto.INT64)],
                     [tensor_info("y", [2])])
    executor = d5tf.from_onnx(model)
    with pytest.raises(ShapeError, match=r"'pick'.*position \[3\].*\[-1, 0\]"):
        executor.inference({"x": arrays((2,))[0], "i": np.array(3)})
    with pytest.raises(Deep500Error, match="empty"):
        node = helper.make_node("OptionalGetElement", ["o"], ["y"], name="get")
        d5tf.from_onnx(model_of(
            [node], [optional_info("o", helper.make_tensor_type_proto(FLOAT, [2]))],
            [tensor_info("y", [2])])).inference({"o": None})


def test_a_traced_loop_with_a_run_time_condition_cannot_carry_a_sequence():
    """A tf.while_loop carries tensors only: a Loop whose condition is known only when
    the traced function runs, carrying a sequence, names the node and the way out."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["value"], to=FLOAT),
         helper.make_node("SequenceInsert", ["seq_in", "value"], ["seq_out"])], "body",
        [tensor_info("i", [], TensorProto.INT64), tensor_info("cond_in", [], TensorProto.BOOL),
         sequence_info("seq_in", rank=0)],
        [tensor_info("cond_out", [], TensorProto.BOOL), sequence_info("seq_out", rank=0)])
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=FLOAT),
             helper.make_node("Loop", ["trips", "go", "empty"], ["out"], body=body,
                              name="collect")]
    model = model_of(nodes, [tensor_info("go", [], TensorProto.BOOL)],
                     [sequence_info("out", rank=0)],
                     [numpy_helper.from_array(np.array(4, np.int64), "trips")])
    eager = d5tf.from_onnx(model).inference({"go": np.array(True)})
    assert len(eager["out"]) == 4
    with pytest.raises(Deep500Error, match=r"(?s)'collect'.*mode='eager'"):
        d5tf.from_onnx(model, mode="function").inference({"go": np.array(True)})
