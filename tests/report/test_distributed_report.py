"""Level 3 with several seeds: one row per scheme with means and CIs over the seeds,
rank 0's record per seed; one row per seed on demand."""
import json
import subprocess
import sys
import textwrap

import pytest

from deep500.results.files import read_results
from deep500.report import write_reports
from deep500.report.seeds import mean_ci
from tests.report.conftest import column, svg_legend_texts, table

LEVEL3 = "Level 3 — distributed training"
SCHEMES = ["ConsistentDecentralized", "ModelAverageDecentralized(period=4)"]


def _final_accuracies(run, scheme):
    return [r["result"]["details"]["distributed"]["epochs"][-1]["test_accuracy"]
            for r in read_results(str(run)) if r["rank"] == 0 and
            r["configuration"]["scheme"]["label"] == scheme]


def check_aggregated(run):
    markdown = (run / "report.md").read_text()
    header, rows = table(markdown, LEVEL3)
    assert [row[0] for row in rows] == SCHEMES
    assert column(markdown, LEVEL3, "Seeds") == ["0, 1"] * 2
    for row in rows:
        finals = _final_accuracies(run, row[0])
        assert len(finals) == 2
        mean, low, high = mean_ci(finals)
        assert row[header.index("Final test acc. (rank 0)")] == (
            f"{mean:.1%} ± {(high - low) / 2:.1%}")
        assert "runs that reached the target 80%" in row[header.index("Time to target")]
    # detail tables show the lowest seed, and say so
    assert column(markdown, "Level 3 — bytes per rank per epoch, measured and analytic",
                  "Seed shown") == ["0"] * 4
    legend = svg_legend_texts(run / "plots" / "level3_accuracy_epochs.svg")
    assert legend == [f"{s} (mean of 2 seeds)" for s in SCHEMES]
    assert markdown.splitlines()[2] == ("4 configurations measured, 0 failed to run, 0 "
                                        "missed an acceptance threshold.")


def test_seeds_aggregated_per_scheme(distributed_run):
    write_reports(str(distributed_run))
    check_aggregated(distributed_run)


def test_one_row_per_seed(distributed_run):
    write_reports(str(distributed_run), per_seed=True)
    markdown = (distributed_run / "report.md").read_text()
    header, rows = table(markdown, LEVEL3)
    assert sorted((row[0], row[header.index("Settings")]) for row in rows) == [
        (scheme, f"seed={seed}") for scheme in SCHEMES for seed in (0, 1)]
    for row in rows:
        seed = int(row[header.index("Settings")].split("=")[1])
        final = _final_accuracies(distributed_run, row[0])[seed]
        assert row[header.index("Final test acc. (rank 0)")] == f"{final:.1%}"
    legend = svg_legend_texts(distributed_run / "plots" / "level3_accuracy_epochs.svg")
    assert sorted(legend) == [f"{s} · seed={seed}" for s in SCHEMES for seed in (0, 1)]


@pytest.mark.slow
def test_a_fresh_distributed_run_reports_the_same_way(tmp_path, repo_root):
    """The stored records above come from this command; it still writes them so."""
    manifest = json.loads((repo_root / "tests" / "report" / "data" /
                           "distributed_seeds.manifest.json").read_text())
    recipe = tmp_path / "l3seeds.yaml"
    recipe.write_text(json.dumps(manifest["recipe"]["content"]))
    out = tmp_path / "run"
    completed = subprocess.run(
        [sys.executable, "-m", "deep500", "run", "--np", "2", str(recipe), "--out",
         str(out), "--quiet"], capture_output=True, text=True, timeout=300,
        cwd=repo_root)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    check_aggregated(out)
    assert textwrap.dedent(completed.stdout).splitlines()[-1] == (
        "4 configurations measured, 0 failed to run, 0 missed an acceptance threshold")
