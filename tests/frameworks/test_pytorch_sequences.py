"""The PyTorch executor's sequence- and optional-typed values
(``deep500/frameworks/pytorch/ops/sequence.py``): sequences carried as lists of tensors,
optionals as their value or None, fed and fetched as lists of arrays and None. Forward
against onnx's ReferenceEvaluator (float64, exact or within a few ulp); gradients of
parameters that pass through sequences against central finite differences of the
executor's own forward pass."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import onnx  # noqa: E402
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import deep500.frameworks.pytorch as d5pt  # noqa: E402
from deep500.lv1_network import gradient_name  # noqa: E402
from deep500.utils.errors import Deep500Error  # noqa: E402

D = TP.DOUBLE
FORWARD_TOL = dict(rtol=1e-12, atol=0)   # the same float64 operations in order
STEP = 1e-6                              # central differences, as test_pytorch_control_flow
GRAD_TOL = dict(rtol=1e-6, atol=1e-8)


def tensor(name, shape=None, elem=D):
    return helper.make_tensor_value_info(name, elem, shape)


def sequence(name, elem=D):
    return helper.make_tensor_sequence_value_info(name, elem, None)


def optional(name, inner):
    return helper.make_value_info(name, helper.make_optional_type_proto(inner))


def model(nodes, inputs, outputs, initializers=None, opset=21):
    graph = helper.make_graph(nodes, "sequences", inputs, outputs,
                              [numpy_helper.from_array(v, k)
                               for k, v in (initializers or {}).items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(proto)
    return proto


def assert_same(got, want, where):
    """A tensor, a sequence (list) or an empty optional (None), as onnx returns it."""
    if want is None:
        assert got is None, where
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    else:
        got, want = np.asarray(got), np.asarray(want)
        assert got.dtype == want.dtype and got.shape == want.shape, (where, got, want)
        np.testing.assert_allclose(got, want, err_msg=where, **FORWARD_TOL)


def check_forward(proto, feed):
    names = [o.name for o in proto.graph.output]
    want = ReferenceEvaluator(proto).run(names, feed)
    got = d5pt.from_onnx(proto).inference(feed)
    for name, expected in zip(names, want):
        assert_same(got[name], expected, name)
    return got


RNG = np.random.default_rng(5)
X = RNG.standard_normal((3, 4))
Y = RNG.standard_normal((2, 4))
I64 = TP.INT64


def i64(*values):
    return np.array(values if len(values) != 1 else values[0], np.int64)


def test_construct_insert_erase_at_length():
    nodes = [helper.make_node("SequenceConstruct", ["x", "y"], ["s"]),
             helper.make_node("SequenceInsert", ["s", "x", "front"], ["s1"]),
             helper.make_node("SequenceInsert", ["s1", "y"], ["s2"]),
             helper.make_node("SequenceErase", ["s2", "second"], ["s3"]),
             helper.make_node("SequenceErase", ["s3"], ["s4"]),
             helper.make_node("SequenceAt", ["s4", "last"], ["at"]),
             helper.make_node("SequenceLength", ["s4"], ["n"])]
    proto = model(nodes, [tensor("x", [3, 4]), tensor("y", [2, 4])],
                  [sequence("s4"), tensor("at", ["a", 4]), tensor("n", [], I64)],
                  {"front": i64(-2), "second": i64(1), "last": i64(-1)})
    got = check_forward(proto, {"x": X, "y": Y})
    assert [a.shape for a in got["s4"]] == [(3, 4), (2, 4)]


def test_an_empty_sequence_grows_in_order():
    nodes = [helper.make_node("SequenceEmpty", [], ["e"], dtype=D),
             helper.make_node("SequenceInsert", ["e", "x"], ["s1"]),
             helper.make_node("SequenceInsert", ["s1", "y", "zero"], ["s2"])]
    check_forward(model(nodes, [tensor("x", [3, 4]), tensor("y", [2, 4])], [sequence("s2")],
                        {"zero": i64(0)}), {"x": X, "y": Y})


@pytest.mark.parametrize("split,keepdims", [(None, 1), (None, 0), (i64(2), 1),
                                            (i64(1, 3), 1)],
                         ids=["ones", "ones_squeezed", "scalar", "sizes"])
def test_split_to_sequence_then_concat(split, keepdims):
    """Split along axis 1, joined back along it (or, squeezed parts, along 0) and
    stacked along a new axis 1 (parts of one shape)."""
    squeezed = split is None and not keepdims
    inputs = ["x"] + (["split"] if split is not None else [])
    nodes = [helper.make_node("SplitToSequence", inputs, ["s"], axis=1, keepdims=keepdims),
             helper.make_node("ConcatFromSequence", ["s"], ["cat"],
                              axis=0 if squeezed else 1)]
    outputs = [sequence("s"), tensor("cat", ["a"] if squeezed else ["a", "b"])]
    if split is None:
        nodes.append(helper.make_node("ConcatFromSequence", ["s"], ["stacked"], axis=1,
                                      new_axis=1))
        outputs.append(tensor("stacked", ["a", "b"] if squeezed else ["a", "b", "c"]))
    proto = model(nodes, [tensor("x", [3, 4])], outputs,
                  {} if split is None else {"split": split})
    check_forward(proto, {"x": X})


def test_sequences_are_fed_and_returned_as_lists_of_arrays():
    """Tensors of different shapes in one sequence, fed and fetched unchanged."""
    proto = model([helper.make_node("Identity", ["s"], ["t"])], [sequence("s")],
                  [sequence("t")])
    feed = [X, Y, np.zeros((0, 4))]
    got = d5pt.from_onnx(proto).inference({"s": feed})["t"]
    assert_same(got, feed, "t")


def seq_map_body():
    """(element, tensor) -> (element + tensor, Shape(element))."""
    nodes = [helper.make_node("Add", ["e", "t"], ["sum"]),
             helper.make_node("Shape", ["e"], ["shape"])]
    return helper.make_graph(nodes, "body", [tensor("e", ["n", 4]), tensor("t", [4])],
                             [tensor("sum", ["n", 4]), tensor("shape", [2], I64)])


def test_sequence_map_with_a_sequence_and_a_tensor():
    node = helper.make_node("SequenceMap", ["s", "t"], ["sums", "shapes"],
                            body=seq_map_body())
    proto = model([helper.make_node("SequenceConstruct", ["x", "y"], ["s"]), node],
                  [tensor("x", [3, 4]), tensor("y", [2, 4]), tensor("t", [4])],
                  [sequence("sums"), sequence("shapes", I64)])
    got = check_forward(proto, {"x": X, "y": Y, "t": X[0]})
    assert [tuple(s) for s in got["shapes"]] == [(3, 4), (2, 4)]


def test_sequence_map_over_two_sequences_reads_element_by_element():
    body = helper.make_graph([helper.make_node("Mul", ["a", "b"], ["p"])], "body",
                             [tensor("a", ["n", 4]), tensor("b", ["n", 4])],
                             [tensor("p", ["n", 4])])
    nodes = [helper.make_node("SequenceConstruct", ["x", "y"], ["s"]),
             helper.make_node("SequenceConstruct", ["x2", "y2"], ["r"]),
             helper.make_node("SequenceMap", ["s", "r"], ["products"], body=body)]
    proto = model(nodes, [tensor("x", [3, 4]), tensor("y", [2, 4]), tensor("x2", [3, 4]),
                          tensor("y2", [2, 4])], [sequence("products")])
    check_forward(proto, {"x": X, "y": Y, "x2": X[::-1].copy(), "y2": Y[::-1].copy()})


@pytest.mark.parametrize("given", [True, False], ids=["value", "empty"])
def test_optionals(given):
    """An optional holds its value (returned as it is) or nothing (None)."""
    inner = helper.make_tensor_type_proto(D, [3, 4])
    nodes = ([helper.make_node("Optional", ["x"], ["o"])] if given else
             [helper.make_node("Optional", [], ["o"], type=inner)])
    nodes.append(helper.make_node("OptionalHasElement", ["o"], ["has"]))
    outputs = [optional("o", inner), tensor("has", [], TP.BOOL)]
    if given:
        nodes.append(helper.make_node("OptionalGetElement", ["o"], ["value"]))
        outputs.append(tensor("value", [3, 4]))
    got = d5pt.from_onnx(model(nodes, [tensor("x", [3, 4])], outputs, opset=18)).inference(
        {"x": X})
    assert got["has"].dtype == np.bool_ and bool(got["has"]) is given
    if given:
        assert_same(got["o"], X, "o")
        assert_same(got["value"], X, "value")
    else:
        assert got["o"] is None


def test_an_optional_input_may_be_fed_empty():
    inner = helper.make_sequence_type_proto(helper.make_tensor_type_proto(D, None))
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"])]
    proto = model(nodes, [optional("o", inner)], [tensor("has", [], TP.BOOL)], opset=18)
    executor = d5pt.from_onnx(proto)
    assert not executor.inference({"o": None})["has"]
    assert executor.inference({"o": [X, Y]})["has"]


def test_an_empty_optional_has_no_element_to_get():
    inner = helper.make_tensor_type_proto(D, [3])
    nodes = [helper.make_node("Optional", [], ["o"], type=inner),
             helper.make_node("OptionalGetElement", ["o"], ["value"])]
    proto = model(nodes, [tensor("x", [3])], [tensor("value", [3])], opset=18)
    with pytest.raises(Deep500Error, match="empty"):
        d5pt.from_onnx(proto)   # the empty optional is known while building


def test_a_loop_carries_a_sequence():
    """Each iteration appends the iteration number times x; the final sequence is the
    Loop's output."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=D),
         helper.make_node("Mul", ["x", "fi"], ["scaled"]),
         helper.make_node("SequenceInsert", ["seq_in", "scaled"], ["seq_out"])],
        "body", [tensor("i", [], I64), tensor("cond_in", [], TP.BOOL), sequence("seq_in")],
        [tensor("cond_out", [], TP.BOOL), sequence("seq_out")])
    nodes = [helper.make_node("SequenceEmpty", [], ["empty"], dtype=D),
             helper.make_node("Loop", ["trips", "cond", "empty"], ["result"], body=body)]
    proto = model(nodes, [tensor("x", [3, 4]), tensor("trips", [], I64),
                          tensor("cond", [], TP.BOOL)], [sequence("result")])
    got = check_forward(proto, {"x": X, "trips": i64(3), "cond": np.array(True)})
    assert len(got["result"]) == 3


def check_gradients(proto, feed, params):
    """Every element of each parameter's gradient against central differences."""
    executor = d5pt.from_onnx(proto)
    network = executor.network
    got = executor.inference_and_backprop(feed, "loss")
    for param in params:
        base = network.fetch_tensor(param).copy()
        grad = got[gradient_name(param)]
        assert np.linalg.norm(grad) > 0, f"the gradient of {param} vanishes"
        numeric = np.zeros_like(base)
        for index in np.ndindex(base.shape):
            losses = []
            for sign in (1, -1):
                shifted = base.copy()
                shifted[index] += sign * STEP
                network.feed_tensor(param, shifted)
                losses.append(float(executor.inference(feed)["loss"]))
            numeric[index] = (losses[0] - losses[1]) / (2 * STEP)
        network.feed_tensor(param, base)
        np.testing.assert_allclose(grad, numeric, err_msg=param, **GRAD_TOL)


def test_gradients_flow_through_sequences():
    """loss = Σ r · ConcatFromSequence(SequenceMap(w ⊙ ·)(SplitToSequence(tanh(x ⊙ w)))
    with w appended), x and w parameters: the gradient passes through a split, a map
    body reading w from the outer scope, an insert and a concatenation."""
    body = helper.make_graph([helper.make_node("Mul", ["e", "w"], ["p"])], "body",
                             [tensor("e", [1, 4])], [tensor("p", [1, 4])])
    nodes = [helper.make_node("Mul", ["x", "w"], ["xw"]),
             helper.make_node("Tanh", ["xw"], ["h"]),
             helper.make_node("SplitToSequence", ["h"], ["parts"], axis=0),
             helper.make_node("SequenceMap", ["parts"], ["mapped"], body=body),
             helper.make_node("Unsqueeze", ["w", "zero"], ["w2"]),
             helper.make_node("SequenceInsert", ["mapped", "w2"], ["more"]),
             helper.make_node("ConcatFromSequence", ["more"], ["cat"], axis=0),
             helper.make_node("Mul", ["cat", "r"], ["weighted"]),
             helper.make_node("ReduceSum", ["weighted"], ["loss"], keepdims=0)]
    initializers = {"x": X, "w": RNG.standard_normal(4), "zero": np.array([0], np.int64)}
    proto = model(nodes, [tensor("r", [4, 4])], [tensor("loss", [])], initializers)
    check_gradients(proto, {"r": RNG.standard_normal((4, 4))}, ["x", "w"])
