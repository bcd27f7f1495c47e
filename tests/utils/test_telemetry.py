"""The telemetry sampler: it sees other processes and its own children, stops cleanly,
summarises with the record's schema; the interference rule on synthetic inputs; and
re-measuring of interfered configurations (measure_watched, deep500 run)."""
import math
import os
import subprocess
import sys
import textwrap
import time

import pytest

from deep500.cli import build_parser
from deep500.recipe import run_recipe
from deep500.recipe.remeasure import measure_watched
from deep500.results.files import read_results
from deep500.utils.telemetry import TICK_S, InterferenceRule, TelemetrySampler

SPIN = "import sys, time\n{before}\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n{after}"

SUMMARY_KEYS = {"interfered", "reason", "other_cpu_cores", "own_cpu_cores", "job_cpu_cores",
                "load_avg_1m", "cpu_freq_mhz", "threads", "context_switches",
                "rss_max_bytes", "samples", "interval_s", "duration_s", "usable_cpus",
                "threshold_cores", "sampler_cpu_s"}


@pytest.fixture
def orphan_spinner():
    """A process spinning on one core that is not a descendant of this one: started
    through a shell that exits at once, so it is re-parented away from us."""
    code = SPIN.format(before="print('go', flush=True)", seconds=5, after="")
    shell = subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "{code}" & echo $!'],
                             stdout=subprocess.PIPE, text=True)
    pid = int(shell.stdout.readline())
    shell.wait()
    assert shell.stdout.readline().strip() == "go"
    yield pid
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def test_sampler_sees_another_busy_process(orphan_spinner):
    """One other core busy for 1 s: at least half a core is counted as other processes'
    (one-sided: more load from elsewhere only adds to it), and the default rule flags a
    1-thread measurement on a 2-core machine."""
    with TelemetrySampler(interval_s=0.02, threads=1) as sampler:
        time.sleep(1.0)
    summary = sampler.summary()
    assert summary["duration_s"] == pytest.approx(1.0, abs=0.2)
    assert summary["other_cpu_cores"] >= 0.5
    assert summary["own_cpu_cores"] < 0.2  # this process slept
    if summary["usable_cpus"] <= 2:
        assert summary["interfered"] is True
        assert "other processes used" in summary["reason"]


def test_children_count_as_own():
    """A child's CPU time in the window counts as this process's own, not as other
    processes' (it is read back from the child's own clock)."""
    code = SPIN.format(before="import time as t; print('go', flush=True); "
                              "sys.stdin.readline(); start = t.process_time()",
                       seconds=0.5, after="print(t.process_time() - start, flush=True)")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "go"
    cpu_before = time.process_time()
    with TelemetrySampler(interval_s=0.02, threads=1) as sampler:
        child.stdin.write("start\n")
        child.stdin.flush()
        child_cpu = float(child.stdout.readline())
        child.wait()
    ours = time.process_time() - cpu_before  # sampler thread included
    summary = sampler.summary()
    own_s = summary["own_cpu_cores"] * summary["duration_s"]
    assert child_cpu > 0.05
    assert child_cpu - 0.03 <= own_s <= child_cpu + ours + 0.03


def test_sampler_thread_stops_and_joins():
    sampler = TelemetrySampler(interval_s=0.01)
    sampler.start()
    thread = sampler._thread
    assert thread.is_alive() and sampler.running
    with pytest.raises(RuntimeError, match="already started"):
        sampler.start()
    time.sleep(0.05)
    first = sampler.stop()
    assert not thread.is_alive() and not sampler.running
    assert sampler.stop() == first  # stopping again changes nothing
    samples = first["samples"]
    time.sleep(0.03)
    assert sampler.summary()["samples"] == samples  # nothing sampled after stop
    with pytest.raises(RuntimeError, match="not started"):
        TelemetrySampler().stop()


def test_sampler_stops_when_the_measured_work_raises():
    with pytest.raises(KeyError):
        with TelemetrySampler(interval_s=0.01) as sampler:
            raise KeyError("measured work failed")
    assert not sampler.running and sampler.summary()["samples"] >= 2


def test_summary_schema_and_series():
    cpu_before = time.process_time()
    with TelemetrySampler(interval_s=0.01, threads=1) as sampler:
        total = 0
        end = time.perf_counter() + 0.2
        while time.perf_counter() < end:
            total += 1
    cpu = time.process_time() - cpu_before  # every thread, the sampler's included
    summary = sampler.summary()
    assert set(summary) == SUMMARY_KEYS
    assert isinstance(summary["interfered"], bool)
    assert summary["reason"] is None or isinstance(summary["reason"], str)
    for key in ("other_cpu_cores", "own_cpu_cores", "job_cpu_cores", "duration_s"):
        assert isinstance(summary[key], float) and summary[key] >= 0
    assert summary["interval_s"] == 0.01 and summary["samples"] >= 5
    assert summary["threads"] >= 1 and summary["rss_max_bytes"] > 10 * 2**20
    assert set(summary["context_switches"]) == {"voluntary", "involuntary"}
    assert summary["cpu_freq_mhz"] is None or \
        summary["cpu_freq_mhz"]["min"] <= summary["cpu_freq_mhz"]["max"]
    # The process's CPU time in the window, less the sampler thread's (counted apart),
    # agrees with Python's own clock of it (not with 1 core: the machine may be busy).
    own_s = summary["own_cpu_cores"] * summary["duration_s"]
    assert own_s + summary["sampler_cpu_s"] == pytest.approx(cpu, abs=0.02)
    assert own_s > 0.02 and summary["sampler_cpu_s"] < 0.1 * summary["duration_s"]
    assert summary["threshold_cores"] == InterferenceRule().threshold_cores(
        summary["usable_cpus"], 1)

    series = sampler.series(max_points=4)
    assert len(series["t"]) == 3 and series["t"][-1] == pytest.approx(
        summary["duration_s"], abs=1e-3)
    # Decimated rates are exact averages: the own CPU seconds add up to the summary's
    # (plus the sampler's, which the summary takes out).
    edges = [0.0] + series["t"]
    own_s = sum(rate * (b - a) for rate, a, b in zip(series["own_cpu_cores"], edges, edges[1:]))
    assert own_s == pytest.approx(summary["own_cpu_cores"] * summary["duration_s"]
                                  + summary["sampler_cpu_s"], abs=0.01)
    full = sampler.series()
    assert len(full["t"]) == summary["samples"] - 1
    assert full["started_unix"] == pytest.approx(time.time(), abs=5)


def test_sampler_arguments_are_checked():
    with pytest.raises(ValueError, match="interval_s"):
        TelemetrySampler(interval_s=0)
    with pytest.raises(ValueError, match="threads"):
        TelemetrySampler(threads=0)
    with pytest.raises(ValueError, match="freq_drop"):
        InterferenceRule(freq_drop=1.5)
    with pytest.raises(ValueError, match="core_fraction"):
        InterferenceRule(core_fraction=-1)


# -- the rule, on synthetic inputs -----------------------------------------------------

@pytest.mark.parametrize("usable, threads, ranks, expected", [
    (2, 1, 1, 0.5),      # one spare core: half of it
    (2, None, 1, 0.25),  # unknown threads: may use every core, the floor
    (2, 2, 1, 0.25),     # no spare core: the floor
    (64, 1, 1, 31.5),
    (8, 2, 4, 0.25),     # four ranks of two threads fill the node
    (16, 2, 4, 4.0),
])
def test_threshold_follows_the_spare_cores(usable, threads, ranks, expected):
    assert InterferenceRule().threshold_cores(usable, threads, ranks) == expected


def test_rule_flags_busy_windows_and_passes_quiet_ones():
    rule = InterferenceRule()
    flagged, reason = rule.judge(1.0, 1.0, usable_cpus=2, threads=1)
    assert flagged and "1.00 CPU cores" in reason and "0.50 allowed" in reason
    assert rule.judge(0.3, 1.0, usable_cpus=2, threads=1) == (False, None)
    assert rule.judge(0.0, 10.0, usable_cpus=64, threads=None) == (False, None)
    # above the floor (0.25) by more than the margin (√(64 · 0.01 / 10) = 0.25)
    assert rule.judge(0.6, 10.0, usable_cpus=64, threads=None)[0]
    assert not rule.judge(0.45, 10.0, usable_cpus=64, threads=None)[0]
    # Short windows: tick-counted CPU time is too coarse to flag 0.8 cores in 50 ms.
    margin = InterferenceRule.margin_cores(2, 0.05)
    assert margin == pytest.approx(math.sqrt(2 * TICK_S / 0.05))
    assert not rule.judge(0.8, 0.05, usable_cpus=2, threads=1)[0]
    assert rule.judge(0.8, 5.0, usable_cpus=2, threads=1)[0]
    # Thresholds are arguments.
    strict = InterferenceRule(core_fraction=0.0, min_cores=0.1)
    assert strict.judge(0.3, 10.0, usable_cpus=2, threads=1)[0]


def test_rule_flags_a_frequency_drop():
    rule = InterferenceRule()
    flagged, reason = rule.judge(0.0, 1.0, 2, 1, cpu_freq_mhz={"min": 2000, "max": 3000})
    assert flagged and "frequency fell 33%" in reason
    assert rule.judge(0.0, 1.0, 2, 1, cpu_freq_mhz={"min": 2800, "max": 3000}) == (False, None)
    assert rule.judge(0.0, 1.0, 2, 1, cpu_freq_mhz=None) == (False, None)
    off = InterferenceRule(freq_drop=None)
    assert off.judge(0.0, 1.0, 2, 1, cpu_freq_mhz={"min": 1000, "max": 3000}) == (False, None)
    both = rule.judge(1.5, 1.0, 2, 1, cpu_freq_mhz={"min": 1000, "max": 3000})[1]
    assert "other processes" in both and "frequency" in both


# -- re-measuring -----------------------------------------------------------------------

class FlagFirst(InterferenceRule):
    """Judges the first ``flagged`` windows interfered, the rest clean (a synthetic
    rule, so no test depends on the machine's load)."""

    def __init__(self, flagged: int):
        super().__init__()
        object.__setattr__(self, "flagged", flagged)
        object.__setattr__(self, "calls", 0)

    def judge(self, *args, **kwargs):
        object.__setattr__(self, "calls", self.calls + 1)
        if self.calls <= self.flagged:
            return True, f"synthetic interference {self.calls}"
        return False, None


def test_measure_watched_remeasures_until_clean():
    calls = []
    result, fields = measure_watched(lambda: calls.append(len(calls)) or len(calls), 1,
                                     remeasure=3, rule=FlagFirst(2), interval_s=0.01)
    assert len(calls) == 3 and result == 3  # the third, clean attempt is kept
    assert fields["remeasured"] == 2 and fields["telemetry"]["interfered"] is False
    assert [a["reason"] for a in fields["telemetry_attempts"]] == [
        "synthetic interference 1", "synthetic interference 2"]
    assert set(fields["telemetry"]) == SUMMARY_KEYS
    assert "t" in fields["telemetry_series"]


def test_measure_watched_keeps_the_least_interfered_when_none_is_clean(monkeypatch):
    others = iter([0.9, 0.2, 0.6])
    original = TelemetrySampler.summary

    def summary(self):
        value = original(self)
        if not hasattr(self, "_fixed_other"):
            self._fixed_other = next(others)
        value["other_cpu_cores"] = self._fixed_other
        return value
    monkeypatch.setattr(TelemetrySampler, "summary", summary)
    calls = []
    result, fields = measure_watched(lambda: calls.append(None) or len(calls), None,
                                     remeasure=2, rule=FlagFirst(10), interval_s=0.01)
    assert len(calls) == 3 and result == 2
    assert fields["remeasured"] == 2 and fields["telemetry"]["other_cpu_cores"] == 0.2
    assert [a["other_cpu_cores"] for a in fields["telemetry_attempts"]] == [0.9, 0.6]


def test_measure_watched_without_remeasuring_measures_once():
    calls = []
    _, fields = measure_watched(lambda: calls.append(None), 1, remeasure=0,
                                rule=FlagFirst(10), interval_s=0.01)
    assert len(calls) == 1 and fields["remeasured"] == 0
    assert fields["telemetry"]["interfered"] is True and "telemetry_attempts" not in fields


class FakeComm:
    """Another rank's votes (failed, interfered, other cores), one per attempt."""

    def __init__(self, other_votes):
        self.other_votes = list(other_votes)

    def allgather(self, vote):
        return [vote, self.other_votes.pop(0)]


def test_ranks_remeasure_together():
    calls = []
    # This rank is clean; the other rank was interfered on its first attempt only.
    _, fields = measure_watched(lambda: calls.append(None), 1, remeasure=2,
                                rule=FlagFirst(0), interval_s=0.01,
                                comm=FakeComm([(False, True, 2.0), (False, False, 0.0)]))
    assert len(calls) == 2 and fields["remeasured"] == 1


def test_an_error_stops_remeasuring_on_every_rank():
    calls = []
    # Another rank failed on the first attempt: this one does not measure again.
    measure_watched(lambda: calls.append(None), 1, remeasure=2, rule=FlagFirst(5),
                    interval_s=0.01, comm=FakeComm([(True, True, 0.0)]))
    assert len(calls) == 1
    comm = FakeComm([(False, True, 0.0)])
    with pytest.raises(ZeroDivisionError):
        measure_watched(lambda: 1 / 0, 1, remeasure=2, rule=FlagFirst(5),
                        interval_s=0.01, comm=comm)
    assert comm.other_votes == []  # it voted before raising, so no rank waits


RECIPE = textwrap.dedent("""
    name: watched
    fixed: {dtype: float32, threads: 1, seed: 1}
    mutable:
      framework: [reference]
      operator:
        - {op: Relu, shape: [16, 16]}
        - {op: Softmax, shape: [4, 10], axis: 1}
    metrics:
      WallclockTime: {reruns: 6, warmup: 1, target_ci: 0.02, max_time: 0.5}
""")


def test_run_records_telemetry_and_remeasures_flagged_configurations(tmp_path):
    path = tmp_path / "watched.yaml"
    path.write_text(RECIPE)
    out = tmp_path / "run"
    # Only the first window of the run is flagged: the first configuration is measured
    # twice, the second once.
    summary = run_recipe(str(path), str(out), progress=False, write_report=False,
                         remeasure_interfered=2, interference_rule=FlagFirst(1))
    assert summary.errors == 0
    first = read_results(str(out))
    assert [r["remeasured"] for r in first] == [1, 0]
    assert first[0]["telemetry"]["interfered"] is False
    assert first[0]["telemetry_attempts"][0]["reason"] == "synthetic interference 1"
    assert "telemetry_attempts" not in first[1]
    for record in first:
        assert set(record["telemetry"]) == SUMMARY_KEYS
        # threads: 1 in the recipe is what the rule expects the measurement to use
        assert record["telemetry"]["threshold_cores"] == InterferenceRule().threshold_cores(
            record["telemetry"]["usable_cpus"], 1)
        wallclock = {m["metric"]: m for m in record["result"]["metrics"]}["WallclockTime"]
        assert wallclock["summary"]["target_ci"] == 0.02
        assert wallclock["summary"]["n"] >= 6

    plain = tmp_path / "plain"
    run_recipe(str(path), str(plain), progress=False, write_report=False,
               interference_rule=FlagFirst(5))
    records = read_results(str(plain))
    assert [r["remeasured"] for r in records] == [0, 0]
    assert all(r["telemetry"]["interfered"] for r in records)


def test_cli_remeasure_interfered_option():
    parser = build_parser()
    assert parser.parse_args(["run", "r.yaml"]).remeasure_interfered == 0
    assert parser.parse_args(["run", "r.yaml", "--remeasure-interfered"]).remeasure_interfered == 2
    assert parser.parse_args(["run", "--remeasure-interfered=5", "r.yaml"]).remeasure_interfered == 5
    assert parser.parse_args(["run", "r.yaml", "--remeasure-interfered", "1"]).remeasure_interfered == 1
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "r.yaml", "--remeasure-interfered=-1"])


def test_a_collective_measurement_raises_without_voting():
    """In a collective measurement the other ranks may wait inside it for this one, so
    an unexpected error is raised at once (the runner ends the job), while a
    Deep500Error, raised by every rank alike, is voted on first."""
    from deep500.utils.errors import Deep500Error
    comm = FakeComm([(False, True, 0.0)])
    with pytest.raises(ZeroDivisionError):
        measure_watched(lambda: 1 / 0, 1, remeasure=2, rule=FlagFirst(5),
                        interval_s=0.01, comm=comm, collective=True)
    assert len(comm.other_votes) == 1  # no vote taken

    def agreed():
        raise Deep500Error("every rank says so")
    with pytest.raises(Deep500Error):
        measure_watched(agreed, 1, remeasure=2, rule=FlagFirst(5), interval_s=0.01,
                        comm=comm, collective=True)
    assert comm.other_votes == []


def test_other_ranks_of_the_job_are_not_other_processes():
    """Under mpirun -np 2 each rank counts the other rank's CPU time as the job's
    (job_cpu_cores), not as other processes': it matches what that rank measured as its
    own (sampler thread included), within the 10 ms ticks other processes are read in."""
    import json
    from tests.lv3_distributed.mpi_helpers import run_program
    from deep500.lv3_distributed import mpirun_executable
    script = os.path.join(os.path.dirname(__file__), "scripts", "telemetry_ranks.py")
    status, output, _ = run_program([mpirun_executable(), "-np", "2", sys.executable,
                                     script], timeout=120)
    assert status == 0, output[-3000:]
    line = next(l for l in output.splitlines() if l.startswith("SUMMARIES "))
    ranks = json.loads(line[len("SUMMARIES "):])
    for me, other in ((ranks[0], ranks[1]), (ranks[1], ranks[0])):
        other_own_s = other["own_cpu_cores"] * other["duration_s"] + other["sampler_cpu_s"]
        assert other_own_s > 0.1
        assert me["job_cpu_cores"] * me["duration_s"] == pytest.approx(other_own_s, abs=0.06)
        # Two ranks of one thread fill the two cores: no spare core, the rule's floor.
        if me["usable_cpus"] == 2:
            assert me["threshold_cores"] == InterferenceRule().min_cores


@pytest.mark.parametrize("interval_s, window_s", [(0.01, 0.15), (0.3, 0.01)])
def test_threads_exclude_the_samplers_own(interval_s, window_s):
    """One extra thread during the window is counted; the sampler's thread is not,
    whether or not a sample fell between the window's ends."""
    import threading
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("needs /proc/self/task to count threads independently")
    release = threading.Event()
    # Threads of earlier tests (samplers, MPI helpers) may still be exiting: let them.
    deadline = time.monotonic() + 2.0
    while threading.active_count() > 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    baseline = len(os.listdir("/proc/self/task"))
    worker = threading.Thread(target=release.wait)
    worker.start()
    try:
        with TelemetrySampler(interval_s=interval_s) as sampler:
            time.sleep(window_s)
    finally:
        release.set()
        worker.join()
    summary = sampler.summary()
    assert summary["samples"] >= (10 if interval_s < 0.1 else 2)
    assert summary["threads"] == baseline + 1
    assert max(sampler.series()["threads"]) == baseline + 1
