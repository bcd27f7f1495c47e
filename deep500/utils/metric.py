"""The metric protocol shared by every level's validation functions.

A validation function (``d5.test_op_forward``, ...) runs the measured region
``max(m.reruns)`` times, then as many more as ``max(m.more_runs())`` asks, until that
is 0 (adaptive metrics measure until they are precise enough); around each run it calls
``begin`` on every metric, then ``end`` in reverse order, so timers sit innermost and
count only the measured call.
Afterwards ``measure(inputs, outputs, reference_outputs)`` turns what a metric saw into
a :class:`MetricResult`, which keeps raw samples and the conditions of the run.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from deep500.utils.errors import Deep500Error


@dataclass
class MetricResult:
    """One metric's outcome: a summary, the raw samples, and the conditions measured in.

    ``summary[primary]`` is the headline value (e.g. the median time, a relative error).
    """
    metric: str
    summary: dict
    primary: str
    unit: str | None = None
    samples: list = field(default_factory=list)
    conditions: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)

    @property
    def value(self):
        return self.summary.get(self.primary)

    def get(self, key: str | None = None):
        """A summary field; ``None`` gives the primary one."""
        key = key or self.primary
        if key not in self.summary:
            raise KeyError(f"{self.metric} has no field {key!r}; it has "
                           f"{sorted(self.summary)}")
        return self.summary[key]

    def to_dict(self) -> dict:
        return {"metric": self.metric, "primary": self.primary, "unit": self.unit,
                "summary": self.summary, "samples": self.samples,
                "conditions": self.conditions, "warnings": self.warnings}

    def to_json(self) -> str:
        return json.dumps(to_jsonable(self.to_dict()))

    def __str__(self) -> str:
        value = self.value
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        return f"{self.metric}: {shown}{' ' + self.unit if self.unit else ''}"


def to_jsonable(value: Any) -> Any:
    """Recursively turn NumPy scalars, arrays, tuples and NaN into JSON-safe values."""
    import numpy as np
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if hasattr(value, "to_dict"):
        return to_jsonable(value.to_dict())
    return value


class TestMetric:
    """Base class of metrics. Subclasses override what they need.

    Attributes:
        reruns: how many times the measured region must run for this metric.
        requires_outputs: whether ``end`` needs the region's outputs (e.g. to record
            run-to-run variance); validation functions only convert outputs to NumPy
            for the metrics that ask.
        measures_time: timers are placed innermost so other metrics' bookkeeping stays
            outside their clock.
        exclusive: the metric slows or disturbs the run (e.g. tracing allocations), so
            it is measured in runs of its own.
        needs_reference: the metric compares with reference values (an error norm), so
            a validation given none refuses it (:func:`require_reference`).
    """
    __test__ = False  # not a pytest test class despite the name
    reruns: int = 1
    requires_outputs: bool = False
    measures_time: bool = False
    exclusive: bool = False
    needs_reference: bool = False

    @property
    def name(self) -> str:
        return type(self).__name__

    def begin(self, inputs=None) -> None:
        """Called just before each run of the measured region."""

    def end(self, outputs=None) -> None:
        """Called just after each run of the measured region."""

    def measure(self, inputs, outputs, reference_outputs) -> MetricResult:
        raise NotImplementedError

    def reset(self) -> None:
        """Forget what was recorded, so the metric can measure another region."""

    def more_runs(self) -> int:
        """After its ``reruns``, how many more runs the metric wants (0: none)."""
        return 0


def require_reference(metric: TestMetric, reference, what: str) -> None:
    """Refuse ``metric`` when it compares with reference values and ``what`` (the
    validation and its subject, e.g. ``"test_op_forward of Relu"``) got none."""
    if reference is None and getattr(metric, "needs_reference", False):
        raise Deep500Error(f"{metric.name} compares with reference values, but {what} got "
                           f"none")


def run_measured(call: Callable[[], Any], metrics: Sequence[TestMetric],
                 to_numpy: Callable[[Any], Any] | None = None):
    """Run ``call()`` as many times as the metrics need, bracketing each run.

    Returns the outputs of the last run. ``to_numpy`` converts outputs for metrics
    with ``requires_outputs`` (outside any timer). Metrics marked ``exclusive`` (they
    disturb what others measure, like allocation tracing) get runs of their own.
    """
    outputs = None
    exclusive = [m for m in metrics if m.exclusive]
    for metric in exclusive:
        outputs = run_together(call, [metric], to_numpy)
    shared = [m for m in metrics if not m.exclusive]
    if not shared and exclusive:
        return outputs
    if exclusive:
        # metrics that also watch as events (OperatorTimes) saw the exclusive runs,
        # slowed by tracing or profiling: they measure the shared runs only
        for metric in shared:
            metric.reset()
    return run_together(call, shared, to_numpy)


def _more_runs(metrics) -> int:
    return max([m.more_runs() for m in metrics if hasattr(m, "more_runs")] + [0])


def run_together(call, metrics, to_numpy):
    ordered = sorted(metrics, key=lambda m: m.measures_time)  # timers last = innermost
    reverse = ordered[::-1]
    needs_outputs = [m for m in ordered if m.requires_outputs]
    runs = max([m.reruns for m in ordered] + [1])
    outputs = None
    if len(ordered) == 1 and not needs_outputs:
        # The common case (one timer) without per-run loops over metrics.
        begin, end = ordered[0].begin, ordered[0].end
        while runs:
            for _ in range(runs):
                outputs = None  # as below: free the previous outputs outside the clock
                begin()
                outputs = call()
                end()
            runs = _more_runs(ordered)
        return outputs
    while runs:
        outputs = None  # the last block's outputs, freed as in _run_block
        outputs = _run_block(call, ordered, reverse, to_numpy, runs)
        runs = _more_runs(ordered)
    return outputs


def _run_block(call, ordered, reverse, to_numpy, runs):
    outputs = None
    for _ in range(runs):
        # Free the previous run's outputs before the next run, outside the clock: holding
        # them makes the allocator hand out fresh (page-faulting) memory every run, which
        # a plain loop of calls would not.
        outputs = None
        for metric in ordered:
            metric.begin()
        outputs = call()
        converted = None
        for metric in reverse:
            if metric.requires_outputs:
                if converted is None:
                    converted = to_numpy(outputs) if to_numpy else outputs
                metric.end(converted)
            else:
                metric.end()
    return outputs
