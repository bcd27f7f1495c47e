"""Samplers: iterators over minibatches of a :class:`Dataset`.

``for batch in sampler`` runs one epoch (``len(sampler)`` minibatches of
``{node: array}``); the next ``for`` starts the next epoch. Randomness is a pure
function of ``(seed, epoch, batch)``: epoch ``e``'s order is drawn from
``np.random.default_rng([seed, e])`` and batch ``b``'s transformations from
``np.random.default_rng([seed, e, b])``. So two samplers with the same seed give the same
minibatches in every framework, a run resumed from a checkpoint (``state_dict``) sees
exactly the batches of an uninterrupted one, and distributed samplers (Level 3) can
draw shards of one permutation on every rank without communicating.

Transformations are callables ``transform(batch, rng) -> batch`` applied in order to
each minibatch (see ``deep500.lv2_training.transformations``).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from deep500.lv2_training.dataset import Dataset
from deep500.utils.errors import Deep500Error


class SamplerEvent:
    """Hooks around the sampling of one minibatch."""

    def before_sampling(self, sampler: "Sampler") -> None:
        """Before indices are drawn and the dataset is read."""

    def after_sampling(self, sampler: "Sampler", batch: dict) -> None:
        """After the minibatch was read and transformed."""


class Sampler:
    """Base class: subclasses give the indices of each batch (``_batch_indices``).

    Attributes:
        dataset, batch_size, seed, drop_last_batch, events, transformations: as given.
        epoch: the current epoch (0-based), advanced when an epoch starts anew.
        position: minibatches drawn so far in the current epoch.
    """

    def __init__(self, dataset: Dataset, batch_size: int, seed: int | None = 0,
                 drop_last_batch: bool = True, events: Sequence[SamplerEvent] = (),
                 transformations: Sequence[Callable] = ()):
        if not isinstance(dataset, Dataset):
            raise Deep500Error(f"{type(self).__name__} needs a d5 Dataset, got "
                               f"{type(dataset).__name__}")
        if int(batch_size) < 1:
            raise Deep500Error(f"batch_size must be at least 1, got {batch_size}")
        if len(dataset) == 0:
            raise Deep500Error(f"{type(self).__name__}: dataset {dataset.name} is empty")
        if drop_last_batch and batch_size > len(dataset):
            raise Deep500Error(f"batch_size {batch_size} is larger than dataset "
                               f"{dataset.name} ({len(dataset)} samples) and "
                               f"drop_last_batch=True would give no batch at all")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.seed = int(np.random.SeedSequence().entropy % 2**32 if seed is None else seed)
        self.drop_last_batch = bool(drop_last_batch)
        self.events = list(events)
        self.transformations = list(transformations)
        self.epoch = 0
        self.position = 0
        self._order: np.ndarray | None = None
        self._epoch_length: int | None = None

    # -- subclasses --------------------------------------------------------------------
    def epoch_order(self, epoch: int) -> np.ndarray | None:
        """The sample indices of one epoch in order (``None``: batches are drawn
        independently by ``_batch_indices``)."""
        raise NotImplementedError

    def _batch_indices(self, batch: int) -> np.ndarray:
        """Indices of minibatch ``batch`` of the current epoch."""
        start = batch * self.batch_size
        return self._order[start:start + self.batch_size]

    def _transformation_rng(self) -> np.random.Generator:
        """The generator for the transformations of the next minibatch."""
        return np.random.default_rng([self.seed, self.epoch, self.position])

    def _samples_per_epoch(self) -> int:
        return len(self.dataset)

    # -- iteration ---------------------------------------------------------------------
    def __len__(self) -> int:
        samples = self._samples_per_epoch()
        full, rest = divmod(samples, self.batch_size)
        return full + (1 if rest and not self.drop_last_batch else 0)

    def __iter__(self):
        if self.position >= len(self):
            self.reset()
        return self

    def __next__(self) -> dict:
        # The length is computed once per epoch: in a training loop this runs with
        # caches just flushed by backpropagation, where every Python call is costly.
        if self._order is None or self._epoch_length is None:
            self._epoch_length = len(self)
        if self.position >= self._epoch_length:
            raise StopIteration
        for event in self.events:
            event.before_sampling(self)
        if self._order is None:
            self._order = self.epoch_order(self.epoch)
        batch = self.dataset[self._batch_indices(self.position)]
        if self.transformations:
            rng = self._transformation_rng()
            for transform in self.transformations:
                batch = transform(batch, rng)
        self.position += 1
        for event in self.events:
            event.after_sampling(self, batch)
        return batch

    def reset(self) -> None:
        """Start the next epoch (a new order for shuffling samplers)."""
        self.epoch += 1
        self.position = 0
        self._order = None

    # -- checkpoints -----------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"sampler": type(self).__name__, "seed": self.seed, "epoch": self.epoch,
                "position": self.position, "batch_size": self.batch_size,
                "drop_last_batch": self.drop_last_batch, "dataset_size": len(self.dataset)}

    def load_state_dict(self, state: dict) -> None:
        if state.get("sampler") != type(self).__name__:
            raise Deep500Error(f"Cannot load the state of a {state.get('sampler')} into a "
                               f"{type(self).__name__}")
        saved = (state.get("batch_size"), state.get("drop_last_batch"),
                 state.get("dataset_size"))
        mine = (self.batch_size, self.drop_last_batch, len(self.dataset))
        if any(s is not None and s != m for s, m in zip(saved, mine)):
            raise Deep500Error(f"Cannot resume {type(self).__name__}: it was saved with "
                               f"(batch_size, drop_last_batch, dataset size) = {saved}, "
                               f"but this sampler has {mine}; the batches would differ")
        self.seed, self.epoch = int(state["seed"]), int(state["epoch"])
        self.position, self._order = int(state["position"]), None

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.dataset.name}, batch_size={self.batch_size}, "
                f"seed={self.seed}, {len(self)} batches per epoch)")


class OrderedSampler(Sampler):
    """The dataset in index order, every epoch."""

    def epoch_order(self, epoch: int) -> np.ndarray:
        return np.arange(len(self.dataset))


class ShuffleSampler(Sampler):
    """A new seeded permutation of the dataset each epoch (sampling without
    replacement)."""

    def epoch_order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.dataset))


class ChoiceSampler(Sampler):
    """Each minibatch drawn uniformly with replacement; an epoch has as many batches
    as a pass over the dataset would."""

    def epoch_order(self, epoch: int) -> None:
        return None

    def __next__(self) -> dict:
        if self._order is None:
            self._order = np.empty(0, dtype=np.int64)   # marks the epoch as started
        return super().__next__()

    def _batch_indices(self, batch: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.epoch, batch, 1])
        remaining = self._samples_per_epoch() - batch * self.batch_size
        return rng.integers(0, len(self.dataset), min(self.batch_size, remaining))
