"""The regression gate (deep500.store.gate): two runs with no configuration in common
are an error (exit status 2), rows measured under interference or with too few samples
are not judged (exit status 3 with --fail-above), and deep500 run --baseline checks the
baseline against the recipe before measuring anything."""
import json
import os

from deep500.cli import main
from deep500.recipe.baseline_plan import check_baseline, planned_keys
from deep500.recipe.runner import load_run_recipe
from deep500.store import store_run
from deep500.store.compare import load_run

from .conftest import lognormal, measurement, write_run

N = 60  # samples per side, as in test_compare: a 10% slowdown is 10 standard errors
RELU, SOFTMAX = "Relu 8x16 | reference", "Softmax 4x10 (axis=1) | reference"  # tiny


def interfered(record):
    record["telemetry"] = {"interfered": True, "reason": "other processes used 1.7 cores"}
    return record


def test_runs_with_nothing_in_common_are_an_error(tmp_path, capsys):
    a = write_run(tmp_path / "a", [measurement("Relu", lognormal(1, N))], recipe="ops")
    b = write_run(tmp_path / "b", [measurement("Conv", lognormal(2, N)),
                                   measurement("Gemm", lognormal(3, N), 1)],
                  recipe="training")
    db_path = str(tmp_path / "d.db")
    ids = [store_run(a, db_path), store_run(b, db_path)]
    for argv in (["compare", a, b, "--fail-above", "5%"], ["compare", a, b, "--json"],
                 ["compare", str(ids[0]), "-1", "--db", db_path]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert "no configuration was measured in both runs" in captured.err
        assert "recipe 'ops') holds 1 measured configuration (Relu)" in captured.err
        assert "recipe 'training') holds 2 measured configurations (Conv; Gemm)" \
            in captured.err
        assert "'deep500 runs' lists each run's recipe" in captured.err


def test_interfered_rows_are_not_judged(tmp_path, capsys):
    """Relu is 10% slower but measured under interference in B: not judged (exit 3,
    said in the summary); once a clean configuration is significantly slower too, the
    slowdown decides (exit 1)."""
    a = write_run(tmp_path / "a", [measurement("Relu", lognormal(1, N), 0),
                                   measurement("Softmax", lognormal(2, N), 1)])
    b = write_run(tmp_path / "b", [interfered(measurement("Relu", 1.1 * lognormal(3, N), 0)),
                                   measurement("Softmax", lognormal(4, N), 1)])
    assert main(["compare", a, b, "--fail-above", "5%"]) == 3
    out = capsys.readouterr().out
    assert "1 of 2 judged: 0 significantly slower by more than 5%" in out
    assert "1 not judged: measured under interference in B (Relu)" in out
    assert "exit status 3" in out and "FAIL" not in out
    assert main(["compare", a, b]) == 0  # without a gate, the rows are only shown
    capsys.readouterr()
    assert main(["compare", a, b, "--fail-above", "5%", "--json"]) == 3
    report = json.loads(capsys.readouterr().out)
    rows = {row["label"]: row for row in report["rows"]}
    assert rows["Relu"]["verdict"] == "slower" and not rows["Relu"]["fails"]
    assert rows["Relu"]["not_judged"] == "measured under interference in B"
    assert rows["Softmax"]["not_judged"] is None
    assert report["not_judged"] == 1 and report["exit_status"] == 3

    c = write_run(tmp_path / "c", [interfered(measurement("Relu", 1.1 * lognormal(3, N), 0)),
                                   measurement("Softmax", 1.1 * lognormal(4, N), 1)])
    assert main(["compare", a, c, "--fail-above", "5%"]) == 1
    out = capsys.readouterr().out
    assert "1 of 2 judged: 1 significantly slower by more than 5%" in out
    assert "exit status 1" in out


def test_too_few_samples_are_not_judged(tmp_path, capsys):
    """Three samples a side have no 95% interval (P(U = 0) = 1/20): not judged."""
    a = write_run(tmp_path / "a", [measurement("Relu", [1.0, 1.1, 1.2])])
    b = write_run(tmp_path / "b", [measurement("Relu", [2.0, 2.1, 2.2])])
    assert main(["compare", a, b, "--fail-above", "5%"]) == 3
    assert "too few samples for a confidence interval (Relu)" in capsys.readouterr().out


def test_planned_keys_are_the_records_keys(tiny_recipe, real_run):
    """What the pre-check predicts from the recipe is what the run wrote."""
    recipe = load_run_recipe(tiny_recipe)
    written = {key for key, _ in load_run(real_run).measurements}
    assert set(planned_keys(recipe)) == written and len(written) == 2
    assert sorted(planned_keys(recipe).values()) == [RELU, SOFTMAX]


def test_run_refuses_a_baseline_of_another_recipe_before_measuring(tiny_recipe, tmp_path,
                                                                   capsys):
    other = write_run(tmp_path / "other", [measurement("Conv", lognormal(1, N))],
                      recipe="training")
    out_dir = tmp_path / "never"
    assert main(["run", tiny_recipe, "--out", str(out_dir), "--quiet", "--db",
                 str(tmp_path / "d.db"), "--baseline", other, "--fail-above", "5%"]) == 2
    err = capsys.readouterr().err
    assert "holds none of the 2 configurations of recipe 'storetiny'" in err
    assert "nothing was run" in err and f"This recipe measures: {RELU}; {SOFTMAX}" in err
    assert "The baseline holds: Conv" in err
    assert not out_dir.exists() and not (tmp_path / "d.db").exists()


def test_run_says_how_many_configurations_the_baseline_holds(tiny_recipe, real_run, tmp_path):
    recipe = load_run_recipe(tiny_recipe)
    half = tmp_path / "half"
    records = [json.loads(line) for line in
               open(os.path.join(real_run, "results.jsonl"), encoding="utf-8")]
    relu = [r for r in records if r.get("kind") != "measurement" or r["label"] == RELU]
    write_run(half, relu, recipe="storetiny")
    line = check_baseline(recipe, load_run(str(half)))
    assert line == ("Baseline " + str(half) + " (recipe 'storetiny'): 1 of the 2 "
                    "configurations will be compared with it; 1 not in the baseline: "
                    + SOFTMAX)
