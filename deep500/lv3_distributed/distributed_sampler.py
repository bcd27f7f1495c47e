"""Distributed samplers: each rank draws its own minibatches with no communication.

* :class:`DistributedSampler`: every rank holds the whole dataset. Each epoch has one
  seeded permutation, the same on every rank (``np.random.default_rng([seed, epoch])``,
  as :class:`~deep500.lv2_training.sampler.ShuffleSampler`); global minibatch ``i`` is
  ``order[i*p*b:(i+1)*p*b]`` and rank ``r`` takes its ``r``-th slice of ``b`` samples.
  The ranks' shards are disjoint, and together they are exactly the minibatches of a
  single-process ``ShuffleSampler`` with batch ``p*b`` and the same seed: this is what
  makes data-parallel SGD on ``p`` ranks comparable with (and, by Theorem 1 of
  synchronous SGD, equal to) one process with a ``p`` times larger batch.
* :class:`PartitionedDistributedSampler`: rank ``r`` reads only its contiguous part
  ``[r*N/p, (r+1)*N/p)`` of the dataset (as when each node stores only its shard of a
  large dataset), shuffled each epoch with ``[seed, rank, epoch]``.
* :class:`DistributedBucketSampler`: length-bucketed minibatches (as
  :class:`~deep500.lv2_training.bucket_sampler.BucketSampler`) over ranks: each global
  minibatch comes from one bucket, and rank ``r`` takes its ``r``-th slice.

Every rank takes the same number of steps per epoch (a rank that took one more step
would wait forever in the next collective), so the remainder that does not fill a
global minibatch is dropped.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from deep500.lv2_training.bucket_sampler import BucketSampler
from deep500.lv2_training.dataset import Dataset
from deep500.lv2_training.sampler import Sampler, SamplerEvent
from deep500.utils.errors import Deep500Error


def rank_and_size(comm=None, rank: int | None = None,
                  size: int | None = None) -> tuple[int, int]:
    """``(rank, size)`` from explicit integers, a :class:`CommunicationNetwork`, an
    mpi4py communicator, or (``comm=None``) the MPI world when launched by ``mpirun``
    and ``(0, 1)`` otherwise."""
    if rank is not None or size is not None:
        if rank is None or size is None:
            raise Deep500Error("Give both rank and size, or a communicator")
        rank, size = int(rank), int(size)
    elif comm is None:
        from deep500.lv3_distributed.mpi_launch import launched_by_mpirun, world_communicator
        if not launched_by_mpirun():
            return 0, 1
        world = world_communicator()
        rank, size = world.Get_rank(), world.Get_size()
    elif hasattr(comm, "rank") and hasattr(comm, "size") and \
            isinstance(comm.rank, int) and isinstance(comm.size, int):
        rank, size = comm.rank, comm.size
    elif hasattr(comm, "Get_rank"):
        rank, size = comm.Get_rank(), comm.Get_size()
    else:
        raise Deep500Error(f"Not a communicator: {type(comm).__name__}; pass a "
                           f"d5.CommunicationNetwork or an mpi4py communicator")
    if size < 1 or not 0 <= rank < size:
        raise Deep500Error(f"rank {rank} is not within a world of size {size}")
    return rank, size


def partition_bounds(samples: int, size: int, rank: int) -> tuple[int, int]:
    """``[start, stop)`` of rank ``rank``'s contiguous part of ``samples`` samples split
    over ``size`` ranks (the first ``samples % size`` parts are one larger)."""
    base, extra = divmod(samples, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


class _RankShard:
    """What every distributed sampler adds to its single-process base: a rank and a
    world size (``rank_and_size``), an explicit seed, a global batch of ``batch_size *
    size``, per-rank transformation draws, and a checkpoint that names its rank."""

    def _take_rank(self, comm, rank, size, seed) -> None:
        self.rank, self.size = rank_and_size(comm, rank, size)
        if seed is None:
            raise Deep500Error("A distributed sampler needs an explicit seed: every rank "
                               "must draw the same permutation")

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.size

    def _transformation_rng(self) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.epoch, self.position, self.rank])

    def state_dict(self) -> dict:
        return {**super().state_dict(), "rank": self.rank, "size": self.size}

    def load_state_dict(self, state: dict) -> None:
        saved = (state.get("rank"), state.get("size"))
        if saved != (None, None) and saved != (self.rank, self.size):
            raise Deep500Error(f"Cannot resume {type(self).__name__} of rank {self.rank} "
                               f"of {self.size} from the state of rank {saved[0]} of "
                               f"{saved[1]}: the shards would differ")
        super().load_state_dict(state)


class DistributedSampler(_RankShard, Sampler):
    """Rank ``rank``'s shard of every global minibatch of a seeded per-epoch
    permutation (see the module docstring). ``batch_size`` is the local batch ``b``;
    the global batch is ``b * size``. ``shuffle=False`` shards the dataset in index
    order."""

    def __init__(self, dataset: Dataset, batch_size: int, comm=None, seed: int = 0,
                 shuffle: bool = True, events: Sequence[SamplerEvent] = (),
                 transformations: Sequence[Callable] = (), rank: int | None = None,
                 size: int | None = None):
        self._take_rank(comm, rank, size, seed)
        super().__init__(dataset, batch_size, seed=seed, drop_last_batch=True,
                         events=events, transformations=transformations)
        self.shuffle = bool(shuffle)
        if len(self) == 0:
            raise Deep500Error(
                f"{type(self).__name__}: dataset {dataset.name} has {len(dataset)} "
                f"samples, fewer than one global minibatch of {self.global_batch_size} "
                f"({self.size} ranks x {self.batch_size}); lower batch_size")

    def __len__(self) -> int:
        return len(self.dataset) // self.global_batch_size

    def epoch_order(self, epoch: int) -> np.ndarray:
        if self.shuffle:
            return np.random.default_rng([self.seed, epoch]).permutation(len(self.dataset))
        return np.arange(len(self.dataset))

    def _batch_indices(self, batch: int) -> np.ndarray:
        start = batch * self.global_batch_size + self.rank * self.batch_size
        return self._order[start:start + self.batch_size]

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.dataset.name}, rank {self.rank} of "
                f"{self.size}, batch_size={self.batch_size} (global "
                f"{self.global_batch_size}), seed={self.seed}, {len(self)} batches per "
                f"epoch)")


class PartitionedDistributedSampler(DistributedSampler):
    """Rank ``rank`` reads only its contiguous part of ``dataset``
    (:func:`partition_bounds`), in a new order each epoch (``shuffle=True``). Every rank
    takes ``min over ranks of part // batch_size`` steps per epoch, computed from the
    sizes alone (no communication)."""

    def __init__(self, dataset: Dataset, batch_size: int, comm=None, seed: int = 0,
                 shuffle: bool = True, events: Sequence[SamplerEvent] = (),
                 transformations: Sequence[Callable] = (), rank: int | None = None,
                 size: int | None = None):
        self.rank, self.size = rank_and_size(comm, rank, size)
        self.part = partition_bounds(len(dataset), self.size, self.rank)
        super().__init__(dataset, batch_size, seed=seed, shuffle=shuffle, events=events,
                         transformations=transformations, rank=self.rank, size=self.size)

    def __len__(self) -> int:
        smallest = len(self.dataset) // self.size   # the last parts are the smallest
        return smallest // self.batch_size

    def epoch_order(self, epoch: int) -> np.ndarray:
        start, stop = self.part
        local = np.arange(start, stop)
        if self.shuffle:
            return np.random.default_rng([self.seed, self.rank, epoch]).permutation(local)
        return local

    def _batch_indices(self, batch: int) -> np.ndarray:
        start = batch * self.batch_size
        return self._order[start:start + self.batch_size]


class DistributedBucketSampler(_RankShard, BucketSampler):
    """:class:`~deep500.lv2_training.bucket_sampler.BucketSampler` over ranks: every
    rank draws the same seeded global minibatches of ``batch_size * size`` samples, each
    from one length bucket, and rank ``rank`` takes its ``rank``-th slice of
    ``batch_size``. So every rank's minibatch of a step holds similar lengths, the
    ranks' shards are disjoint, and every rank takes the same number of steps (a
    bucket's remainder that does not fill a global minibatch is left out of the
    epoch). ``lengths``, ``buckets`` and ``shuffle`` as for ``BucketSampler``."""

    def __init__(self, dataset: Dataset, batch_size: int, comm=None, seed: int = 0,
                 lengths=None, buckets=None, shuffle: bool = True,
                 events: Sequence[SamplerEvent] = (),
                 transformations: Sequence[Callable] = (), rank: int | None = None,
                 size: int | None = None):
        self._take_rank(comm, rank, size, seed)
        super().__init__(dataset, batch_size, seed=seed, lengths=lengths, buckets=buckets,
                         drop_last_batch=True, shuffle=shuffle, events=events,
                         transformations=transformations)

    def _batch_samples(self) -> int:
        return self.global_batch_size

    def _keeps_partial(self) -> bool:
        return False

    def _batch_indices(self, batch: int) -> np.ndarray:
        start = self._bounds[batch] + self.rank * self.batch_size
        return self._order[start:start + self.batch_size]

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.dataset.name}, rank {self.rank} of "
                f"{self.size}, batch_size={self.batch_size} (global "
                f"{self.global_batch_size}), seed={self.seed}, {len(self.buckets)} "
                f"buckets, {len(self)} batches per epoch)")
