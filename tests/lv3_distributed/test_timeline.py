"""Per-rank phase events (``deep500.lv3_distributed.timeline``) and the ``Timeline``
metric: which steps are recorded, the Chrome-trace document, and under ``mpirun -np 2``
a file with both ranks' compute, allreduce (blocking, or each bucket's when
overlapped) and update events on one clock; the communication probe of the telemetry
sampler during the same training; and ``deep500 run --np 2`` writing
``timeline/<tag>.json``."""
import json
import sys
import textwrap
from collections import Counter

import pytest

from deep500.lv3_distributed.timeline import (COMMUNICATION, COMPUTE, FIRST_BUCKET,
                                              TimelineRecorder, chrome_trace)
from deep500.lv3_distributed.timeline_metric import Timeline, timeline_paths
from deep500.recipe import components
from deep500.utils.errors import Deep500Error
from tests.lv3_distributed.mpi_helpers import mpirun, run_program


def test_the_first_steps_of_each_epoch_and_every_kth_are_recorded():
    recorder = TimelineRecorder(capacity=1000, first_steps=2, every=5)
    recorded = []
    for epoch in range(2):
        for step in range(12):
            recorder.begin_step()
            recorder.add("forward+backward", COMPUTE, 1.0, 2.0)
            if recorder.on:
                recorded.append((epoch, step))
        recorder.new_epoch()
    assert recorded == [(e, s) for e in range(2) for s in (0, 1, 5, 10)]
    assert recorder.count == len(recorded) == recorder.steps_recorded
    assert [step & 0xFFFFFFFF for step in recorder.steps[:recorder.count]] == \
        [s for _, s in recorded]


def test_events_beyond_capacity_are_dropped_and_counted():
    recorder = TimelineRecorder(capacity=3, first_steps=10, every=0)
    recorder.begin_step()
    for i in range(5):
        recorder.add("update", COMPUTE, i, i + 0.5)
    assert recorder.count == 3 and recorder.dropped == 2
    recorder.new_epoch()
    recorder.add("update", COMPUTE, 0, 1)  # between steps: nothing recorded
    assert recorder.dropped == 2


def test_the_trace_is_in_chrome_trace_event_format():
    recorder = TimelineRecorder(capacity=10, first_steps=1, every=0)
    recorder.origin = 100.0
    recorder.begin_step()
    recorder.add("forward+backward", COMPUTE, 100.001, 100.003)
    recorder.add("allreduce bucket 1", FIRST_BUCKET + 1, 100.002, 100.0025)
    recorder.add("allreduce", COMMUNICATION, 100.003, 100.004)
    document = json.loads(json.dumps(chrome_trace([recorder.payload(3)])))
    complete = [e for e in document["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["pid"], e["tid"]) for e in complete] == [
        ("forward+backward", 3, COMPUTE), ("allreduce bucket 1", 3, FIRST_BUCKET + 1),
        ("allreduce", 3, COMMUNICATION)]
    assert complete[0]["ts"] == pytest.approx(1000.0) and \
        complete[0]["dur"] == pytest.approx(2000.0)
    assert complete[1]["cat"] == "bucket 1" and complete[1]["args"] == {"epoch": 0,
                                                                        "step": 0}
    names = {(e["name"], e["tid"]): e["args"] for e in document["traceEvents"]
             if e["ph"] == "M"}
    assert names[("process_name", 0)] == {"name": "rank 3"}
    assert names[("thread_name", COMMUNICATION)] == {"name": "communication"}
    assert names[("thread_name", FIRST_BUCKET + 1)] == {"name": "bucket 1"}


@pytest.mark.parametrize("options, message", [
    ({"every": -1}, "every=-1"), ({"first_steps": 1.5}, "first_steps=1.5"),
    ({"capacity": 0}, "capacity=0")])
def test_bad_options_say_what_to_give(options, message):
    with pytest.raises(Deep500Error, match=message):
        Timeline(**options)


@pytest.mark.parametrize("path, rank, ranks, expected", [
    ("t/0003-reference-rank0.json", 0, 2,
     ("t/0003-reference.json", ["t/0003-reference-rank0.json",
                                "t/0003-reference-rank1.json"])),
    ("t/0003-reference.json", 0, 1, ("t/0003-reference.json",
                                     ["t/0003-reference-rank0.json"])),
    ("trace", 0, 2, ("trace.json", ["trace-rank0.json", "trace-rank1.json"]))])
def test_each_rank_has_its_file_and_the_ranks_together_one(path, rank, ranks, expected):
    assert timeline_paths(path, rank, ranks) == expected


def test_a_recipe_names_the_metric_and_its_file_goes_to_the_timeline_folder(tmp_path):
    build = components.metric_factory("Timeline", {"every": 4}, "metrics.Timeline")
    metric = build(str(tmp_path), "3-abc")
    assert isinstance(metric, Timeline) and metric.every == 4
    assert metric.path == str(tmp_path / "timeline" / "3-abc.json")
    with pytest.raises(Deep500Error, match="every"):
        components.metric_factory("Timeline", {"every": "x"}, "metrics.Timeline")


def _train(tmp_path, options, epochs=2, first=3, every=10):
    status, output, _ = mpirun(2, "timeline_train.py", tmp_path, "--options",
                               json.dumps(options), "--epochs", epochs, "--first-steps",
                               first, "--every", every, timeout=180)
    assert status == 0, output[-3000:]
    trace = json.loads((tmp_path / "timeline.json").read_text())
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    return trace, ranks


def _recorded_steps(steps_per_epoch, first, every):
    return sum(sum(1 for s in range(n) if s < first or s % every == 0)
               for n in steps_per_epoch)


@pytest.mark.mpi
@pytest.mark.parametrize("overlap", [False, True])
def test_both_ranks_phase_events_are_in_one_chrome_trace(tmp_path, overlap):
    options = {"algorithm": "mpi"}
    if overlap:
        options.update(overlap=True, bucket_bytes=512, compute_only_every=0)
    trace, ranks = _train(tmp_path, options)
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in complete} == {0, 1}
    for event in complete:
        assert event["dur"] >= 0 and event["ts"] >= 0 and event["ph"] == "X"
    recorded = _recorded_steps(ranks[0]["steps"], 3, 10)
    assert ranks[0]["timeline"]["steps_recorded"] == recorded
    counts = Counter((e["pid"], e["name"]) for e in complete)
    for rank in (0, 1):
        assert counts[(rank, "forward+backward")] == recorded
        assert counts[(rank, "update")] == recorded
        if overlap:
            buckets = [n for (r, n) in counts if r == rank and n.startswith("allreduce b")]
            assert len(buckets) >= 2, counts  # 512-byte buckets: several per step
            assert all(counts[(rank, n)] == recorded for n in buckets)
            assert counts[(rank, "wait for buckets")] == recorded
            assert counts[(rank, "allreduce")] == 0
        else:
            assert counts[(rank, "allreduce")] == recorded
    # Within a step, on each rank: the allreduce after forward+backward, update last.
    by_step = {}
    for e in complete:
        by_step.setdefault((e["pid"], e["args"]["epoch"], e["args"]["step"]), {})[
            e["name"]] = e
    for events in by_step.values():
        compute, update = events["forward+backward"], events["update"]
        last_comm = max(e["ts"] + e["dur"] for n, e in events.items()
                        if n.startswith("allreduce") or n == "wait for buckets")
        assert compute["ts"] <= last_comm <= update["ts"] + 1.0
        if overlap:  # the first bucket starts during backprop
            first = events["allreduce bucket 0"]
            assert compute["ts"] < first["ts"] < compute["ts"] + compute["dur"]
    # One clock: no rank can complete a step's (last) allreduce before every rank has
    # started it; the ranks' clocks agree to well within a millisecond (the barriers).
    name = "allreduce bucket 0" if overlap else "allreduce"
    skew_us = 1000.0
    for epoch, step in {(k[1], k[2]) for k in by_step}:
        first, second = (by_step[(r, epoch, step)][name] for r in (0, 1))
        assert first["ts"] + first["dur"] >= second["ts"] - skew_us, (epoch, step)
        assert second["ts"] + second["dur"] >= first["ts"] - skew_us, (epoch, step)
    assert trace["otherData"]["ranks"] == 2
    assert ranks[0]["timeline"]["events"] == len(complete)
    # and one file per rank, holding that rank's events only
    for rank in (0, 1):
        own = json.loads((tmp_path / f"timeline-rank{rank}.json").read_text())
        own_complete = [e for e in own["traceEvents"] if e["ph"] == "X"]
        assert own_complete == [e for e in complete if e["pid"] == rank]
    assert ranks[0]["timeline"]["rank_paths"] == [
        str(tmp_path / f"timeline-rank{r}.json") for r in (0, 1)]


@pytest.mark.mpi
def test_the_sampler_sees_each_ranks_bytes_on_the_wire_while_it_trains(tmp_path):
    # An epoch of this MLP on the digits is ~45 steps, 10-15 ms: about one 10 ms tick.
    # Six epochs make the ticks lost at either end (the probe is read from the first
    # tick after the scheme exists to the last before training ends) a small part; a
    # CI run with one epoch saw 27% of the bytes (0.66-1.0 here on a quiet machine; six
    # epochs 0.91-1.0).
    _, ranks = _train(tmp_path, {"algorithm": "mpi"}, epochs=6)
    for rank in ranks:
        probes = rank["telemetry"]["probes"]
        # Read from the scheme's first tick to the end of training: at most all of it,
        # and most of it.
        assert 0.5 * rank["bytes_sent"] <= probes["communication.bytes_sent"] \
            <= rank["bytes_sent"]
        rates = [r for r in rank["series"]["probes"]["communication.bytes_sent"] if r]
        assert rates and max(rates) > 0
        assert rank["probes_after_training"] == []  # ended with the training
        series = rank["series"]
        assert len(series["voluntary_per_s"]) == len(series["t"]) == len(series["rss_bytes"])


RECIPE = textwrap.dedent("""
    name: timeline
    experiment: distributed
    fixed:
      dataset: {name: digits, normalize: standardize}
      network: {model: mlp, hidden: [16]}
      optimizer: {type: sgd, learning_rate: 0.1}
      batch_size: 8         # ~90 steps per epoch per rank: training lasts several
      epochs: 4             # of the sampler's 50 ms ticks, so the probe is read
      threads: 1
      seed: 0
    mutable:
      scheme: [ConsistentDecentralized]
    metrics: {TestAccuracy: {}, Timeline: {first_steps: 2, every: 5}}
""")


@pytest.mark.mpi
def test_deep500_run_writes_the_timeline_of_both_ranks(tmp_path):
    from deep500.recipe.experiments.distributed import DistributedExperiment
    if "Timeline" not in DistributedExperiment.metric_names:
        pytest.skip("the distributed experiment does not list Timeline in its "
                    "metric_names yet")
    recipe = tmp_path / "timeline.yaml"
    recipe.write_text(RECIPE)
    out = tmp_path / "run"
    status, output, _ = run_program([sys.executable, "-m", "deep500", "run", "--np", "2",
                                     str(recipe), "--out", str(out), "--quiet"], 300)
    assert status == 0, output[-3000:]
    files = sorted((out / "timeline").glob("*.json"), key=lambda f: (len(f.name), f.name))
    assert [f.name for f in files] == ["0000-reference.json", "0000-reference-rank0.json",
                                       "0000-reference-rank1.json"], files
    trace = json.loads(files[0].read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in complete} == {0, 1}
    assert {e["name"] for e in complete} >= {"forward+backward", "allreduce", "update"}
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()
               if line.strip()]
    measured = [r for r in records if r["kind"] == "measurement"]
    assert sorted(r["rank"] for r in measured) == [0, 1]
    for record in measured:
        series = record["telemetry_series"]
        assert "communication.bytes_sent" in series["probes"]
    (rank0,) = [r for r in measured if r["rank"] == 0]
    (summary,) = [m["summary"] for m in rank0["result"]["metrics"]
                  if m["metric"] == "Timeline"]
    assert summary["path"] == str(files[0]) and summary["ranks"] == 2
    assert summary["rank_paths"] == [str(f) for f in files[1:]]
    report = (out / "report.html").read_text()
    for file in files:  # every timeline linked from the report
        assert f"href='timeline/{file.name}'" in report
    assert summary["events"] == len(complete) and summary["dropped"] == 0
