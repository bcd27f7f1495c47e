"""The single-process parts of pipeline parallelism: cutting a graph into stages whose
chained forward and backward passes give the whole graph's gradients, the balanced
split, the schedules and the modelled step and bubble."""
import itertools

import numpy as np
import pytest

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.lv3_distributed.pipeline import (GraphCuts, balanced_cuts, gpipe_bubble,
                                              microbatch_bounds, predict_pipeline_step)
from deep500.lv3_distributed.pipeline.schedule import (BACKWARD, FORWARD, SCHEDULES,
                                                       in_flight, schedule_named)
from deep500.lv3_distributed.pipeline.stage_split import UPSTREAM
from deep500.networks import create_model


def mlp(hidden=(32, 16)):
    return create_model("mlp", input_shape=(1, 8, 8), hidden=hidden, classes=10,
                        loss="softmax_cross_entropy", seed=1)


def run_stages(stages, feeds):
    """Forward through every stage, then backward from the last; returns the loss and
    every stage's parameter gradients."""
    executors = [d5ref.from_onnx(stage.model) for stage in stages]
    activations, upstream, gradients, loss = {}, {}, {}, None
    for stage, executor in zip(stages, executors):
        for t in stage.receives:
            executor.network.feed_tensor(t.name, activations[t.name], is_param=True)
        zeros = {t.name + UPSTREAM: np.zeros(t.shape_for(8), t.dtype) for t in stage.sends}
        result = executor.inference({n: feeds[n] for n in stage.feeds} | zeros)
        activations.update({t.name: result[t.name] for t in stage.sends})
    for stage, executor in reversed(list(zip(stages, executors))):
        given = {t.name + UPSTREAM: upstream[t.name] for t in stage.sends}
        result = executor.inference_and_backprop({n: feeds[n] for n in stage.feeds} | given,
                                                 stage.loss)
        upstream.update({t.name: result[d5.gradient_name(t.name)] for t in stage.receives})
        gradients.update({p: result[d5.gradient_name(p)] for p in stage.parameters})
        loss = result["loss"] if loss is None else loss
    return loss, gradients


@pytest.mark.parametrize("cuts", [[2], [3, 5], [1, 2, 6], [5]])
def test_chained_stages_give_the_whole_graphs_loss_and_gradients(cuts):
    rng = np.random.default_rng(0)
    feeds = {"input": rng.standard_normal((8, 1, 8, 8)).astype(np.float32),
             "labels": rng.integers(0, 10, 8).astype(np.int64)}
    model = mlp()
    whole = d5ref.from_onnx(model).inference_and_backprop(feeds, "loss")
    stages = GraphCuts(model).stages(cuts)
    assert [s.cut for s in stages] == list(zip([0, *cuts], [*cuts, 7]))
    assert stages[0].feeds == ["input"] and stages[-1].feeds == ["labels"]
    loss, gradients = run_stages(stages, feeds)
    np.testing.assert_allclose(loss, whole["loss"], rtol=1e-6)
    assert sorted(gradients) == sorted(d5ref.from_onnx(model).network.get_params())
    for name, g in gradients.items():
        np.testing.assert_allclose(g, whole[d5.gradient_name(name)], rtol=1e-5, atol=1e-7)


def test_boundaries_carry_what_later_stages_read_with_exact_sizes():
    cuts = GraphCuts(mlp())
    # a cut before the loss carries the logits, a graph output read by the loss
    assert cuts.boundary_names(6) == ["output"]
    fc1 = cuts.boundary(2)[0]
    assert (fc1.name, fc1.shape, fc1.dtype) == ("fc1", (None, 32), np.float32)
    assert fc1.nbytes(6) == 6 * 32 * 4
    stages = cuts.stages([2, 4])
    assert [t.name for t in stages[1].receives] == ["fc1"]
    assert [t.name for t in stages[1].sends] == ["fc2"]
    assert stages[1].feeds == [] and stages[1].parameters == ["fc2.weight", "fc2.bias"]


def test_a_tensor_two_stages_ahead_passes_through_the_stage_between():
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.eye(4).ravel().tolist())
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Add", ["a", "b"], ["c"], name="add"),
             helper.make_node("ReduceMean", ["c"], ["loss"], name="mean", keepdims=0)]
    graph = helper.make_graph(nodes, "skip", [x], [helper.make_tensor_value_info(
        "loss", TensorProto.FLOAT, [])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    stages = GraphCuts(model).stages([1, 2])
    assert [t.name for t in stages[1].receives] == ["a"]
    assert [t.name for t in stages[1].sends] == ["a", "b"]     # "a" passes through
    feeds = {"x": np.random.default_rng(1).standard_normal((8, 4)).astype(np.float32)}
    whole = d5ref.from_onnx(model).inference_and_backprop(feeds, "loss")
    loss, gradients = run_stages(stages, feeds)
    np.testing.assert_allclose(loss, whole["loss"], rtol=1e-6)
    np.testing.assert_allclose(gradients["w"], whole[d5.gradient_name("w")], rtol=1e-5)


def test_cuts_that_cannot_carry_gradients_or_split_a_parameter_are_refused():
    cuts = GraphCuts(mlp())
    with pytest.raises(d5.Deep500Error, match="strictly increasing"):
        cuts.stages([4, 2])
    with pytest.raises(d5.Deep500Error, match="between 1 and 6"):
        cuts.stages([7])
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.eye(4).ravel().tolist())
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="first"),
             helper.make_node("MatMul", ["a", "w"], ["b"], name="second"),
             helper.make_node("ReduceMean", ["b"], ["loss"], name="mean", keepdims=0)]
    graph = helper.make_graph(nodes, "tied", [x], [helper.make_tensor_value_info(
        "loss", TensorProto.FLOAT, [])], [w])
    tied = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(d5.Deep500Error, match="'w' is read by nodes of several stages"):
        GraphCuts(tied).stages([1])
    static = create_model("mlp", batch_size=4, input_shape=(1, 8, 8), hidden=(8,),
                          classes=10, loss="softmax_cross_entropy")
    with pytest.raises(d5.Deep500Error, match="batch_size='N'"):
        GraphCuts(static)


def test_the_balanced_split_minimises_the_slowest_stage():
    rng = np.random.default_rng(2)
    for _ in range(20):
        seconds = rng.uniform(0, 1, 9)
        for stages in (2, 3, 4):
            cuts = balanced_cuts(seconds, stages)

            def slowest(c):
                edges = [0, *c, len(seconds)]
                return max(seconds[a:b].sum() for a, b in zip(edges, edges[1:]))
            best = min(slowest(c) for c in itertools.combinations(range(1, 9), stages - 1))
            assert slowest(cuts) == pytest.approx(best)
    assert balanced_cuts([1, 1, 1, 1], 2, valid=[1, 3]) in ([1], [3])
    with pytest.raises(d5.Deep500Error, match="use fewer stages"):
        balanced_cuts([1, 1, 1, 1], 3, valid=[2])


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("stages, microbatches", [(2, 1), (2, 4), (3, 2), (4, 8)])
def test_schedules_run_each_microbatch_forward_then_backward(name, stages, microbatches):
    for stage in range(stages):
        order = schedule_named(name)(stage, stages, microbatches)
        assert sorted(order) == sorted([(k, m) for k in (FORWARD, BACKWARD)
                                        for m in range(microbatches)])
        for m in range(microbatches):
            assert order.index((FORWARD, m)) < order.index((BACKWARD, m))
        expected = microbatches if name == "gpipe" else min(stages - stage, microbatches)
        assert in_flight(order) == expected
    with pytest.raises(d5.Deep500Error, match="unknown schedule"):
        schedule_named("interleaved")


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("stages, microbatches", [(1, 4), (2, 1), (2, 4), (3, 4), (4, 8)])
def test_equal_stages_have_gpipes_bubble(schedule, stages, microbatches):
    step = predict_pipeline_step([1.0] * stages, [2.0] * stages, microbatches, schedule)
    assert step.bubble_fraction == pytest.approx(gpipe_bubble(stages, microbatches))
    assert step.step_seconds == pytest.approx(3.0 * (microbatches + stages - 1))
    assert gpipe_bubble(2, 4) == pytest.approx(1 / 5)


def test_transfers_add_their_alpha_beta_time_once_each_way_per_cut():
    from deep500.utils.machine import machine_from_dict
    machine = machine_from_dict({
        "name": "test", "source": "alpha 0.5 s, beta 1 us/B",
        "network": {"alpha_s": {"value": 0.5}, "segments": [
            {"min_bytes": 0, "max_bytes": None, "alpha_s": 0.5, "beta_s_per_byte": 1e-6}]},
        "reduction": {"gamma_cache_s_per_byte": {"value": 1e-10, "buffer_bytes": 65536},
                      "gamma_memory_s_per_byte": {"value": 1e-10, "buffer_bytes": 2 ** 26}},
        "memory": {"bandwidth_bytes_per_s": {"value": 1e10}},
        "compute": {"peak_flops_per_s": {"gemm": {1: {"value": 1e10}}}}})
    step = predict_pipeline_step([1.0] * 3, [2.0] * 3, 4, "gpipe", [1e6, 1e6], machine)
    assert step.step_seconds == pytest.approx(3.0 * 6 + 2 * 2 * 1.5)
    slow = predict_pipeline_step([1.0, 3.0], [2.0, 6.0], 4, "1f1b")
    assert slow.step_seconds == pytest.approx(1.0 + 4 * 9.0 + 2.0)
    assert slow.bubble_fraction == pytest.approx(1 - (12 + 36) / (2 * 39.0))


def test_microbatches_split_a_minibatch_into_near_equal_parts():
    assert microbatch_bounds(10, 4) == [(0, 2), (2, 5), (5, 8), (8, 10)]
    assert microbatch_bounds(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    with pytest.raises(d5.Deep500Error, match="cannot be split into 5"):
        microbatch_bounds(4, 5)
