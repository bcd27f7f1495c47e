"""``Timeline``: a training metric that records the distributed scheme's phase events
on every rank and writes them, gathered at rank 0, as Chrome-trace / Perfetto JSON
files (:mod:`deep500.lv3_distributed.timeline`), like Horovod's ``HOROVOD_TIMELINE``:
one file per rank, ``<name>-rank<r>.json``, and with several ranks one more with every
rank on one clock, ``<name>.json`` (``<name>`` is ``path`` without its extension and
without a ``-rank<r>`` ending naming the writing rank, as a recipe's tags end).

In a recipe (``experiment: distributed``): ``metrics: {Timeline: {}}`` writes
``timeline/<config>-rank<r>.json`` and ``timeline/<config>.json`` in the run folder,
linked from the report; open them in ``chrome://tracing`` or ui.perfetto.dev. Options:
``first_steps`` and ``every`` (which steps are recorded: the first ``first_steps`` of
each epoch, then every ``every``-th), ``capacity`` (the most events per rank).

Summary: ``path`` (rank 0: the file of every rank, or with one rank its file; ``None``
elsewhere), ``rank_paths`` (rank 0: each rank's file), ``ranks``, ``events`` (all
ranks), ``steps_recorded`` (rank 0's), ``dropped`` (events beyond ``capacity``, all
ranks).
The ranks' events travel pickled over the raw communicator after training
(bookkeeping, not counted as the scheme's traffic).
"""
from __future__ import annotations

import os
import re

from deep500.lv2_training.events import TrainingEvent
from deep500.lv2_training.training_metrics import TrainingMetric
from deep500.lv3_distributed.timeline import TimelineRecorder, write_chrome_trace
from deep500.utils.errors import Deep500Error
from deep500.utils.metric import MetricResult


class Timeline(TrainingMetric, TrainingEvent):
    """Phase events of every rank as a Chrome trace (see the module docstring).

    Args:
        path: the JSON file rank 0 writes (a recipe's run fills in
            ``timeline/<tag>.json``); ``None``: gathered and counted, not written.
        first_steps, every, capacity: see
            :class:`~deep500.lv3_distributed.timeline.TimelineRecorder`.
    """

    fields = ("path", "rank_paths", "ranks", "events", "steps_recorded", "dropped")

    def __init__(self, path: str | None = None, first_steps: int = 5, every: int = 10,
                 capacity: int = 100_000):
        TimelineRecorder(1, first_steps, every)  # checks the values now
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise Deep500Error(f"Timeline: capacity={capacity!r}: give an integer >= 1")
        self.path = path
        self.first_steps, self.every, self.capacity = first_steps, every, capacity
        self._scheme = None
        self._summary = None
        self._warning = None

    def before_training(self, trainer, stats) -> None:
        scheme = trainer.optimizer
        if not callable(getattr(scheme, "record_timeline", None)):
            self._warning = (f"{getattr(scheme, 'name', type(scheme).__name__)} records no "
                             f"phase events (not a Level-3 scheme): no timeline")
            return
        self._scheme = scheme
        scheme.record_timeline(self.capacity, self.first_steps, self.every)

    def after_training(self, trainer, stats) -> None:
        scheme, self._scheme = self._scheme, None
        if scheme is None:
            return
        recorder = scheme.stop_timeline()
        payload = recorder.payload(scheme.rank)
        payloads = scheme.comm.comm.gather(payload, root=0) if scheme.size > 1 \
            else [payload]
        if scheme.rank != 0:
            self._summary = {"path": None, "rank_paths": None, "ranks": scheme.size,
                             "events": None, "steps_recorded": recorder.steps_recorded,
                             "dropped": recorder.dropped}
            return
        path = rank_paths = None
        if self.path is not None:
            metadata = {"scheme": scheme.name, "ranks": scheme.size,
                        "first_steps": self.first_steps, "every": self.every}
            every_rank, rank_paths = timeline_paths(self.path, scheme.rank, len(payloads))
            rank_paths = [write_chrome_trace(rank_path, [payload], metadata)
                          for rank_path, payload in zip(rank_paths, payloads)]
            path = (write_chrome_trace(every_rank, payloads, metadata)
                    if len(payloads) > 1 else rank_paths[0])
        self._summary = {"path": path, "rank_paths": rank_paths, "ranks": len(payloads),
                         "events": sum(len(p["names"]) for p in payloads),
                         "steps_recorded": recorder.steps_recorded,
                         "dropped": sum(p["dropped"] for p in payloads)}

    def measure_training(self, statistics) -> MetricResult:
        warnings = [self._warning] if self._warning else []
        summary = self._summary or {"path": None, "rank_paths": None, "ranks": None,
                                    "events": None, "steps_recorded": None,
                                    "dropped": None}
        if self._summary and summary["dropped"]:
            warnings.append(f"{summary['dropped']} events beyond capacity={self.capacity} "
                            f"were not recorded; raise capacity or every")
        return MetricResult(self.name, summary, "events", None, [], warnings=warnings,
                            conditions={"first_steps": self.first_steps,
                                        "every": self.every, "capacity": self.capacity})


def timeline_paths(path: str, rank: int, ranks: int) -> tuple[str, list[str]]:
    """``(file of every rank, [file of rank r for r in range(ranks)])`` for ``path``
    written by ``rank``: ``<name>.json`` and ``<name>-rank<r>.json``, where ``<name>`` is
    ``path`` without its extension and without a ``-rank<rank>`` ending (a recipe's tag
    names the rank that writes: ``0003-reference-rank0``)."""
    stem, extension = os.path.splitext(path)
    stem = re.sub(rf"-rank{rank}$", "", stem)
    extension = extension or ".json"
    return stem + extension, [f"{stem}-rank{r}{extension}" for r in range(ranks)]
