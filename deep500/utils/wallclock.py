"""Wall-clock time of a measured region, with warm-up, reruns and a median CI.

Follows Hoefler & Belli, "Scientific Benchmarking of Parallel Computing Systems"
(SC'15): report the median of many runs with its nonparametric confidence interval,
keep the raw samples, and say when the interval is too wide to trust.
"""
from __future__ import annotations

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
    """
    measures_time = True

    def __init__(self, reruns: int = 30, warmup: int = 3,
                 device: DeviceDescriptor | str | None = None,
                 confidence: float = 0.95, ci_warn_fraction: float = 0.05):
        if reruns < 1 or warmup < 0:
            raise ValueError(f"WallclockTime needs reruns >= 1 and warmup >= 0, got "
                             f"reruns={reruns}, warmup={warmup}")
        if not 0.0 < confidence < 1.0 or not ci_warn_fraction >= 0.0:
            raise ValueError(f"WallclockTime needs 0 < confidence < 1 and "
                             f"ci_warn_fraction >= 0, got confidence={confidence}, "
                             f"ci_warn_fraction={ci_warn_fraction}")
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

    def set_device(self, device) -> None:
        """Synchronise ``device`` around each clock read (no-op for the CPU)."""
        self.device = parse_device(device)
        self._sync = self.device.synchronize if self.device.is_gpu else None

    def begin(self, inputs=None) -> None:
        sync = self._sync
        if sync is not None:
            sync()
        self._t0 = perf_counter_ns()

    def end(self, outputs=None) -> None:
        sync = self._sync
        if sync is not None:
            sync()
        self._samples_ns.append(perf_counter_ns() - self._t0)

    def reset(self) -> None:
        self._samples_ns = []

    def time(self, fn: Callable[..., Any], *args, **kwargs) -> MetricResult:
        """Run ``fn(*args, **kwargs)`` warmup + reruns times and return the result."""
        self.reset()
        sync = self._sync
        samples = self._samples_ns
        clock = perf_counter_ns
        for _ in range(self.reruns):
            if sync is not None:
                sync()
            t0 = clock()
            fn(*args, **kwargs)
            if sync is not None:
                sync()
            samples.append(clock() - t0)
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
