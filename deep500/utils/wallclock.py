"""Wall-clock time of a measured region, with warm-up, reruns and a median CI.

Follows Hoefler & Belli, "Scientific Benchmarking of Parallel Computing Systems"
(SC'15): report the median of many runs with its nonparametric confidence interval,
keep the raw samples, and say when the interval is too wide to trust.

Adaptive reruns (``target_ci``, ``max_time``): after the fixed reruns, measure on in
blocks until the median's CI is narrow enough or the time budget is spent, as
``torch.utils.benchmark.Timer.adaptive_autorange`` (blocks until IQR/median falls below
a threshold, within ``max_run_time``) and pyperf's calibration (more values until the
result is stable) do; here the stopping statistic is the nonparametric CI of the
median that the result reports.
"""
from __future__ import annotations

import math
import warnings
from time import perf_counter_ns
from typing import Any, Callable

from deep500.utils.device import CPUDevice, DeviceDescriptor, parse_device
from deep500.utils.metric import MetricResult, TestMetric
from deep500.utils.statistics import summarize


class UnstableMeasurementWarning(UserWarning):
    """The confidence interval of a median is wider than the accepted fraction."""


class WallclockTime(TestMetric):
    """Seconds per run of the measured region, from ``time.perf_counter_ns``.

    Args:
        reruns: measured runs kept for the statistics.
        warmup: runs before those, discarded (caches, allocators, lazy initialisation).
        device: where the region runs; on a GPU the device is synchronised before each
            clock read, so queued kernels are counted.
        confidence: level of the median's confidence interval.
        ci_warn_fraction: warn when (ci_high - ci_low) / median exceeds this.
        target_ci: adaptive reruns: after ``reruns``, keep measuring in blocks until the
            CI's relative half-width, (ci_high − ci_low) / (2 · median), is at most
            this (e.g. 0.02), or ``max_time`` is spent. Default with ``max_time`` alone:
            ``ci_warn_fraction / 2``, so a result that stops on target does not warn.
        max_time: adaptive reruns: seconds budget for the whole measurement (warm-up
            and fixed reruns included, from the first run's start); default with
            ``target_ci`` alone: 10 s (``adaptive_autorange``'s ``max_run_time``).
        max_reruns: adaptive reruns: never keep more measured runs than this (default
            the larger of ``reruns`` and 100 000, which bounds the raw samples kept).

    Drivers run ``reruns`` times, then ask :meth:`more_runs` how many more runs the
    timer wants until it answers 0 (``deep500.utils.metric.run_together`` does).
    """
    measures_time = True
    # The summary's keys (recipe thresholds are checked against them at load); the last
    # five only when target_ci or max_time asks for adaptive reruns.
    fields = ("median", "mean", "std", "min", "max", "n", "ci_low", "ci_high",
              "ci_confidence", "ci_relative_width", "warmup", "target_ci", "max_time",
              "target_reached", "stopped_by", "extra_runs")
    default_max_time = 10.0

    def __init__(self, reruns: int = 30, warmup: int = 3,
                 device: DeviceDescriptor | str | None = None,
                 confidence: float = 0.95, ci_warn_fraction: float = 0.05,
                 target_ci: float | None = None, max_time: float | None = None,
                 max_reruns: int | None = None):
        if reruns < 1 or warmup < 0:
            raise ValueError(f"WallclockTime needs reruns >= 1 and warmup >= 0, got "
                             f"reruns={reruns}, warmup={warmup}")
        if not 0.0 < confidence < 1.0 or not ci_warn_fraction >= 0.0:
            raise ValueError(f"WallclockTime needs 0 < confidence < 1 and "
                             f"ci_warn_fraction >= 0, got confidence={confidence}, "
                             f"ci_warn_fraction={ci_warn_fraction}")
        if target_ci is not None and not 0.0 < target_ci < 1.0:
            raise ValueError(f"WallclockTime needs 0 < target_ci < 1 (a fraction of the "
                             f"median), got target_ci={target_ci}")
        if max_time is not None and not max_time > 0.0:
            raise ValueError(f"WallclockTime needs max_time > 0 seconds, got "
                             f"max_time={max_time}")
        if max_reruns is not None and max_reruns < reruns:
            raise ValueError(f"WallclockTime needs max_reruns >= reruns, got "
                             f"max_reruns={max_reruns}, reruns={reruns}")
        self.adaptive = target_ci is not None or max_time is not None
        self.target_ci = (target_ci if target_ci is not None else ci_warn_fraction / 2.0) \
            if self.adaptive else None
        self.max_time = (max_time if max_time is not None else self.default_max_time) \
            if self.adaptive else None
        self.max_reruns = int(max_reruns) if max_reruns is not None else max(int(reruns),
                                                                              100_000)
        self.measured_reruns = int(reruns)
        self.warmup = int(warmup)
        self.reruns = self.measured_reruns + self.warmup
        self.confidence = confidence
        self.ci_warn_fraction = ci_warn_fraction
        self.device = CPUDevice()
        self._sync: Callable[[], None] | None = None
        self.set_device(device)
        self._t0 = 0
        self._samples_ns: list[int] = []
        self._first_ns: int | None = None  # start of the first run (adaptive budget)
        self._stopped_by: str | None = None

    def set_device(self, device) -> None:
        """Synchronise ``device`` around each clock read (no-op for the CPU)."""
        self.device = parse_device(device)
        self._sync = self.device.synchronize if self.device.is_gpu else None

    def begin(self, inputs=None) -> None:
        sync = self._sync
        if sync is not None:
            sync()
        self._t0 = perf_counter_ns()
        if self._first_ns is None:
            self._first_ns = self._t0

    def end(self, outputs=None) -> None:
        sync = self._sync
        if sync is not None:
            sync()
        self._samples_ns.append(perf_counter_ns() - self._t0)

    def reset(self) -> None:
        self._samples_ns = []
        self._first_ns = None
        self._stopped_by = None

    def relative_half_width(self) -> float:
        """(ci_high − ci_low) / (2 · median) of the measured runs so far (nan if too
        few for a CI)."""
        summary = summarize(self.samples_seconds, self.confidence)
        width = summary.get("ci_relative_width", math.nan)
        return width / 2.0 if width == width else math.nan

    def more_runs(self) -> int:
        """How many more runs the timer wants (0: done). Without ``target_ci`` and
        ``max_time``: always 0.

        With them, once the fixed runs are in: 0 when the CI's relative half-width is
        at most ``target_ci``, the budget is spent, or ``max_reruns`` is reached; else
        a block sized by the CI's 1/√n shrinkage, n · (half-width / target)² − n runs,
        at least a quarter of the n runs so far (so the CI is computed a logarithmic
        number of times) and at most n (a CI from few samples is wide and would
        overshoot: stopping comes at most one doubling late), and no more than the rest
        of the budget holds at the mean time per run so far.
        """
        if not self.adaptive:
            return 0
        measured = len(self._samples_ns) - self.warmup
        if measured < self.measured_reruns:
            return self.measured_reruns - measured
        if self._first_ns is None:
            return 0
        elapsed = perf_counter_ns() - self._first_ns
        budget = self.max_time * 1e9
        half = self.relative_half_width()
        if half == half and half <= self.target_ci:
            self._stopped_by = "target"
            return 0
        if elapsed >= budget:
            self._stopped_by = "max_time"
            return 0
        if measured >= self.max_reruns:
            self._stopped_by = "max_reruns"
            return 0
        wanted = math.ceil(measured * (half / self.target_ci) ** 2) - measured \
            if half == half else measured
        block = min(max(wanted, measured // 4, 1), max(measured, 1))
        per_run = elapsed / len(self._samples_ns)
        fits = int((budget - elapsed) / per_run) if per_run > 0 else block
        return max(1, min(block, fits, self.max_reruns - measured))

    def time(self, fn: Callable[..., Any], *args, **kwargs) -> MetricResult:
        """Run ``fn(*args, **kwargs)`` warmup + reruns times and return the result."""
        self.reset()
        sync = self._sync
        samples = self._samples_ns
        clock = perf_counter_ns
        runs = self.reruns
        if self._first_ns is None:
            self._first_ns = clock()
        while runs:
            for _ in range(runs):
                if sync is not None:
                    sync()
                t0 = clock()
                fn(*args, **kwargs)
                if sync is not None:
                    sync()
                samples.append(clock() - t0)
            runs = self.more_runs()
        return self.measure(None, None, None)

    @property
    def samples_seconds(self) -> list[float]:
        return [ns * 1e-9 for ns in self._samples_ns[self.warmup:]]

    def measure(self, inputs=None, outputs=None, reference_outputs=None) -> MetricResult:
        if len(self._samples_ns) <= self.warmup:
            raise RuntimeError(f"WallclockTime recorded {len(self._samples_ns)} runs but "
                               f"needs more than its {self.warmup} warm-up runs")
        samples = self.samples_seconds
        summary = summarize(samples, self.confidence)
        summary["warmup"] = self.warmup
        if self.adaptive:
            half = summary.get("ci_relative_width", math.nan) / 2.0
            summary.update(target_ci=self.target_ci, max_time=self.max_time,
                           target_reached=bool(half == half and half <= self.target_ci),
                           extra_runs=max(0, len(samples) - self.measured_reruns),
                           stopped_by=self._stopped_by)
        result = MetricResult(self.name, summary, primary="median", unit="s",
                              samples=samples, conditions={"device": str(self.device)})
        width = summary.get("ci_relative_width")
        if width is not None and width == width and width > self.ci_warn_fraction:
            message = (f"the {self.confidence:.0%} CI of the median spans {width:.1%} of "
                       f"it (more than {self.ci_warn_fraction:.0%}); the machine may be "
                       f"noisy: add reruns or quiet the machine")
            result.warnings.append(message)
            warnings.warn(message, UnstableMeasurementWarning, stacklevel=2)
        elif width != width:
            result.warnings.append(f"{summary['n']} samples are too few for a "
                                   f"{self.confidence:.0%} CI of the median")
        return result
