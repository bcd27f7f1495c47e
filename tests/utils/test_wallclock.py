"""WallclockTime: warm-up, measured durations, the begin/end protocol, the wide-CI
warning, JSON output, device synchronisation and argument checks."""
import json
import warnings
from dataclasses import dataclass, field
from time import perf_counter_ns

import pytest

import deep500 as d5
from deep500.utils.device import DeviceDescriptor, GPUDevice
from deep500.utils.errors import Deep500Error
from deep500.utils.metric import TestMetric, run_measured
from deep500.utils.wallclock import UnstableMeasurementWarning, WallclockTime

BUSY_NS = 2_000_000  # 2 ms


def busy_wait(ns: int = BUSY_NS) -> None:
    start = perf_counter_ns()
    while perf_counter_ns() - start < ns:
        pass


@dataclass(frozen=True)
class CountingGPU(DeviceDescriptor):
    """A fake accelerator that logs every synchronize() call."""
    log: list = field(default_factory=list, compare=False, hash=False)

    @property
    def is_gpu(self) -> bool:
        return True

    def synchronize(self) -> None:
        self.log.append("sync")

    def __str__(self) -> str:
        return "fakegpu:0"


def test_public_names():
    assert d5.WallclockTime is WallclockTime
    assert d5.UnstableMeasurementWarning is UnstableMeasurementWarning
    assert issubclass(UnstableMeasurementWarning, UserWarning)
    assert WallclockTime.measures_time is True


def test_warmup_runs_are_counted_and_discarded():
    calls = []

    def fn():
        calls.append(None)
        # The three warm-up calls are slow (40 ms), the measured ones are not (0.1 ms).
        busy_wait(40_000_000 if len(calls) <= 3 else 100_000)

    timer = WallclockTime(reruns=7, warmup=3, ci_warn_fraction=100.0)
    assert timer.reruns == 10 and timer.measured_reruns == 7
    result = timer.time(fn)
    assert len(calls) == 10
    assert len(timer._samples_ns) == 10
    assert len(timer.samples_seconds) == 7
    assert result.summary["n"] == 7 and result.summary["warmup"] == 3
    assert len(result.samples) == 7
    # The discarded samples are the first (slow) ones: all kept ones are far below 40 ms.
    assert max(result.samples) < 0.020
    assert min(timer._samples_ns[:3]) >= 40_000_000


def test_time_passes_arguments_and_resets():
    seen = []
    timer = WallclockTime(reruns=6, warmup=1, ci_warn_fraction=100.0)
    timer.time(lambda a, b=0: seen.append((a, b)), 1, b=2)
    assert seen == [(1, 2)] * 7
    timer.time(lambda: None)
    assert len(timer._samples_ns) == 7  # the second call started from an empty record


def test_measures_a_known_busy_wait():
    # Up to 5 attempts: on an oversubscribed machine a preempted busy-wait overshoots by
    # a scheduler time slice (~4 ms), and 15 runs cannot always outvote that. A timer
    # that is wrong (units, counting warm-up or bookkeeping) fails every attempt.
    medians = []
    for _ in range(5):
        timer = WallclockTime(reruns=15, warmup=2, ci_warn_fraction=100.0)
        result = timer.time(busy_wait)
        assert result.primary == "median" and result.unit == "s"
        # Every sample contains the whole busy-wait, so nothing can be shorter than it.
        assert min(result.samples) >= BUSY_NS * 1e-9
        assert result.summary["ci_low"] <= result.value <= result.summary["ci_high"]
        medians.append(result.value)
        # Generous upper tolerance (+50%) for a loaded CI machine.
        if result.value <= 1.5 * BUSY_NS * 1e-9:
            break
    else:
        pytest.fail(f"median of a 2 ms busy-wait measured as "
                    f"{', '.join(f'{m * 1e3:.3f}' for m in medians)} ms in 5 attempts")


class RecordingMetric(TestMetric):
    def __init__(self, log, reruns):
        self.log = log
        self.reruns = reruns

    def begin(self, inputs=None):
        self.log.append("outer-begin")

    def end(self, outputs=None):
        self.log.append("outer-end")


class RecordingTimer(WallclockTime):
    def __init__(self, log, **kwargs):
        super().__init__(**kwargs)
        self.log = log

    def begin(self, inputs=None):
        self.log.append("timer-begin")
        super().begin(inputs)

    def end(self, outputs=None):
        super().end(outputs)
        self.log.append("timer-end")


def test_run_measured_single_timer():
    calls = []
    timer = WallclockTime(reruns=5, warmup=2, ci_warn_fraction=100.0)
    outputs = run_measured(lambda: calls.append(None) or len(calls), [timer])
    assert len(calls) == 7, "warmup + reruns runs of the measured region"
    assert outputs == 7, "the last run's outputs are returned"
    assert len(timer._samples_ns) == 7
    result = timer.measure()
    assert result.summary["n"] == 5 and len(result.samples) == 5


def test_run_measured_brackets_with_timer_innermost():
    log = []
    timer = RecordingTimer(log, reruns=4, warmup=1, ci_warn_fraction=100.0)
    outer = RecordingMetric(log, reruns=2)
    # The timer is listed first but must still run innermost.
    run_measured(lambda: log.append("call"), [timer, outer])
    one_run = ["outer-begin", "timer-begin", "call", "timer-end", "outer-end"]
    assert log == one_run * 5  # max(reruns) = 4 + 1 warm-up
    assert timer.measure().summary["n"] == 4


def _spread_timer(samples_ns, **kwargs):
    timer = WallclockTime(reruns=len(samples_ns), warmup=0, **kwargs)
    timer._samples_ns = list(samples_ns)
    return timer


def test_wide_confidence_interval_warns():
    # 1, 2, ..., 20 ms: the 95% CI [6 ms, 15 ms] is 9 ms wide around a 10.5 ms median.
    timer = _spread_timer([i * 1_000_000 for i in range(1, 21)])
    with pytest.warns(UnstableMeasurementWarning, match="95% CI of the median spans"):
        result = timer.measure()
    assert result.summary["ci_relative_width"] == pytest.approx(9 / 10.5, rel=1e-9)
    assert len(result.warnings) == 1 and "noisy" in result.warnings[0]


def test_warning_names_the_requested_confidence():
    timer = _spread_timer([i * 1_000_000 for i in range(1, 21)], confidence=0.9)
    with pytest.warns(UnstableMeasurementWarning, match="90% CI"):
        timer.measure()


def test_narrow_confidence_interval_does_not_warn():
    # 1 ms +- 0.1%: a relative CI width of at most 0.2% < 5%.
    samples = [1_000_000 + (i % 5) * 500 for i in range(30)]
    timer = _spread_timer(samples)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnstableMeasurementWarning)
        result = timer.measure()
    assert result.warnings == []
    assert result.summary["ci_relative_width"] < 0.05


def test_threshold_is_configurable():
    samples = [i * 1_000_000 for i in range(1, 21)]  # relative width 0.857
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnstableMeasurementWarning)
        assert _spread_timer(samples, ci_warn_fraction=0.9).measure().warnings == []
    with pytest.warns(UnstableMeasurementWarning):
        _spread_timer(samples, ci_warn_fraction=0.8).measure()


def test_too_few_samples_note_but_no_warning():
    timer = _spread_timer([1_000_000, 9_000_000, 2_000_000])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnstableMeasurementWarning)
        result = timer.measure()
    assert len(result.warnings) == 1 and "too few" in result.warnings[0]


def test_result_serialises_to_json_with_samples_and_conditions():
    timer = _spread_timer([1_000_000 + 1000 * i for i in range(10)], ci_warn_fraction=1.0)
    result = timer.measure()
    data = json.loads(result.to_json())
    assert data["metric"] == "WallclockTime"
    assert data["primary"] == "median" and data["unit"] == "s"
    assert data["samples"] == pytest.approx([(1_000_000 + 1000 * i) * 1e-9 for i in range(10)],
                                            rel=1e-12)
    assert data["conditions"] == {"device": "cpu"}
    assert data["summary"]["n"] == 10 and data["summary"]["warmup"] == 0
    assert data["summary"]["median"] == pytest.approx(1_004_500e-9, rel=1e-12)
    assert data["warnings"] == []
    # NaN (too few samples for a CI) becomes null, so the JSON stays standard.
    small = json.loads(_spread_timer([1000, 2000]).measure().to_json())
    assert small["summary"]["ci_low"] is None and small["summary"]["ci_relative_width"] is None
    json.loads(_spread_timer([1000, 2000]).measure().to_json(), parse_constant=pytest.fail)


def test_begin_and_end_synchronise_a_gpu():
    device = CountingGPU()
    timer = WallclockTime(reruns=3, warmup=0, device=device)
    assert timer.device is device
    timer.begin()
    assert device.log == ["sync"]
    timer.end()
    assert device.log == ["sync", "sync"]
    assert len(timer._samples_ns) == 1


def test_time_synchronises_around_every_run():
    device = CountingGPU()
    timer = WallclockTime(reruns=3, warmup=1, device=device, ci_warn_fraction=100.0)
    result = timer.time(lambda: device.log.append("fn"))
    assert device.log == ["sync", "fn", "sync"] * 4
    assert result.conditions == {"device": "fakegpu:0"}


def test_cpu_device_does_not_synchronise(monkeypatch):
    timer = WallclockTime(reruns=2, warmup=0, device="cpu")
    assert timer._sync is None
    device = CountingGPU()
    timer.set_device(device)
    timer.begin()
    timer.end()
    assert device.log == ["sync", "sync"]
    timer.set_device(None)
    assert timer._sync is None and str(timer.device) == "cpu"


def test_gpu_string_device_is_usable_without_a_gpu():
    timer = WallclockTime(reruns=6, warmup=0, device="gpu:0", ci_warn_fraction=100.0)
    assert timer.device == GPUDevice(0)
    assert timer._sync is not None
    result = timer.time(lambda: None)  # synchronize is a no-op without CUDA
    assert result.conditions == {"device": "gpu:0"}


@pytest.mark.parametrize("kwargs", [
    {"reruns": 0}, {"reruns": -3}, {"warmup": -1},
    {"confidence": 0.0}, {"confidence": 1.0}, {"confidence": 95},
    {"ci_warn_fraction": -0.1},
])
def test_invalid_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        WallclockTime(**kwargs)


def test_unknown_device_raises():
    with pytest.raises(Deep500Error, match="Unknown device"):
        WallclockTime(device="tpu")


def test_measure_without_enough_runs_raises():
    timer = WallclockTime(reruns=5, warmup=2)
    with pytest.raises(RuntimeError, match="warm-up"):
        timer.measure()
    timer.begin()
    timer.end()
    timer.begin()
    timer.end()
    with pytest.raises(RuntimeError, match="2 runs"):
        timer.measure()
    timer.begin()
    timer.end()
    assert timer.measure().summary["n"] == 1
