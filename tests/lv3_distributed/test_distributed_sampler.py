"""Distributed samplers and the DistributedOptimizer base, without MPI (rank and size
given explicitly, or a world of one)."""
import numpy as np
import pytest

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.lv3_distributed import FusedBuffer, partition_bounds
from deep500.networks import create_model


@pytest.fixture(scope="module")
def digits():
    return d5.load_dataset("digits")


def test_shards_are_disjoint_and_cover_each_global_batch(digits):
    train, _ = digits
    size = 3
    samplers = [d5.DistributedSampler(train, 10, seed=5, rank=r, size=size)
                for r in range(size)]
    for epoch in range(2):
        for sampler in samplers:
            sampler._order = sampler.epoch_order(sampler.epoch)
        taken = [np.concatenate([s._batch_indices(b) for b in range(len(s))])
                 for s in samplers]
        union = np.concatenate(taken)
        assert len(np.unique(union)) == len(union) == len(samplers[0]) * 30
        order = np.random.default_rng([5, samplers[0].epoch]).permutation(len(train))
        assert np.array_equal(np.sort(union), np.sort(order[:len(union)]))
        for sampler in samplers:
            sampler.reset()


def test_a_new_permutation_every_epoch_the_same_on_every_rank(digits):
    train, _ = digits
    a = d5.DistributedSampler(train, 8, seed=1, rank=0, size=2)
    b = d5.DistributedSampler(train, 8, seed=1, rank=1, size=2)
    assert np.array_equal(a.epoch_order(0), b.epoch_order(0))
    assert not np.array_equal(a.epoch_order(0), a.epoch_order(1))
    first = [batch["labels"].copy() for batch in a]
    second = [batch["labels"].copy() for batch in a]
    assert len(first) == len(second) == len(train) // 16
    assert any(not np.array_equal(x, y) for x, y in zip(first, second))


def test_partitioned_sampler_reads_only_its_part(digits):
    train, _ = digits
    size = 3
    bounds = [partition_bounds(len(train), size, r) for r in range(size)]
    assert bounds[0][0] == 0 and bounds[-1][1] == len(train)
    assert all(bounds[r][1] == bounds[r + 1][0] for r in range(size - 1))
    assert sorted(stop - start for start, stop in bounds) in (
        [479, 479, 479], [478, 479, 479], [479, 479, 480])
    lengths = set()
    for rank, (start, stop) in enumerate(bounds):
        sampler = d5.PartitionedDistributedSampler(train, 32, seed=2, rank=rank, size=size)
        lengths.add(len(sampler))
        order = sampler.epoch_order(0)
        assert order.min() >= start and order.max() < stop
        assert np.array_equal(np.sort(order), np.arange(start, stop))
    assert lengths == {479 // 32}   # every rank the same number of steps


def test_bad_distributed_samplers_say_what_to_do(digits):
    train, _ = digits
    with pytest.raises(d5.Deep500Error, match="explicit seed"):
        d5.DistributedSampler(train, 8, seed=None, rank=0, size=2)
    with pytest.raises(d5.Deep500Error, match="fewer than one global minibatch"):
        d5.DistributedSampler(train, 500, seed=0, rank=0, size=3)
    with pytest.raises(d5.Deep500Error, match="rank 2 is not within"):
        d5.DistributedSampler(train, 8, rank=2, size=2)
    with pytest.raises(d5.Deep500Error, match="both rank and size"):
        d5.DistributedSampler(train, 8, rank=1)
    saved = d5.DistributedSampler(train, 8, rank=0, size=2).state_dict()
    with pytest.raises(d5.Deep500Error, match="shards would differ"):
        d5.DistributedSampler(train, 8, rank=1, size=2).load_state_dict(saved)


def test_transformations_differ_per_rank(digits):
    train, _ = digits
    drawn = []
    for rank in range(2):
        sampler = d5.DistributedSampler(train, 4, seed=0, rank=rank, size=2,
                                        transformations=[lambda batch, rng: {
                                            **batch, "noise": rng.random()}])
        drawn.append(next(iter(sampler))["noise"])
    assert drawn[0] != drawn[1]


def test_fused_buffer_round_trip():
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3),
              "b": np.ones(4, np.float32)}
    fused = FusedBuffer(arrays)
    assert fused.buffer.size == 10 and fused.nbytes == 40
    fused.pack(arrays)
    views = fused.unpack()
    assert np.array_equal(views["w"], arrays["w"]) and np.all(views["b"] == 1)
    other = fused.unpack(np.zeros(10, np.float32))
    assert other["w"].shape == (2, 3)
    with pytest.raises(d5.Deep500Error, match="floating-point"):
        FusedBuffer({"i": np.arange(3)})


# -- the optimizer base on one rank ---------------------------------------------------------
def _executor():
    return d5ref.from_onnx(create_model("mlp", input_shape=(1, 8, 8), hidden=(8,),
                                        loss="softmax_cross_entropy", seed=4))


def test_one_rank_decentralized_is_its_base_optimizer(digits):
    train, _ = digits
    runs = []
    for wrap in (False, True):
        executor = _executor()
        optimizer = d5ref.MomentumOptimizer(executor, learning_rate=0.05, momentum=0.9)
        if wrap:
            optimizer = d5ref.ConsistentDecentralized(optimizer)
            assert optimizer.size == 1 and optimizer.name.endswith("(MomentumOptimizer)")
        optimizer.train(d5.ShuffleSampler(train, 16, seed=0), steps=6)
        runs.append({n: executor.network.fetch_tensor(n)
                     for n in executor.network.get_params()})
    for name in runs[0]:
        assert np.array_equal(runs[0][name], runs[1][name]), name


def test_wrapper_forwards_learning_rate_and_checkpoints(digits):
    train, _ = digits
    base = d5ref.MomentumOptimizer(_executor(), learning_rate=0.05, momentum=0.9)
    scheme = d5ref.ConsistentDecentralized(base)
    scheme.learning_rate = 0.01
    assert base.learning_rate == 0.01
    assert scheme.hyperparameters()["momentum"] == 0.9
    assert scheme.hyperparameters()["ranks"] == 1
    scheme.train(d5.ShuffleSampler(train, 16, seed=0), steps=3)
    assert scheme.step_count == base.step_count == 3
    state = scheme.state_dict()
    fresh = d5ref.ConsistentDecentralized(
        d5ref.MomentumOptimizer(_executor(), learning_rate=0.05, momentum=0.9))
    fresh.load_state_dict(state)
    assert fresh.base.step_count == 3 and fresh.learning_rate == 0.01
    some = next(iter(base.state))
    assert np.array_equal(fresh.base.state[some]["momentum"], base.state[some]["momentum"])
    measured = scheme.end_epoch()
    assert measured["bytes_sent"] == 0 and measured["replica_divergence"] == 0.0
    assert measured["phase_times"]["compute"] > 0


def test_only_three_step_optimizers_can_be_wrapped():
    with pytest.raises(d5.Deep500Error, match="three-step"):
        d5ref.ConsistentDecentralized(object())
    from deep500.frameworks import pytorch as d5pt
    native = d5pt.from_onnx(create_model("mlp", input_shape=(1, 8, 8), hidden=(8,),
                                         loss="softmax_cross_entropy", seed=4))
    with pytest.raises(d5.Deep500Error, match="Framework-native"):
        d5ref.ConsistentDecentralized(d5pt.GradientDescent(native))
