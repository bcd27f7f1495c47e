"""Trajectory divergence between two optimizers (Deep500 paper, Fig. 11) and its plot."""
import json

import numpy as np
import pytest

import deep500.frameworks.reference as d5ref
from deep500.frameworks.reference import optimizers as ref_optimizers
from deep500.lv2_training.dataset import NumpyDataset
from deep500.lv2_training.sampler import ShuffleSampler
from deep500.lv2_training.trajectory import TrajectoryDivergence, trajectory_divergence
from deep500.networks import create_model
from deep500.report.trajectory_plot import layer_groups, plot_trajectory_divergence
from deep500.utils.errors import Deep500Error

STEPS = 8


def lenet(seed=0):
    return create_model("lenet", input_shape=(1, 8, 8), loss="softmax_cross_entropy",
                        seed=seed)


@pytest.fixture(scope="module")
def batches():
    rng = np.random.default_rng(0)
    return [{"input": rng.standard_normal((16, 1, 8, 8)).astype(np.float32),
             "labels": rng.integers(0, 10, 16)} for _ in range(4)]


def test_identical_optimizers_do_not_diverge(batches):
    # b starts from other weights; copying a's makes the runs identical.
    a = ref_optimizers.AdamOptimizer(d5ref.from_onnx(lenet(0)), learning_rate=0.01)
    b = ref_optimizers.AdamOptimizer(d5ref.from_onnx(lenet(1)), learning_rate=0.01)
    result = trajectory_divergence(a, b, batches, STEPS)
    assert result.steps == list(range(1, STEPS + 1))
    assert result.total_l2 == [0.0] * STEPS and result.total_linf == [0.0] * STEPS
    assert all(v == [0.0] * STEPS for v in result.l2.values())
    assert result.loss_a == result.loss_b
    assert min(result.norm_a) > 0 and result.max_relative_l2 == 0.0
    # the list of 4 batches was used twice, in order
    assert result.loss_a[0] != result.loss_a[4]


def test_reference_adam_and_torch_adam_stay_together(batches):
    pytest.importorskip("torch")
    import deep500.frameworks.pytorch as d5pt
    from deep500.frameworks.pytorch import optimizers as pt_optimizers
    reference = ref_optimizers.AdamOptimizer(d5ref.from_onnx(lenet()), learning_rate=0.01)
    native = pt_optimizers.AdamOptimizer(d5pt.from_onnx(lenet(1)), learning_rate=0.01)
    result = trajectory_divergence(reference, native, batches, STEPS)
    assert 0 < result.max_relative_l2 < 1e-4, result
    assert result.label_a == "reference:AdamOptimizer"
    assert result.label_b == "pytorch:AdamOptimizer"
    assert result.conditions["framework_b"] == "pytorch"
    np.testing.assert_allclose(result.loss_b, result.loss_a, rtol=1e-5)


def test_different_algorithms_diverge(batches):
    adam = ref_optimizers.AdamOptimizer(d5ref.from_onnx(lenet()), learning_rate=0.01)
    sgd = ref_optimizers.GradientDescent(d5ref.from_onnx(lenet()), learning_rate=0.01)
    result = trajectory_divergence(adam, sgd, batches, STEPS)
    assert result.max_relative_l2 > 1e-2, result
    # the distance grows as the two walk apart
    assert result.total_l2[-1] > result.total_l2[0]


def test_result_serialises_groups_and_plots(batches, tmp_path):
    adam = ref_optimizers.AdamOptimizer(d5ref.from_onnx(lenet()), learning_rate=0.01)
    sgd = ref_optimizers.MomentumOptimizer(d5ref.from_onnx(lenet()), learning_rate=0.01)
    sampler = ShuffleSampler(NumpyDataset(
        np.concatenate([b["input"] for b in batches]),
        np.concatenate([b["labels"] for b in batches])), 16, seed=3)
    result = trajectory_divergence(adam, sgd, sampler, 6)   # an epoch and a half
    assert sampler.epoch == 1

    data = json.loads(json.dumps(result.to_dict()))
    assert data["summary"]["steps"] == 6
    again = TrajectoryDivergence.from_dict(data)
    assert again.total_l2 == result.total_l2 and again.linf == result.linf

    # Groups combine L2 as the root of the sum of squares and L∞ as the maximum.
    everything = result.grouped({"all": result.parameters})["all"]
    np.testing.assert_allclose(everything[0], result.total_l2, rtol=1e-12)
    np.testing.assert_allclose(everything[1], result.total_linf, rtol=1e-12)
    by_layer = result.grouped(lambda name: name.split(".")[0])
    assert sorted(by_layer) == ["conv1", "conv2", "fc1", "fc2", "fc3"]

    path = plot_trajectory_divergence(result, str(tmp_path / "plots" / "divergence.png"))
    with open(path, "rb") as handle:
        assert handle.read(8) == b"\x89PNG\r\n\x1a\n"
    # A dict works too, and identical trajectories (all zeros) still give a plot.
    zero = trajectory_divergence(
        ref_optimizers.GradientDescent(d5ref.from_onnx(lenet())),
        ref_optimizers.GradientDescent(d5ref.from_onnx(lenet())), batches, 2)
    path = plot_trajectory_divergence(zero.to_dict(), str(tmp_path / "zero.png"),
                                      groups=None)
    assert (tmp_path / "zero.png").stat().st_size > 1000


def test_layer_groups_keep_lines_readable():
    names = [f"layer{s}.{b}.conv{c}.{t}" for s in (1, 2, 3) for b in range(3)
             for c in (1, 2) for t in ("weight", "bn.scale")] + ["fc.weight", "fc.bias"]
    group = layer_groups(names, max_lines=12)
    assert len({group(n) for n in names}) == 10   # layerS.B and fc
    assert group("layer2.1.conv1.weight") == "layer2.1"
    assert len({layer_groups(names, max_lines=4)(n) for n in names}) == 4


def test_refuses_what_cannot_be_compared(batches):
    a = ref_optimizers.GradientDescent(d5ref.from_onnx(lenet()))
    with pytest.raises(Deep500Error, match="different networks"):
        trajectory_divergence(a, a, batches, 2)
    with pytest.raises(Deep500Error, match="at least 1"):
        trajectory_divergence(a, ref_optimizers.GradientDescent(d5ref.from_onnx(lenet())),
                              batches, 0)
    mlp = create_model("mlp", input_shape=(1, 8, 8), hidden=(8,),
                       loss="softmax_cross_entropy", seed=0)
    with pytest.raises(Deep500Error, match="different parameters"):
        trajectory_divergence(a, ref_optimizers.GradientDescent(d5ref.from_onnx(mlp)),
                              batches, 2)
    one_shot = (b for b in batches)
    with pytest.raises(Deep500Error, match="ran out after 4 of 5"):
        trajectory_divergence(a, ref_optimizers.GradientDescent(d5ref.from_onnx(lenet())),
                              one_shot, 5)
