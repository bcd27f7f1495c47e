"""d5.BucketSampler: every minibatch from one length bucket; seeded shuffling within
and across buckets; bucket choices; checkpoints; training with it; its distributed form
(d5.DistributedBucketSampler); and ``sampler: bucket`` in a training recipe."""
import textwrap

import numpy as np
import pytest

import deep500 as d5
from deep500.datasets.sequences import TokenDataset
from deep500.lv2_training.bucket_sampler import bucket_of_lengths, sequence_lengths
from deep500.lv2_training.dataset import NumpyDataset
from deep500.utils.errors import Deep500Error, RecipeError


def tokens(samples=200, steps=12, seed=0, pad=0):
    """Right-padded token sequences of lengths 2..steps; the label is the length."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, steps + 1, samples)
    data = rng.integers(1, 9, (samples, steps))
    data[np.arange(steps) >= lengths[:, None]] = pad
    return TokenDataset(data.astype(np.int64), lengths.astype(np.int64), vocab=9,
                        classes=steps + 1, pad_token=pad, name="tokens"), lengths


def epoch_batches(sampler):
    return [b["input"] for b in sampler]


def lengths_of(batch):
    return (batch != 0).sum(axis=1)


def test_every_minibatch_holds_one_bucket_and_the_epoch_covers_the_buckets():
    data, lengths = tokens()
    sampler = d5.BucketSampler(data, 8, seed=3, drop_last_batch=False)
    assert [b["lengths"] for b in sampler.buckets] == [(n, n) for n in range(2, 13)]
    batches = epoch_batches(sampler)
    assert len(batches) == len(sampler) == sum(-(-b["samples"] // 8) for b in sampler.buckets)
    assert all(len(set(lengths_of(b))) == 1 for b in batches)
    # every sample once: labels are lengths, so compare the multiset of lengths
    drawn = np.concatenate([lengths_of(b) for b in batches])
    assert sorted(drawn) == sorted(lengths)
    # the minibatches of the buckets are shuffled together, not bucket after bucket
    order = [int(lengths_of(b)[0]) for b in batches]
    assert order != sorted(order)


def test_drop_last_batch_leaves_out_each_buckets_remainder():
    data, _ = tokens()
    sampler = d5.BucketSampler(data, 8, seed=0)
    batches = epoch_batches(sampler)
    assert all(len(b) == 8 for b in batches)
    assert len(batches) == sum(b["samples"] // 8 for b in sampler.buckets)


def order_of(sampler, epoch):
    order = sampler.epoch_order(epoch)
    return [order[sampler._bounds[b]:sampler._bounds[b + 1]].tolist()
            for b in range(len(sampler))]


def test_shuffling_is_seeded_per_epoch():
    data, _ = tokens()
    a, b = d5.BucketSampler(data, 8, seed=1), d5.BucketSampler(data, 8, seed=1)
    assert order_of(a, 0) == order_of(b, 0)
    assert order_of(a, 0) != order_of(a, 1)
    assert order_of(a, 0) != order_of(d5.BucketSampler(data, 8, seed=2), 0)
    # within a bucket too: the same bucket's samples in another order next epoch
    first = {tuple(sorted(x)) for x in order_of(a, 0)}
    assert first != {tuple(sorted(x)) for x in order_of(a, 1)}
    # iteration draws exactly these batches, epoch after epoch
    drawn = [[], []]
    for epoch in range(2):
        for batch in a:
            drawn[epoch].append(batch["input"])
    for epoch in range(2):
        expected = [data.data[i] for i in order_of(b, epoch)]
        assert all(np.array_equal(x, y) for x, y in zip(drawn[epoch], expected))


def test_without_shuffle_buckets_come_by_length_in_index_order():
    data, lengths = tokens()
    sampler = d5.BucketSampler(data, 8, shuffle=False, drop_last_batch=False)
    batches = order_of(sampler, 0)
    assert batches == order_of(sampler, 5)
    flat = [i for b in batches for i in b]
    assert flat == sorted(range(len(lengths)), key=lambda i: (lengths[i], i))


def test_bucket_counts_and_boundaries():
    lengths = np.array([1, 1, 2, 2, 2, 3, 4, 4, 9, 9])
    assert bucket_of_lengths(lengths, None).tolist() == [0, 0, 1, 1, 1, 2, 3, 3, 4, 4]
    # two buckets of about five samples, never splitting one length
    assert bucket_of_lengths(lengths, 2).tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert bucket_of_lengths(lengths, 1).tolist() == [0] * 10
    assert bucket_of_lengths(lengths, 50).tolist() == [0, 0, 1, 1, 1, 2, 3, 3, 4, 4]
    # boundaries: <= 2, <= 4 (empty buckets dropped), above
    assert bucket_of_lengths(lengths, [2, 3, 4, 6]).tolist() == [0, 0, 0, 0, 0, 1, 2, 2, 3, 3]
    for bad, message in ((0, ">= 1"), ([4, 2], "must increase"), ("x", "boundaries"),
                         ([], "must increase")):
        with pytest.raises(Deep500Error, match=message):
            bucket_of_lengths(lengths, bad)
    data, _ = tokens()
    sampler = d5.BucketSampler(data, 8, buckets=3)
    assert len(sampler.buckets) == 3
    assert sum(b["samples"] for b in sampler.buckets) == len(data)
    ranges = [b["lengths"] for b in sampler.buckets]
    assert all(any(low <= lengths_of(b).min() and lengths_of(b).max() <= high
                   for low, high in ranges) for b in epoch_batches(sampler))


def test_lengths_from_the_padding_or_given():
    data, lengths = tokens(pad=0)
    assert sequence_lengths(data).tolist() == lengths.tolist()
    unpadded = TokenDataset(np.ones((6, 5), np.int64), np.zeros(6, np.int64), 2, 2, None)
    assert sequence_lengths(unpadded).tolist() == [5] * 6
    images = NumpyDataset(np.zeros((6, 3), np.float32), np.zeros(6, np.int64), name="img")
    with pytest.raises(Deep500Error, match="give lengths"):
        d5.BucketSampler(images, 2)
    given = d5.BucketSampler(images, 2, lengths=[1, 1, 2, 2, 3, 3])
    assert [b["samples"] for b in given.buckets] == [2, 2, 2]
    computed = d5.BucketSampler(images, 2, lengths=lambda d: np.arange(len(d)) // 2)
    assert computed.buckets == [{"lengths": (n, n), "samples": 2} for n in (0, 1, 2)]
    with pytest.raises(Deep500Error, match="one length per sample"):
        d5.BucketSampler(images, 2, lengths=[1, 2])
    with pytest.raises(Deep500Error, match="integers >= 0"):
        d5.BucketSampler(images, 2, lengths=[1.5] * 6)
    with pytest.raises(Deep500Error, match="no bucket of img fills a minibatch of 4"):
        d5.BucketSampler(images, 4, lengths=[1, 1, 2, 2, 3, 3])


def test_a_checkpoint_resumes_the_same_batches():
    data, _ = tokens()
    sampler = d5.BucketSampler(data, 8, seed=4)
    iterator = iter(sampler)
    for _ in range(3):
        next(iterator)
    state = sampler.state_dict()
    rest = [b["input"] for b in iterator]
    resumed = d5.BucketSampler(data, 8, seed=0)
    resumed.load_state_dict(state)
    again = [b["input"] for b in resumed]
    assert len(again) == len(rest) and all(np.array_equal(x, y) for x, y in zip(rest, again))
    with pytest.raises(Deep500Error, match="bucket sizes"):
        d5.BucketSampler(data, 8, buckets=2).load_state_dict(state)


def test_sampler_validation_and_training_take_it():
    data, _ = tokens()
    result = d5.test_sampler(d5.BucketSampler(data, 8), [d5.DatasetLatency()])
    assert result.conditions["sampler"] == "BucketSampler"
    # a training run draws its minibatches from it (an MLP on the token ids as floats)
    import deep500.frameworks.reference as d5ref
    from deep500.networks import create_model
    floats = NumpyDataset(data.data.astype(np.float32), data.label_values, classes=13,
                          name="token-floats")
    model = create_model("mlp", input_shape=(12,), hidden=(8,), classes=13,
                         loss="softmax_cross_entropy")
    executor = d5ref.from_onnx(model)
    sampler = d5.BucketSampler(floats, 8, seed=0, lengths=sequence_lengths(data))
    run = d5.test_training(executor, floats, None, d5ref.GradientDescent(executor, learning_rate=0.01),
                           epochs=1, batch_size=8, sampler=sampler,
                           metrics=[d5.TrainingAccuracy()])
    assert run.outputs.conditions["train_sampler"] == "BucketSampler"
    assert run.outputs[0].steps == len(sampler)


def test_distributed_ranks_share_each_global_minibatch_of_one_bucket():
    data, lengths = tokens(samples=300)
    ranks = [d5.DistributedBucketSampler(data, 4, seed=5, rank=r, size=3) for r in range(3)]
    assert len({len(s) for s in ranks}) == 1
    assert len(ranks[0]) == sum(b["samples"] // 12 for b in ranks[0].buckets)
    seen = set()
    for batches in zip(*(order_of_rank(s) for s in ranks)):
        together = [i for b in batches for i in b]
        assert all(len(b) == 4 for b in batches)
        assert len({int(lengths[i]) for i in together}) == 1   # one bucket per step
        assert not seen & set(together)                        # disjoint shards
        seen |= set(together)
    # the same global minibatches as one BucketSampler of the global batch
    single = d5.BucketSampler(data, 12, seed=5)
    assert [sorted(b) for b in order_of(single, 0)] == [
        sorted(i for b in batches for i in b)
        for batches in zip(*(order_of_rank(s) for s in ranks))]
    state = ranks[1].state_dict()
    with pytest.raises(Deep500Error, match="rank 0 of 3 from the state of rank 1"):
        ranks[0].load_state_dict(state)


def order_of_rank(sampler):
    sampler._order = sampler.epoch_order(0)
    return [sampler._batch_indices(b).tolist() for b in range(len(sampler))]


RECIPE = textwrap.dedent("""
    name: buckets
    experiment: training
    fixed:
      dataset: DATASET
      network: {model: transformer, vocab: 8, hidden: 8, heads: 1, depth: 1}
      optimizer: {type: adam, learning_rate: 0.003}
      executor: reference
      sampler: bucket
      batch_size: 32
      epochs: 1
      seed: 0
""")


def test_a_recipe_selects_it(tmp_path):
    from deep500.recipe.experiments.training import SAMPLERS
    from deep500.recipe.schema import load_recipe
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE.replace("DATASET", "{name: token-order, train_samples: 256, "
                                              "test_samples: 64}"))
    recipe = load_recipe(str(path))
    assert recipe.alternatives("sampler") == ["bucket"]
    sampler = getattr(d5, SAMPLERS["bucket"])
    assert sampler is d5.BucketSampler
    path.write_text(RECIPE.replace("DATASET", "{name: digits}"))
    with pytest.raises(RecipeError, match="dataset digits .* holds no token sequences"):
        load_recipe(str(path))
