"""The report draws ``TrainingAccuracy(every=k)``'s samples beside the per-epoch
curves: level 2 (tests/lv2_training/test_training_accuracy_every.py runs a recipe) and
level 3, rank 0's samples of each scheme, the mean over its seeds."""
import json

import pytest


def stub_figures(monkeypatch) -> list:
    """Record what the report's figures would draw, without drawing (fast)."""
    from deep500.report import level2_plots, level3, level3_plots
    drawn = []

    def panels(path, title, panels, **_):
        drawn.append((path, title, panels))
        return path
    for module in (level2_plots, level3_plots):
        monkeypatch.setattr(module, "line_panels", panels)
        monkeypatch.setattr(module, "grouped_bars", lambda path, *a, **k: path)
        monkeypatch.setattr(module, "stacked_bars", lambda path, *a, **k: path)
        monkeypatch.setattr(module, "time_to_target_plot", lambda path, *a, **k: ("", path))
    monkeypatch.setattr(level3, "telemetry_plots", lambda *a, **k: [])
    return drawn


def test_the_distributed_report_draws_rank_0s_samples(distributed_run, monkeypatch):
    """Rank 0's samples at level 3, the mean over the seeds of a scheme."""
    from deep500.report import level3
    from deep500.report.reading import report_records
    lines = []
    for line in (distributed_run / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        for entry in (record.get("result") or {}).get("metrics", []):
            if entry["metric"] == "TrainingAccuracy":
                seed = record["configuration"]["seed"]
                entry["summary"]["every"] = 5
                entry["samples"] = [{"step": 5 * j, "epoch": 0, "accuracy": 0.1 * j + seed,
                                     "steps": 5} for j in (1, 2, 3)]
        lines.append(json.dumps(record))
    (distributed_run / "results.jsonl").write_text("\n".join(lines) + "\n")
    drawn = stub_figures(monkeypatch)
    section = level3.build(report_records(str(distributed_run)), str(distributed_run))
    (figure,) = [d for d in drawn if d[0].endswith("level3_train_accuracy_steps.png")]
    assert figure[1] == "Training accuracy every 5 steps (rank 0's shard)"
    ((_, _, series),) = figure[2]
    assert len(series) == 2   # two schemes, each the mean of seeds 0 and 1
    for xs, ys in series.values():
        assert xs == [5, 10, 15] and ys == pytest.approx([0.6, 0.7, 0.8])
    assert any(c.startswith("Training accuracy every 5 steps") for c, _ in section["plots"])
