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


# -- adaptive reruns (target_ci, max_time) on a synthetic clock -------------------------

class FakeClock:
    """perf_counter_ns stand-in: time moves only when the measured call says so."""

    def __init__(self, durations_ns):
        self.now = 0
        self.durations = iter(durations_ns)
        self.calls = 0

    def __call__(self):
        return self.now

    def run(self):
        self.calls += 1
        self.now += next(self.durations)


@pytest.fixture
def fake_clock(monkeypatch):
    import numpy as np
    import deep500.utils.wallclock as wallclock

    def install(durations_ns):
        clock = FakeClock(int(d) for d in durations_ns)
        monkeypatch.setattr(wallclock, "perf_counter_ns", clock)
        return clock
    install.rng = np.random.default_rng(7)
    return install


def _half_width(samples_s):
    from deep500.utils.statistics import summarize
    return summarize(samples_s)["ci_relative_width"] / 2


def test_adaptive_reruns_stop_at_the_target(fake_clock):
    durations = 1e6 * (1 + 0.2 * fake_clock.rng.uniform(-1, 1, 100_000))  # 1 ms ± 20%
    clock = fake_clock(durations)
    timer = WallclockTime(reruns=10, warmup=2, target_ci=0.02, max_time=1000)
    result = timer.time(clock.run)
    summary = result.summary
    n = summary["n"]
    assert summary["target_reached"] is True and summary["stopped_by"] == "target"
    assert summary["target_ci"] == 0.02 and summary["extra_runs"] == n - 10
    assert summary["ci_relative_width"] / 2 <= 0.02
    assert clock.calls == n + 2 and result.samples == pytest.approx(
        [d * 1e-9 for d in durations[2:n + 2].astype(int)])
    # Blocks at most double the runs so far: the stop comes before twice the size from
    # which on every prefix meets the target.
    measured = [d * 1e-9 for d in durations[2:2 * n + 2].astype(int)]
    stable = max(m for m in range(10, n + 1) if _half_width(measured[:m - 1]) > 0.02)
    assert stable <= n <= 2 * stable
    assert _half_width(measured[:10]) > 0.02  # adaptivity was needed


def test_adaptive_reruns_stop_at_the_budget(fake_clock):
    # 0.1 ms .. 10 ms log-uniform: a 0.1% target is out of reach.
    durations = 10 ** fake_clock.rng.uniform(5, 7, 100_000)
    clock = fake_clock(durations)
    timer = WallclockTime(reruns=6, warmup=1, target_ci=0.001, max_time=0.05,
                          ci_warn_fraction=100)
    summary = timer.time(clock.run).summary
    assert summary["target_reached"] is False and summary["stopped_by"] == "max_time"
    spent = clock.now * 1e-9
    assert 0.05 <= spent <= 0.05 + 3 * durations.max() * 1e-9
    assert summary["n"] > 6


def test_adaptive_reruns_stop_at_max_reruns(fake_clock):
    clock = fake_clock(10 ** fake_clock.rng.uniform(5, 7, 100_000))
    timer = WallclockTime(reruns=6, warmup=0, target_ci=0.001, max_time=1e6,
                          max_reruns=50, ci_warn_fraction=100)
    summary = timer.time(clock.run).summary
    assert summary["n"] == 50 and summary["stopped_by"] == "max_reruns"


def test_adaptive_reruns_through_the_begin_end_protocol(fake_clock):
    """test_op_forward and run_measured keep running while the timer asks for more,
    and other metrics in the group see every run."""
    clock = fake_clock(1e6 * (1 + 0.2 * fake_clock.rng.uniform(-1, 1, 100_000)))

    class Advancing(d5.CustomOp):
        framework = "test"
        op_type = "Advance"

        def native_call(self, inputs):
            return clock.run, lambda result: ()

    timer = WallclockTime(reruns=10, warmup=2, target_ci=0.02, max_time=1000)
    result = d5.test_op_forward(Advancing(), [], metrics=[timer])["WallclockTime"]
    assert result.summary["target_reached"] is True
    assert clock.calls == result.summary["n"] + 2 > 12

    clock.calls = 0
    log = []
    other = RecordingMetric(log, reruns=1)
    timer = WallclockTime(reruns=10, warmup=2, target_ci=0.02, max_time=1000)
    run_measured(clock.run, [other, timer])
    assert len(timer._samples_ns) == clock.calls > 12
    assert log.count("outer-begin") == log.count("outer-end") == clock.calls


def test_fixed_reruns_are_not_adaptive():
    timer = WallclockTime(reruns=5, warmup=1)
    assert timer.adaptive is False and timer.more_runs() == 0
    calls = []
    summary = timer.time(lambda: calls.append(None)).summary
    assert len(calls) == 6 and "target_ci" not in summary


def test_adaptive_defaults():
    budget_only = WallclockTime(max_time=2, ci_warn_fraction=0.1)
    assert budget_only.adaptive and budget_only.target_ci == 0.05
    target_only = WallclockTime(target_ci=0.01)
    assert target_only.max_time == WallclockTime.default_max_time == 10.0


@pytest.mark.parametrize("kwargs", [{"target_ci": 0}, {"target_ci": 1.5},
                                    {"max_time": 0}, {"reruns": 10, "max_reruns": 5}])
def test_invalid_adaptive_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        WallclockTime(**kwargs)


def test_recipes_accept_adaptive_parameters():
    from deep500.recipe.components import metric_factory
    from deep500.utils.errors import RecipeError
    build = metric_factory("WallclockTime", {"reruns": 20, "target_ci": 0.02,
                                             "max_time": 5}, "metrics")
    timer = build("/tmp", "tag")
    assert (timer.target_ci, timer.max_time, timer.measured_reruns) == (0.02, 5, 20)
    with pytest.raises(RecipeError, match="target_ci"):
        metric_factory("WallclockTime", {"target_ci": 2}, "metrics")
