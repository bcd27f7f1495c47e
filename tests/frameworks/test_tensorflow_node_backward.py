"""The TensorFlow executor's node-by-node backward pass (``d5tf.node_backward``), used
when an event asks for per-node backward times: its gradients against the whole-tape
ones, its per-node times against the backward pass they split, and FrameworkOverhead of
backprop built on them."""
from __future__ import annotations

from time import perf_counter_ns

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import deep500 as d5  # noqa: E402
import deep500.frameworks.reference as d5ref  # noqa: E402
import deep500.frameworks.tensorflow as d5tf  # noqa: E402
from deep500.frameworks.tensorflow import node_backward  # noqa: E402
from deep500.frameworks.tensorflow.node_backward import NodeBackward  # noqa: E402
from deep500.lv1_network import ExecutorEvent  # noqa: E402
from deep500.networks import create_model  # noqa: E402
from deep500.recipe.experiments.networks import make_inputs  # noqa: E402

BATCH = 4


def zoo(name):
    model = create_model(name, batch_size=BATCH, loss="softmax_cross_entropy")
    classes = 2 if name in ("transformer", "lstm") else 10   # the sequence models' classes
    return model, make_inputs(model, BATCH, 0, classes)


def shared_model():
    """A parameter read by two nodes (W), a tensor read by two nodes (a), a gathered
    parameter (E: its gradient is IndexedSlices), a node with two outputs (Split), an
    integer output (ArgMax) and a parameter the loss does not depend on (U)."""
    r = np.random.default_rng(3)
    params = {"W": r.standard_normal((4, 4)).astype(np.float32),
              "E": r.standard_normal((5, 4)).astype(np.float32),
              "U": r.standard_normal(4).astype(np.float32)}
    node = helper.make_node
    nodes = [node("MatMul", ["x", "W"], ["a"], name="mm1"),
             node("MatMul", ["a", "W"], ["b"], name="mm2"),
             node("Add", ["a", "b"], ["c"], name="add"),
             node("Split", ["c"], ["c1", "c2"], axis=0, num_outputs=2, name="split"),
             node("ArgMax", ["c2"], ["am"], axis=1, name="argmax"),
             node("Cast", ["am"], ["amf"], to=TensorProto.FLOAT, name="cast"),
             node("Gather", ["E", "idx"], ["e"], name="gather"),
             node("Mul", ["c2", "e"], ["p"], name="mul"),
             node("ReduceSum", ["p"], ["s1"], keepdims=0, name="sum1"),
             node("ReduceSum", ["c1"], ["s2"], keepdims=0, name="sum2"),
             node("ReduceSum", ["amf"], ["s3"], keepdims=0, name="sum3"),
             node("Add", ["s1", "s2"], ["t"], name="add2"),
             node("Add", ["t", "s3"], ["loss"], name="add3"),
             node("Relu", ["U"], ["u"], name="relu")]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "shared", [value("x", TensorProto.FLOAT, [4, 4]),
                          value("idx", TensorProto.INT64, [2])],
        [value("loss", TensorProto.FLOAT, []), value("u", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(v, k) for k, v in params.items()])
    model = helper.make_model(graph, ir_version=8,
                              opset_imports=[helper.make_opsetid("", 18)])
    inputs = {"x": r.standard_normal((4, 4)).astype(np.float32),
              "idx": np.array([4, 1], np.int64)}
    return model, inputs


def both_ways(model, inputs):
    """The outputs and gradients of one executor with one tape, then node by node."""
    executor = d5tf.from_onnx(model)
    whole = executor.inference_and_backprop(inputs, "loss")
    executor.events.append(d5.OperatorTimes())
    by_node = executor.inference_and_backprop(inputs, "loss")
    assert executor.events[0].backward_runs, "the backward pass did not run node by node"
    return whole, by_node


@pytest.mark.parametrize("name", ["shared", "lenet", "lstm"])
def test_gradients_by_node_are_those_of_the_whole_tape(name):
    # No tensor of these models sums more than two gradient contributions, the nodes run
    # TensorFlow's own gradient functions on the same tensors, and a sum of two terms
    # does not depend on their order: the gradients are bitwise equal.
    whole, by_node = both_ways(*(shared_model() if name == "shared" else zoo(name)))
    assert sorted(whole) == sorted(by_node)
    for key, value in whole.items():
        np.testing.assert_array_equal(by_node[key], value, err_msg=key)
    if name == "shared":
        assert not np.any(whole[d5.gradient_name("U")])
        assert np.any(whole[d5.gradient_name("E")]) and np.any(whole[d5.gradient_name("W")])


def test_transformer_gradients_by_node_differ_only_by_summation_order():
    """Some transformer tensors feed three nodes (queries, keys and values read the
    normalised input): TensorFlow's tape sums their gradients in its own order, the
    node-by-node walk in reverse node order, so float32 rounding differs. The difference
    must stay within the rounding that separates two correct float32 implementations:
    at most four times the difference between the whole-tape gradients and the NumPy
    reference executor's (about 1e-7 relative where the gradient is not zero; the keys'
    bias gradient is zero in exact arithmetic, since softmax ignores a constant shift, so
    there both differences are rounding noise)."""
    model, inputs = zoo("transformer")
    whole, by_node = both_ways(model, inputs)
    reference = d5ref.from_onnx(model).inference_and_backprop(inputs, "loss")
    for key, value in whole.items():
        if not key.endswith(".grad"):
            continue
        ours = np.max(np.abs(by_node[key] - value))
        numpy_reference = np.max(np.abs(reference[key] - value))
        assert ours <= 4 * numpy_reference, (key, ours, numpy_reference)


def test_public_gradient_call_gives_the_same_gradients(monkeypatch):
    """Where TensorFlow's internal imperative_grad is missing, GradientTape.gradient."""
    model, inputs = shared_model()
    _, fast = both_ways(model, inputs)
    monkeypatch.setattr(node_backward, "_imperative_grad", None)
    _, public = both_ways(model, inputs)
    for key, value in fast.items():
        np.testing.assert_array_equal(public[key], value, err_msg=key)


def test_node_times_split_the_backward_pass(monkeypatch):
    """Each run's per-node backward seconds are disjoint parts of the node-by-node
    backward pass: their sum is at most its time, and most of it. Between the timed
    calls the walk only does Python bookkeeping and sums the contributions to tensors
    read by several nodes (none in LeNet): measured 95-98% of the pass on a 2-core CPU;
    half is a bound that a loaded machine still meets."""
    spans = []
    backward = NodeBackward.backward

    def timed(*args, **kwargs):
        start = perf_counter_ns()
        result = backward(*args, **kwargs)
        spans.append((perf_counter_ns() - start) * 1e-9)
        return result

    monkeypatch.setattr(NodeBackward, "backward", staticmethod(timed))
    model, inputs = zoo("lenet")
    overhead = d5.FrameworkOverhead(reruns=5, warmup=1)
    d5.test_executor_backprop(d5tf.from_onnx(model), inputs, metrics=[overhead])
    totals = overhead.operator_times.backward_totals
    assert len(totals) == len(spans) == 6
    assert all(0 < total <= span for total, span in zip(totals, spans))
    assert np.median([total / span for total, span in zip(totals, spans)]) > 0.5


def test_backprop_overhead_of_the_tensorflow_executor_matches_its_parts():
    """overhead = 1 − (forward + backward operator time) / network time, run by run,
    with every Conv and Gemm node's backward timed."""
    model, inputs = zoo("lenet")
    times, overhead = d5.OperatorTimes(), d5.FrameworkOverhead(reruns=3, warmup=1)
    result = d5.test_executor_backprop(d5tf.from_onnx(model), inputs,
                                       metrics=[times, overhead])
    assert result["FrameworkOverhead"].warnings == []
    parts = overhead.operator_times
    network = [s * 1e-9 for s in overhead._samples[1:]]
    expected = [1.0 - (f + b) / n for f, b, n in
                zip(parts.totals()[1:], parts.backward_totals[1:], network)]
    samples = result["FrameworkOverhead"].samples
    np.testing.assert_allclose(samples, expected, rtol=1e-12)
    assert all(0.0 <= s < 1.0 for s in samples)
    summary = result["OperatorTimes"].summary
    assert summary["backward_note"] is None and summary["backward_runs"] == 4
    backward = {o["name"]: o for o in summary["backward_operators"]}
    for op in d5.load_and_parse_model(model).operations:
        if op.op_type in ("Conv", "Gemm"):
            assert backward[op.name]["median"] > 0, op.name


class CountingEvent(ExecutorEvent):
    wants_operator_events = True

    def __init__(self):
        self.calls = []

    def before_operator(self, op):
        self.calls.append(("before", op.name))

    def after_operator(self, op):
        self.calls.append(("after", op.name))


def test_events_in_backward_fire_around_each_node_in_reverse_order():
    model, inputs = shared_model()
    counting = CountingEvent()
    executor = d5tf.from_onnx(model, events=[counting])
    names = [op.name for op in executor.network.operations]
    forward = [(kind, name) for name in names for kind in ("before", "after")]
    executor.inference_and_backprop(inputs, "loss")
    assert counting.calls == forward          # off by default: the forward pass only
    counting.calls.clear()
    executor.events_in_backward = True
    executor.inference_and_backprop(inputs, "loss")
    assert counting.calls[:len(forward)] == forward
    # Nodes with a gradient to pass back, from the loss down; not relu (the loss does
    # not depend on it), argmax (its output is an integer) or cast (it reads one).
    backward = ["add3", "add2", "sum3", "sum2", "sum1", "mul", "gather", "split", "add",
                "mm2", "mm1"]
    assert counting.calls[len(forward):] == [(kind, name) for name in backward
                                             for kind in ("before", "after")]
