"""Telemetry probes (``deep500.utils.telemetry.register_probe``): counters of other
parts of Deep500 read by the sampler every tick, and the per-interval context
switches of the series."""
import time

import pytest

from deep500.utils import telemetry
from deep500.utils.errors import Deep500Error
from deep500.utils.telemetry import TelemetrySampler


@pytest.fixture(autouse=True)
def no_probes_left():
    yield
    for name in list(telemetry.registered_probes()):
        if name.startswith("test"):
            telemetry.unregister_probe(name)


def _busy(seconds, step=None):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if step is not None:
            step()


def test_a_counter_probe_is_read_every_tick_as_a_rate_and_summed_over_the_window():
    counter = {"bytes": 0}

    def grow():
        counter["bytes"] += 1000
        time.sleep(0.001)

    telemetry.register_probe("test", lambda: dict(counter))
    sampler = TelemetrySampler(interval_s=0.01).start()
    _busy(0.3, grow)
    summary = sampler.stop()
    series = sampler.series()
    total = counter["bytes"]
    # The first sample is taken at start(), the last at stop(): the whole window.
    assert summary["probes"]["test.bytes"] == pytest.approx(total, abs=1000)
    assert summary["probe_errors"] == 0
    rates = series["probes"]["test.bytes"]
    assert len(rates) == len(series["t"]) and all(r is not None and r >= 0 for r in rates)
    # The rates integrate back to the total (each is an exact average over its interval).
    times = [0.0] + series["t"]
    integral = sum(r * (b - a) for r, a, b in zip(rates, times, times[1:]))
    assert integral == pytest.approx(summary["probes"]["test.bytes"], rel=0.02)


def test_a_level_probe_is_shown_as_read_and_its_summary_is_the_highest():
    level = {"queue": 3.0}
    telemetry.register_probe("testlevel", lambda: dict(level), cumulative=False)
    sampler = TelemetrySampler(interval_s=0.01).start()
    _busy(0.05)
    level["queue"] = 7.0
    _busy(0.05)
    summary = sampler.stop()
    values = sampler.series()["probes"]["testlevel.queue"]
    assert set(values) == {3.0, 7.0} and values[-1] == 7.0
    assert summary["probes"]["testlevel.queue"] == 7.0


def test_a_probe_registered_mid_window_starts_with_gaps_and_a_failing_one_counts_errors():
    sampler = TelemetrySampler(interval_s=0.01).start()
    _busy(0.05)
    telemetry.register_probe("testlate", lambda: {"n": 1})
    state = {"calls": 0}

    def flaky():
        state["calls"] += 1
        if state["calls"] % 2:
            raise RuntimeError("dictionary changed size during iteration")
        return {"n": state["calls"]}
    telemetry.register_probe("testflaky", flaky)
    _busy(0.1)
    summary = sampler.stop()
    late = sampler.series()["probes"]["testlate.n"]
    assert late[0] is None and late[-1] == 0.0  # a constant counter: rate 0
    assert summary["probe_errors"] >= 1
    assert any(v is None for v in sampler.series()["probes"]["testflaky.n"])


def test_a_sampler_without_probes_has_no_probe_fields():
    sampler = TelemetrySampler(interval_s=0.01).start()
    _busy(0.03)
    summary = sampler.stop()
    assert "probes" not in summary and "probes" not in sampler.series()


def test_context_switches_per_second_are_in_the_series():
    sampler = TelemetrySampler(interval_s=0.01).start()
    _busy(0.1, lambda: time.sleep(0.001))  # each sleep is a voluntary switch
    sampler.stop()
    series = sampler.series()
    voluntary = series["voluntary_per_s"]
    assert len(voluntary) == len(series["t"])
    assert all(v >= 0 for v in voluntary + series["involuntary_per_s"])
    assert sum(voluntary) / len(voluntary) > 100  # ~1000 sleeps a second, at least 1/10


def test_registration_is_checked_and_unregistering_names_the_probe():
    with pytest.raises(Deep500Error, match="name"):
        telemetry.register_probe("a.b", dict)
    with pytest.raises(Deep500Error, match="callable"):
        telemetry.register_probe("test", 3)

    def mine():
        return {}
    telemetry.register_probe("test", mine)
    assert not telemetry.unregister_probe("test", lambda: {})  # another's: kept
    assert telemetry.registered_probes()["test"] is mine
    assert telemetry.unregister_probe("test", mine)
    assert "test" not in telemetry.registered_probes()
    assert not telemetry.unregister_probe("test")
