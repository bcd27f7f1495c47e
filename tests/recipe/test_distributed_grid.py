"""A grid of rank counts (``ranks``) x threads: ``deep500 run`` launches one mpirun job
per rank count into one run folder and one report (PyDTNN's Table 1 layout, speedup
plot); bad ``ranks`` and ``lr_scaling`` values are recipe errors naming the key; a
recipe with ``ranks`` under an outer mpirun is refused; a failing part stops the grid."""
import json
import os
import sys
import textwrap

import pytest

from deep500.recipe import parse_recipe
from deep500.recipe.rank_grid import check_launch
from deep500.results.files import read_manifest, read_results
from deep500.report import grid
from deep500.utils.errors import Deep500Error, RecipeError
from tests.lv3_distributed.mpi_helpers import run_program

GRID = textwrap.dedent("""
    name: tiny_grid
    experiment: distributed
    fixed:
      dataset: {name: digits, normalize: standardize}
      network: {model: mlp, hidden: [16]}
      optimizer: {type: sgd, learning_rate: 0.1}
      scheme: ConsistentDecentralized
      batch_size: 16
      epochs: 1
      lr_scaling: linear
      seed: 0
    mutable:
      ranks: [1, 2]
      threads: [1, 2]
    metrics: {TestAccuracy: {}, TimeToAccuracy: {target: 0.5}}
""")

BASE = {"experiment": "distributed",
        "fixed": {"network": {"model": "mlp", "hidden": [16]},
                  "optimizer": {"type": "sgd", "learning_rate": 0.1},
                  "scheme": "ConsistentDecentralized"},
        "metrics": {"TestAccuracy": {}}}


def deep500(*args, timeout=240):
    return run_program([sys.executable, "-m", "deep500", *map(str, args)], timeout)


def _usable_cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count()


@pytest.mark.mpi
@pytest.mark.slow
def test_the_grid_runs_every_rank_count_into_one_folder_and_reports_it(tmp_path):
    recipe = tmp_path / "grid.yaml"
    recipe.write_text(GRID)
    out = tmp_path / "out"
    status, output, _ = deep500("run", recipe, "--out", out, "--quiet", "--db",
                                tmp_path / "db.sqlite")
    assert status == 0, output
    assert output.count("Results:") == 1, output  # the launcher alone reports
    assert "4 configurations measured, 0 failed to run" in output, output

    records = read_results(str(out))
    points = sorted((r["index"], r["rank"], r["size"], r["configuration"]["ranks"],
                     r["configuration"]["threads"]) for r in records)
    # ranks vary slowest; each configuration keeps its index in the whole plan
    assert points == [(0, 0, 1, 1, 1), (1, 0, 1, 1, 2), (2, 0, 2, 2, 1), (2, 1, 2, 2, 1),
                      (3, 0, 2, 2, 2), (3, 1, 2, 2, 2)]
    assert {r["kind"] for r in records} == {"measurement"}
    assert {r["session"] for r in records} == {0}
    for record in records:
        ranks, threads = record["configuration"]["ranks"], record["configuration"]["threads"]
        assert record["result"]["details"]["lr_scaling"] == {
            "rule": "linear", "ranks": ranks, "base_learning_rate": 0.1,
            "learning_rate": pytest.approx(0.1 * ranks),
            "source": "Goyal et al. 2017, sec. 2.1 (linear scaling rule)"}
        oversubscribed = ranks * threads > _usable_cpus()
        assert ("oversubscribed" in record) == oversubscribed, record.get("oversubscribed")
        if record["rank"] == 0:
            assert record["result"]["details"]["distributed"]["size"] == ranks

    manifest = read_manifest(str(out))
    assert manifest["status"] == "complete" and manifest["mpi_ranks"] == [1, 2]
    assert manifest["records"] == 6 and manifest["configurations_recorded"] == 4
    parts = manifest["rank_grid"]["parts"]
    assert [(p["ranks"], p["indices"], p["exit_status"]) for p in parts] == [
        (1, [0, 1], 0), (2, [2, 3], 0)]
    assert parts[1]["command"][1:3] == ["-np", "2"]

    report = (out / "report.md").read_text()
    assert "### Rank × thread grid — time to 50% test accuracy" in report
    assert "### Rank × thread grid — time per epoch (slowest rank, median)" in report
    assert "| Ranks \\ threads per rank | 1 thread | 2 threads |" in report
    rank0 = {(r["configuration"]["ranks"], r["configuration"]["threads"]): r
             for r in records if r["rank"] == 0}
    base = grid.epoch_seconds(rank0[(1, 1)])
    for (ranks, threads), record in rank0.items():
        speedup = base / grid.epoch_seconds(record)
        assert (f"{speedup:.2f}× · {speedup / (ranks * threads):.0%}") in report
    rows = [line for line in report.splitlines() if line.startswith("| 2 ranks |")]
    assert len(rows) == 2  # one per table
    assert ("⚠ oversubscribed (2×2" in rows[1]) == (4 > _usable_cpus())
    assert (out / "plots" / "grid_speedup.png").is_file()
    assert "plots/grid_speedup.png" in report


@pytest.mark.parametrize("section, value, message", [
    ("mutable", [0, 1], "mutable.ranks[0]: expected a positive integer"),
    ("mutable", [1, "two"], "mutable.ranks[1]: expected a positive integer (at most "
                            "2147483647), got the string 'two'"),
    ("mutable", [1, 2.0], "mutable.ranks[1]: expected a positive integer"),
    ("fixed", 0, "fixed.ranks: expected a positive integer"),
    ("fixed", True, "fixed.ranks: expected a positive integer"),
])
def test_bad_ranks_name_the_key(section, value, message):
    raw = json.loads(json.dumps(BASE))
    raw.setdefault(section, {})["ranks"] = value
    with pytest.raises(RecipeError) as error:
        parse_recipe(raw, "grid.yaml")
    assert message in str(error.value)


def test_bad_lr_scaling_names_the_key():
    raw = json.loads(json.dumps(BASE))
    raw["fixed"]["lr_scaling"] = "sqrt"
    with pytest.raises(RecipeError) as error:
        parse_recipe(raw, "grid.yaml")
    assert "fixed.lr_scaling: 'sqrt' is not one of ['none', 'linear']" in str(error.value)
    raw["fixed"]["lr_scaling"] = "linear"
    raw["fixed"]["optimizer"] = {"type": "sgd"}
    with pytest.raises(RecipeError) as error:
        parse_recipe(raw, "grid.yaml")
    assert ("fixed.lr_scaling: lr_scaling scales the optimizer's learning_rate, but "
            "optimizer sgd (fixed.optimizer) gives none") in str(error.value)


def test_rank_counts_and_the_launch_check():
    raw = json.loads(json.dumps(BASE))
    raw["mutable"] = {"threads": [1, 2], "ranks": [2, 1, 2]}
    recipe = parse_recipe(raw, "grid.yaml")
    assert recipe.rank_counts() == [2, 1]
    with pytest.raises(Deep500Error) as error:
        check_launch(recipe, 2)  # under an outer mpirun of 2 ranks
    assert str(error.value).startswith("mutable.ranks: the recipe runs on [2, 1] rank(s)")
    assert "without mpirun and without --np" in str(error.value)
    fixed = json.loads(json.dumps(BASE))
    fixed["fixed"]["ranks"] = 2
    recipe = parse_recipe(fixed, "grid.yaml")
    check_launch(recipe, 2)  # the world's size: runs as usual
    with pytest.raises(Deep500Error, match=r"^fixed.ranks: the recipe runs on \[2\]"):
        check_launch(recipe, 3)
    assert parse_recipe(BASE, "plain.yaml").rank_counts() is None
    check_launch(parse_recipe(BASE, "plain.yaml"), 4)


@pytest.mark.mpi
@pytest.mark.parametrize("outer", ["mpirun", "--np"])
def test_a_grid_under_an_outer_mpirun_is_refused(tmp_path, outer):
    from deep500.lv3_distributed import mpirun_executable
    recipe = tmp_path / "grid.yaml"
    recipe.write_text(GRID)
    out = tmp_path / "out"
    run = [sys.executable, "-m", "deep500", "run", str(recipe), "--out", str(out)]
    command = ([mpirun_executable(), "-np", "2", *run] if outer == "mpirun"
               else [*run, "--np", "2"])
    status, output, _ = run_program(command, timeout=120)
    assert status == 2, output
    assert output.count("deep500: error: mutable.ranks: the recipe runs on [1, 2] "
                        "rank(s)") == 1, output
    assert not out.exists()


@pytest.mark.mpi
@pytest.mark.slow
def test_a_part_that_times_out_stops_the_grid(tmp_path):
    recipe = tmp_path / "grid.yaml"
    recipe.write_text(GRID.replace("epochs: 1", "epochs: 50") + "timeout: 1\n")
    out = tmp_path / "out"
    status, output, _ = deep500("run", recipe, "--out", out, "--quiet", "--db",
                                tmp_path / "db.sqlite")
    assert status == 124, output
    manifest = read_manifest(str(out))
    assert manifest["status"] == "timed_out", manifest
    parts = manifest["rank_grid"]["parts"]
    assert [(p["ranks"], p["exit_status"]) for p in parts] == [(1, 124)]  # no 2 ranks
    records = read_results(str(out))
    assert records and records[-1]["kind"] == "error" and records[-1]["timeout"] is True
    assert all(r["configuration"]["ranks"] == 1 for r in records)
    assert (out / "report.md").is_file()
