"""Sequence- and optional-typed values in the reference executor (the sequence family:
SequenceEmpty/Construct/At/Insert/Erase/Length, ConcatFromSequence, SplitToSequence,
SequenceMap, Optional, OptionalGetElement, OptionalHasElement), whole models against
ONNX's ReferenceEvaluator, or onnxruntime where that evaluator departs from the spec
(it inserts at position n at the front, carries an optional as a one-element list, and
reads no outer-scope names in SequenceMap bodies); gradients pass through an optional's
tensor and are refused through a sequence."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500.frameworks.reference as d5ref
from deep500.frameworks.reference.operators._op_common_sequence import value_nbytes
from deep500.lv1_network.network import gradient_name
from deep500.utils.errors import Deep500Error, ModelError, ShapeError, UnsupportedError
from tests.frameworks.reference.onnx_oracle import onnx_model_run, onnxruntime_model_run

FLOAT = TensorProto.FLOAT


def tensor_info(name, shape, elem=FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def sequence_info(name, elem=FLOAT, rank=1):
    """A sequence of tensors of ``rank`` dimensions of any size (ONNX's checker asks for
    a shape)."""
    return helper.make_tensor_sequence_value_info(name, elem, [None] * rank)


def optional_info(name, element):
    return helper.make_value_info(name, helper.make_optional_type_proto(element))


def model_of(nodes, inputs, outputs, initializers=(), opset=18):
    graph = helper.make_graph(nodes, "sequences", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def assert_same(expected, actual):
    """Equal values: arrays exactly, sequences element by element, None as None."""
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


def check_model(model, feeds, oracle=onnx_model_run):
    """The reference executor's outputs equal the oracle's."""
    expected = oracle(model, feeds)
    outputs = d5ref.from_onnx(model).inference(feeds)
    for info, want in zip(model.graph.output, expected):
        assert_same(want, outputs[info.name])
    return outputs


def arrays(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


def int64(value):
    return np.array(value, dtype=np.int64)


# -- building and reading sequences ---------------------------------------------------
@pytest.mark.parametrize("index", [0, 1, 2, -1, -3])
def test_construct_and_at(index):
    shapes = [(2, 3), (4,), (1, 1, 2)]
    nodes = [helper.make_node("SequenceConstruct", ["a", "b", "c"], ["s"]),
             helper.make_node("SequenceAt", ["s", "i"], ["y"]),
             helper.make_node("SequenceLength", ["s"], ["n"])]
    model = model_of(nodes, [tensor_info("a", [2, 3]), tensor_info("b", [4]),
                             tensor_info("c", [1, 1, 2]),
                             tensor_info("i", [], TensorProto.INT64)],
                     [tensor_info("y", [None] * len(shapes[index])),
                      tensor_info("n", [], TensorProto.INT64)])
    a, b, c = arrays(*shapes)
    outputs = check_model(model, {"a": a, "b": b, "c": c, "i": int64(index)})
    assert not np.shares_memory(outputs["y"], (a, b, c)[index])


@pytest.mark.parametrize("index", [None, 0, 2, -1])
def test_insert_and_erase(index):
    inputs = ["s", "x"] + ([] if index is None else ["i"])
    erase = ["t"] + ([] if index is None else ["i"])
    nodes = [helper.make_node("SequenceInsert", inputs, ["t"]),
             helper.make_node("SequenceErase", erase, ["u"])]
    graph_inputs = [sequence_info("s"), tensor_info("x", [5])]
    feeds = {"s": arrays((2,), (3,)), "x": arrays((5,), seed=1)[0]}
    if index is not None:
        graph_inputs.append(tensor_info("i", [], TensorProto.INT64))
        feeds["i"] = int64(index)
    model = model_of(nodes, graph_inputs, [sequence_info("t"), sequence_info("u")])
    outputs = check_model(model, feeds, onnxruntime_model_run)
    assert len(feeds["s"]) == 2, "the input sequence is not changed"
    if index != -1:   # inserted before the last tensor, then the last erased
        assert_same(feeds["s"], outputs["u"])


def test_empty_sequence_then_inserts():
    nodes = [helper.make_node("SequenceEmpty", [], ["e"], dtype=FLOAT),
             helper.make_node("SequenceInsert", ["e", "x"], ["s"]),
             helper.make_node("SequenceInsert", ["s", "x"], ["t"]),
             helper.make_node("SequenceLength", ["e"], ["n"])]
    model = model_of(nodes, [tensor_info("x", [2, 2])],
                     [sequence_info("t", rank=2), tensor_info("n", [], TensorProto.INT64)])
    check_model(model, {"x": arrays((2, 2))[0]})


@pytest.mark.parametrize("axis,new_axis", [(0, 0), (1, 0), (-1, 0), (0, 1), (2, 1), (-3, 1)])
def test_concat_from_sequence(axis, new_axis):
    node = helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=axis, new_axis=new_axis)
    model = model_of([node], [sequence_info("s", rank=2)],
                     [tensor_info("y", [None] * (2 + new_axis))])
    check_model(model, {"s": arrays((2, 3), (2, 3), (2, 3))})


@pytest.mark.parametrize("split,attributes", [
    (None, {}), (None, {"axis": 1}), (None, {"axis": 1, "keepdims": 0}),
    (int64(2), {"axis": 1}), (int64(3), {}), (int64([1, 3]), {}),
    (int64([2, 0, 3]), {"axis": 1}), (None, {"axis": -1, "keepdims": 0})])
def test_split_to_sequence(split, attributes):
    inputs = ["x"] + ([] if split is None else ["split"])
    node = helper.make_node("SplitToSequence", inputs, ["s"], **attributes)
    graph_inputs = [tensor_info("x", [4, 5])]
    feeds = {"x": arrays((4, 5))[0]}
    if split is not None:
        graph_inputs.append(tensor_info("split", list(split.shape), TensorProto.INT64))
        feeds["split"] = split
    rank = 1 if split is None and attributes.get("keepdims") == 0 else 2
    check_model(model_of([node], graph_inputs, [sequence_info("s", rank=rank)]), feeds)


def test_sequence_errors_say_what_and_where():
    at = model_of([helper.make_node("SequenceAt", ["s", "i"], ["y"], name="pick")],
                  [sequence_info("s"), tensor_info("i", [], TensorProto.INT64)],
                  [tensor_info("y", [None])])
    with pytest.raises(ShapeError, match=r"pick.*position 2 is outside \[-2, 1\]"):
        d5ref.from_onnx(at).inference({"s": arrays((1,), (1,)), "i": int64(2)})
    with pytest.raises(ModelError, match="sequence or optional inputs.*'s'"):
        d5ref.from_onnx(at).inference({"i": int64(0)})
    concat = model_of([helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
                      [sequence_info("s", rank=2)], [tensor_info("y", [None, None])])
    with pytest.raises(ShapeError, match="empty"):
        d5ref.from_onnx(concat).inference({"s": []})
    with pytest.raises(ShapeError, match="do not join"):
        d5ref.from_onnx(concat).inference({"s": arrays((2, 3), (2, 4))})


# -- SequenceMap ----------------------------------------------------------------------
def test_sequence_map_with_a_sequence_and_a_tensor():
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "t"], ["sum"]),
         helper.make_node("Shape", ["a"], ["shape"])], "body",
        [tensor_info("a", [None, 3]), tensor_info("t", [3])],
        [tensor_info("sum", [None, 3]), tensor_info("shape", [2], TensorProto.INT64)])
    node = helper.make_node("SequenceMap", ["s", "t"], ["sums", "shapes"], body=body)
    model = model_of([node], [sequence_info("s", rank=2), tensor_info("t", [3])],
                     [sequence_info("sums", rank=2), sequence_info("shapes", TensorProto.INT64)])
    check_model(model, {"s": arrays((4, 3), (2, 3), (1, 3)), "t": arrays((3,), seed=2)[0]})


def test_sequence_map_with_two_sequences_and_an_outer_name():
    body = helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["p"]),
         helper.make_node("Add", ["p", "offset"], ["y"])], "body",
        [tensor_info("a", [None]), tensor_info("b", [None])], [tensor_info("y", [None])])
    node = helper.make_node("SequenceMap", ["s", "r"], ["ys"], body=body)
    offset = numpy_helper.from_array(np.float32([0.5]), "offset")
    model = model_of([node], [sequence_info("s"), sequence_info("r")], [sequence_info("ys")],
                     [offset])
    check_model(model, {"s": arrays((2,), (4,)), "r": arrays((2,), (4,), seed=3)},
                onnxruntime_model_run)
    with pytest.raises(ShapeError, match="additional input 0 is a sequence of 1"):
        d5ref.from_onnx(model).inference({"s": arrays((2,), (4,)), "r": arrays((2,))})


# -- optionals ------------------------------------------------------------------------
TENSOR_TYPE = helper.make_tensor_type_proto(FLOAT, [None])
SEQUENCE_TYPE = helper.make_sequence_type_proto(TENSOR_TYPE)


@pytest.mark.parametrize("element_type,value", [
    (TENSOR_TYPE, arrays((4,))[0]), (TENSOR_TYPE, None),
    (SEQUENCE_TYPE, arrays((1,), (3,))), (SEQUENCE_TYPE, None)])
def test_optional_has_element(element_type, value):
    node = helper.make_node("OptionalHasElement", ["o"], ["has"])
    model = model_of([node], [optional_info("o", element_type)],
                     [tensor_info("has", [], TensorProto.BOOL)])
    outputs = check_model(model, {"o": value}, onnxruntime_model_run)
    assert outputs["has"] == (value is not None)


def test_an_omitted_optional_has_no_element():
    node = helper.make_node("OptionalHasElement", [""], ["has"])
    model = model_of([node], [], [tensor_info("has", [], TensorProto.BOOL)])
    assert not check_model(model, {})["has"]


def test_optional_built_and_read():
    nodes = [helper.make_node("Optional", ["x"], ["o"]),
             helper.make_node("Optional", [], ["empty"], type=TENSOR_TYPE),
             helper.make_node("OptionalHasElement", ["empty"], ["has"]),
             helper.make_node("OptionalGetElement", ["o"], ["y"])]
    model = model_of(nodes, [tensor_info("x", [3])],
                     [tensor_info("y", [3]), tensor_info("has", [], TensorProto.BOOL)])
    check_model(model, {"x": arrays((3,))[0]}, onnxruntime_model_run)
    get = model_of([helper.make_node("OptionalGetElement", ["o"], ["y"], name="unwrap")],
                   [optional_info("o", TENSOR_TYPE)], [tensor_info("y", [None])])
    with pytest.raises(Deep500Error, match="unwrap.*optional input is empty"):
        d5ref.from_onnx(get).inference({"o": None})


@pytest.mark.parametrize("value", [arrays((2,))[0], arrays((2,), (1,)), None])
def test_identity_carries_every_value(value):
    element = SEQUENCE_TYPE if isinstance(value, list) else TENSOR_TYPE
    model = model_of([helper.make_node("Identity", ["o"], ["y"])],
                     [optional_info("o", element)], [optional_info("y", element)])
    outputs = check_model(model, {"o": value}, onnxruntime_model_run)
    for given, copied in zip(value if isinstance(value, list) else [value],
                             outputs["y"] if isinstance(value, list) else [outputs["y"]]):
        assert not np.shares_memory(given, copied)


# -- control flow carrying sequences --------------------------------------------------
def test_a_loop_carries_a_sequence():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["f"], to=FLOAT),
         helper.make_node("Mul", ["x", "f"], ["xi"]),
         helper.make_node("SequenceInsert", ["seq_in", "xi"], ["seq_out"])], "body",
        [tensor_info("i", [], TensorProto.INT64), tensor_info("cond_in", [], TensorProto.BOOL),
         sequence_info("seq_in")],
        [tensor_info("cond_out", [], TensorProto.BOOL), sequence_info("seq_out")])
    nodes = [helper.make_node("SequenceEmpty", [], ["seq0"], dtype=FLOAT),
             helper.make_node("Loop", ["M", "", "seq0"], ["seqT"], body=body),
             helper.make_node("ConcatFromSequence", ["seqT"], ["Y"], axis=0)]
    model = model_of(nodes, [tensor_info("x", [2])], [tensor_info("Y", [None])],
                     [numpy_helper.from_array(int64(3), "M")])
    check_model(model, {"x": np.float32([1.0, -2.0])}, onnxruntime_model_run)


@pytest.mark.parametrize("cond", [True, False])
def test_if_returns_a_sequence_or_an_empty_optional(cond):
    then_branch = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
         helper.make_node("Optional", ["s"], ["o"])], "then", [],
        [optional_info("o", SEQUENCE_TYPE)])
    else_branch = helper.make_graph(
        [helper.make_node("Optional", [], ["o"], type=SEQUENCE_TYPE)], "else", [],
        [optional_info("o", SEQUENCE_TYPE)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_branch,
                            else_branch=else_branch)
    model = model_of([node], [tensor_info("c", [], TensorProto.BOOL), tensor_info("x", [2])],
                     [optional_info("y", SEQUENCE_TYPE)])
    check_model(model, {"c": np.array(cond), "x": arrays((2,))[0]}, onnxruntime_model_run)


# -- gradients and memory -------------------------------------------------------------
def test_an_optional_passes_a_tensors_gradient():
    nodes = [helper.make_node("Optional", ["w"], ["o"]),
             helper.make_node("OptionalGetElement", ["o"], ["v"]),
             helper.make_node("Mul", ["v", "x"], ["p"]),
             helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0)]
    w = np.float32([1.0, 2.0, 3.0])
    model = model_of(nodes, [tensor_info("x", [3])], [tensor_info("loss", [])],
                     [numpy_helper.from_array(w, "w")])
    x = np.float32([0.5, -1.0, 4.0])
    outputs = d5ref.from_onnx(model).inference_and_backprop({"x": x}, "loss")
    # d loss / d w = x exactly (one product, summed).
    np.testing.assert_array_equal(outputs[gradient_name("w")], x)


def test_no_gradient_passes_through_a_sequence():
    nodes = [helper.make_node("SequenceConstruct", ["w", "x"], ["s"], name="pack"),
             helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=0),
             helper.make_node("ReduceSum", ["c"], ["loss"], keepdims=0)]
    model = model_of(nodes, [tensor_info("x", [2])], [tensor_info("loss", [])],
                     [numpy_helper.from_array(np.float32([1, 2]), "w")])
    executor = d5ref.from_onnx(model)
    np.testing.assert_allclose(executor.inference({"x": np.float32([3, 4])})["loss"], 10.0)
    with pytest.raises(UnsupportedError, match="differentiates tensors only"):
        executor.inference_and_backprop({"x": np.float32([3, 4])}, "loss")


def test_peak_bytes_count_a_sequences_tensors():
    a, b = arrays((100,), (50,))
    assert value_nbytes([a, [b], None]) == a.nbytes + b.nbytes
    node = helper.make_node("SequenceLength", ["s"], ["n"])
    model = model_of([node], [sequence_info("s")], [tensor_info("n", [], TensorProto.INT64)])
    executor = d5ref.from_onnx(model)
    executor.inference({"s": [a, b]})
    assert executor.last_peak_bytes >= a.nbytes + b.nbytes
