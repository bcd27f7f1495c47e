"""Length-bucketed minibatches for sequence data: :class:`BucketSampler`.

Samples are grouped by their sequence length into buckets, and every minibatch is
drawn from one bucket, so it holds sequences of similar length (little padding, as
upstream Deep500's ``BucketSampler`` and the bucketing input pipelines of sequence
models do). Each epoch, with ``shuffle=True``, the samples of every bucket are put in
a seeded random order, cut into minibatches, and the minibatches of all buckets are
shuffled together: both from ``np.random.default_rng([seed, epoch])``, so the batches
are a pure function of ``(seed, epoch)`` like those of every Deep500 sampler (the same
in every framework, and after a resumed checkpoint). ``shuffle=False`` gives the
buckets in increasing length, each in index order.

A bucket's samples that do not fill a last minibatch are left out of that epoch with
``drop_last_batch=True`` (others are left out in the next epoch: the order within the
bucket changes), or form a smaller minibatch with ``drop_last_batch=False``.
"""
from __future__ import annotations

from numbers import Integral
from typing import Callable, Sequence

import numpy as np

from deep500.lv2_training.dataset import Dataset
from deep500.lv2_training.sampler import Sampler, SamplerEvent
from deep500.utils.errors import Deep500Error


def sequence_lengths(dataset: Dataset) -> np.ndarray:
    """The length of every sample of an in-memory token dataset (one with a
    ``pad_token`` attribute, as the generated ``token-order`` and ``markov-tokens``):
    its tokens that are not ``pad_token``, or all of them where ``pad_token`` is
    ``None`` (sequences without padding). Other datasets need the lengths given
    (``BucketSampler(lengths=...)``)."""
    data = getattr(dataset, "data", None)
    if not hasattr(dataset, "pad_token") or data is None:
        raise Deep500Error(
            f"BucketSampler: dataset {dataset.name} is not an in-memory token dataset "
            f"with a pad_token to tell its sequences' lengths by; give lengths=[one "
            f"length per sample]")
    data = np.asarray(data).reshape(len(data), -1)
    if dataset.pad_token is None:
        return np.full(len(data), data.shape[1], dtype=np.int64)
    return (data != dataset.pad_token).sum(axis=1).astype(np.int64)


def _lengths(dataset: Dataset, lengths) -> np.ndarray:
    if lengths is None:
        return sequence_lengths(dataset)
    if callable(lengths):
        lengths = lengths(dataset)
    values = np.asarray(lengths)
    if values.ndim != 1 or len(values) != len(dataset):
        raise Deep500Error(f"BucketSampler: lengths must hold one length per sample of "
                           f"{dataset.name} ({len(dataset)}), got shape {values.shape}")
    if values.size and (values.dtype.kind not in "iu" or values.min() < 0):
        raise Deep500Error("BucketSampler: lengths are integers >= 0")
    return values.astype(np.int64)


def bucket_of_lengths(lengths: np.ndarray, buckets) -> np.ndarray:
    """The bucket (0, 1, ... in increasing length) of every sample: ``buckets=None``
    one per distinct length; an integer n: at most n buckets of about equal sample
    counts, cut between lengths (one length is never split between two buckets); a
    list of increasing boundaries ``[b1, b2, ...]``: lengths up to b1, then up to b2,
    ..., then above the last (empty buckets are dropped)."""
    distinct, inverse, counts = np.unique(lengths, return_inverse=True, return_counts=True)
    if buckets is None:
        return inverse.astype(np.int64)
    if isinstance(buckets, Integral) and not isinstance(buckets, bool):
        if buckets < 1:
            raise Deep500Error(f"BucketSampler: buckets is a number of buckets >= 1, got "
                               f"{buckets}")
        # cut where the cumulative count first reaches each 1/n of the samples
        cumulative = np.cumsum(counts)
        targets = len(lengths) * np.arange(1, int(buckets)) / int(buckets)
        cuts = np.unique(np.searchsorted(cumulative, targets, side="left"))
        group = np.searchsorted(cuts, np.arange(len(distinct)), side="left")
        return np.unique(group, return_inverse=True)[1][inverse].astype(np.int64)
    try:
        bounds = [int(b) for b in buckets]
    except (TypeError, ValueError):
        raise Deep500Error(f"BucketSampler: buckets is None, a number of buckets or a "
                           f"list of increasing length boundaries, got {buckets!r}") from None
    if not bounds or any(b >= c for b, c in zip(bounds, bounds[1:])):
        raise Deep500Error(f"BucketSampler: bucket boundaries must increase, got {bounds}")
    raw = np.searchsorted(np.asarray(bounds), lengths, side="left")
    return np.unique(raw, return_inverse=True)[1].astype(np.int64)


class BucketSampler(Sampler):
    """Minibatches of sequences of similar length (see the module docstring).

    Args:
        dataset, batch_size, seed, drop_last_batch, events, transformations: as for
            every :class:`Sampler`.
        lengths: one length per sample (a sequence, or a function of the dataset
            returning one); default: the tokens that are not the dataset's
            ``pad_token`` (:func:`sequence_lengths`).
        buckets: ``None`` (one bucket per distinct length), a number of buckets of
            about equal size, or increasing length boundaries
            (:func:`bucket_of_lengths`).
        shuffle: shuffle within the buckets and the minibatches across them each
            epoch (seeded); ``False``: buckets by increasing length, in index order.

    Attributes: ``lengths`` (per sample), ``bucket`` (each sample's bucket) and
    ``buckets`` (per bucket: ``{"lengths": (shortest, longest), "samples": n}``).
    """

    def __init__(self, dataset: Dataset, batch_size: int, seed: int | None = 0,
                 lengths: Sequence[int] | Callable | None = None, buckets=None,
                 drop_last_batch: bool = True, shuffle: bool = True,
                 events: Sequence[SamplerEvent] = (),
                 transformations: Sequence[Callable] = ()):
        if not isinstance(dataset, Dataset):
            raise Deep500Error(f"{type(self).__name__} needs a d5 Dataset, got "
                               f"{type(dataset).__name__}")
        self.lengths = _lengths(dataset, lengths)
        self.bucket = bucket_of_lengths(self.lengths, buckets)
        self.shuffle = bool(shuffle)
        # each bucket's sample indices, in index order
        order = np.argsort(self.bucket, kind="stable")
        splits = np.cumsum(np.bincount(self.bucket))[:-1]
        self._members = np.split(order, splits)
        self.buckets = [{"lengths": (int(self.lengths[m].min()), int(self.lengths[m].max())),
                         "samples": int(len(m))} for m in self._members]
        self._bounds: np.ndarray | None = None
        super().__init__(dataset, batch_size, seed=seed, drop_last_batch=drop_last_batch,
                         events=events, transformations=transformations)
        if len(self) == 0:
            raise Deep500Error(
                f"{type(self).__name__}: no bucket of {dataset.name} fills a minibatch of "
                f"{self._batch_samples()} (largest bucket: "
                f"{max(b['samples'] for b in self.buckets)} samples); use fewer buckets, "
                f"a smaller batch or drop_last_batch=False")

    # -- batches -----------------------------------------------------------------------
    def _batch_samples(self) -> int:
        """Samples of one full minibatch of a bucket (all ranks' for a distributed one)."""
        return self.batch_size

    def _keeps_partial(self) -> bool:
        return not self.drop_last_batch

    def __len__(self) -> int:
        size = self._batch_samples()
        return sum(n // size + (1 if n % size and self._keeps_partial() else 0)
                   for n in (len(m) for m in self._members))

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The epoch's sample indices, minibatch after minibatch; their boundaries are
        kept for :meth:`_batch_indices`."""
        rng = np.random.default_rng([self.seed, epoch]) if self.shuffle else None
        size = self._batch_samples()
        batches = []
        for members in self._members:
            if rng is not None:
                members = rng.permutation(members)
            for start in range(0, len(members), size):
                batch = members[start:start + size]
                if len(batch) == size or self._keeps_partial():
                    batches.append(batch)
        if rng is not None:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        self._bounds = np.cumsum([0] + [len(b) for b in batches])
        return np.concatenate(batches) if batches else np.empty(0, dtype=np.int64)

    def _batch_indices(self, batch: int) -> np.ndarray:
        return self._order[self._bounds[batch]:self._bounds[batch + 1]]

    # -- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {**super().state_dict(), "shuffle": self.shuffle,
                "bucket_sizes": [b["samples"] for b in self.buckets]}

    def load_state_dict(self, state: dict) -> None:
        saved = (state.get("shuffle"), state.get("bucket_sizes"))
        mine = (self.shuffle, [b["samples"] for b in self.buckets])
        if saved != (None, None) and saved != mine:
            raise Deep500Error(f"Cannot resume {type(self).__name__}: it was saved with "
                               f"(shuffle, bucket sizes) = {saved}, but this sampler has "
                               f"{mine}; the batches would differ")
        super().load_state_dict(state)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.dataset.name}, batch_size={self.batch_size}, "
                f"seed={self.seed}, {len(self.buckets)} buckets, {len(self)} batches per "
                f"epoch)")
