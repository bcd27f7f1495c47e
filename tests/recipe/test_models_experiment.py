"""``experiment: models`` (calibrate → predict → measure → compare): a real
``deep500 run --np 2`` of a tiny recipe (quick calibration on the two ranks, step
profiles, measured training, predictions, report section "Predicted vs measured"), a
1-process run with a shipped machine file, the metric's arithmetic, and bad input
refused when the recipe is checked."""
import json
import math
import sys

import numpy as np
import pytest
import yaml

from deep500.lv3_distributed.prediction_metric import StepTimePrediction
from deep500.recipe import parse_recipe
from deep500.results.files import read_results
from deep500.utils.errors import Deep500Error, RecipeError
from tests.lv3_distributed.mpi_helpers import run_program

TINY = {"name": "models-tiny", "experiment": "models",
        "fixed": {"dataset": {"name": "digits", "normalize": "standardize"},
                  "network": {"model": "mlp", "hidden": [32]},
                  "optimizer": {"type": "sgd", "learning_rate": 0.1},
                  "batch_size": 8, "steps": 20, "warmup": 3, "reruns": 10,
                  "scaling_ranks": 16, "threads": 1, "seed": 0},
        "mutable": {"algorithm": ["ring", "mpi"]},
        "metrics": {"StepTimePrediction": {}},
        # judged, not asserted here: the machine is shared, the errors are noisy
        "acceptance": ["StepTimePrediction.one_rank_error <= 100"]}


def _run(tmp_path, recipe, ranks):
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(recipe))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "deep500", "run", str(path), "--out", str(out),
               "--quiet", "--db", str(tmp_path / "results.db")]
    if ranks > 1:
        command += ["--np", str(ranks)]
    status, output, _ = run_program(command, timeout=120)
    assert status == 0, output[-3000:]
    return out, read_results(str(out))


def _check_comparisons(record, ranks_expected):
    details = record["result"]["details"]["models"]
    comparisons = details["comparisons"]
    assert [c["ranks"] for c in comparisons] == ranks_expected
    for c in comparisons:
        predicted, measured = c["predicted"]["step_s"], c["measured"]["step_s"]
        assert predicted > 0 and measured > 0
        assert c["measured"]["steps"] == 20
        # measured: the median of the synchronous step times kept as samples
        assert measured == pytest.approx(float(np.median(c["measured"]["samples_s"])),
                                         rel=1e-12)
        assert c["ratio"] == pytest.approx(predicted / measured, rel=1e-12)
        assert c["error"] == pytest.approx(abs(predicted / measured - 1), rel=1e-12)
        parts = c["predicted"]
        # the predicted step is the sum of its parts (blocking: nothing overlaps)
        assert parts["step_s"] == pytest.approx(
            parts["compute_s"] + parts["exposed_communication_s"] + parts["straggler_s"]
            + parts["update_s"], rel=1e-9)
    summary = next(m for m in record["result"]["metrics"]
                   if m["metric"] == "StepTimePrediction")["summary"]
    top, one = comparisons[-1], comparisons[0]
    assert summary["ranks"] == top["ranks"]
    assert summary["error"] == pytest.approx(top["error"], rel=1e-12)
    assert summary["one_rank_error"] == pytest.approx(one["error"], rel=1e-12)
    return details


def test_two_ranks_calibrate_predict_measure_compare(tmp_path):
    out, records = _run(tmp_path, TINY, 2)
    measured = [r for r in records if r["kind"] == "measurement"]
    assert len(measured) == 4 and {r["rank"] for r in measured} == {0, 1}
    for record in measured:
        assert record["experiment"] == "models" and record["passed"]
    rank0 = [r for r in measured if r["rank"] == 0]
    assert [r["configuration"]["algorithm"] for r in rank0] == ["ring", "mpi"]
    for record in rank0:
        details = _check_comparisons(record, [1, 2])
        assert details["world_size"] == 2
        assert details["machine"]["given_by"] == "calibrated"
        assert details["comparisons"][1]["predicted"]["exposed_communication_s"] > 0
        assert len(details["comparisons"][1]["measured"]["per_rank_median_s"]) == 2
        machines = [c["machine"] for c in details["scaling"]]
        assert machines[0].endswith("(calibrated)") and "infiniband-hdr" in machines
        for curve in details["scaling"]:
            assert [r["ranks"] for r in curve["weak"]] == [1, 2, 4, 8, 16]
            assert curve["global_batch"] == 16   # the world's: 2 ranks x 8
            assert [r["ranks"] for r in curve["strong"]] == [1, 2, 4, 8, 16]
            assert curve["weak"][0]["parallel_efficiency"] == pytest.approx(1.0)
    # the other rank's records carry the same metric (acceptance judges every rank)
    rank1 = [r for r in measured if r["rank"] == 1]
    assert [m["summary"] for m in rank1[0]["result"]["metrics"]] == \
        [m["summary"] for m in rank0[0]["result"]["metrics"]]
    assert (out / "machine.yaml").is_file() and (out / "machine.samples.jsonl").is_file()

    report = (out / "report.md").read_text()
    assert "### Predicted vs measured — step time" in report
    assert "### Predicted vs measured — error per model and per algorithm" in report
    # the error table: per group, the median of the records' errors
    errors = {ranks: [r["result"]["details"]["models"]["comparisons"][i]["error"]
                      for r in rank0] for i, ranks in enumerate((1, 2))}
    assert f"| 1 rank (no allreduce) | 2 | {np.median(errors[1]):.1%} |" in report
    assert f"| algorithm: ring (2 ranks) | 1 | {errors[2][0]:.1%} |" in report
    assert f"| algorithm: mpi (2 ranks) | 1 | {errors[2][1]:.1%} |" in report
    assert f"| all | 4 | {np.median(errors[1] + errors[2]):.1%} |" in report
    assert "### Predicted vs measured — scaling curves (predicted)" in report
    assert "Level 3 — distributed training" not in report   # not a distributed run
    for plot in ("models_predicted_vs_measured", "models_scaling_0"):
        assert f"](plots/{plot}.png)" in report
        assert (out / "plots" / f"{plot}.png").stat().st_size > 1000
    html = (out / "report.html").read_text()
    assert "Predicted vs measured" in html and html.count("data:image/png;base64,") >= 2


def test_one_process_with_a_shipped_machine_measures_one_rank(tmp_path):
    recipe = {**TINY, "machine": "infiniband-hdr",
              "mutable": {"algorithm": ["recursive_doubling"]}}
    out, records = _run(tmp_path, recipe, 1)
    (record,) = [r for r in records if r["kind"] == "measurement"]
    details = _check_comparisons(record, [1])
    assert details["machine"]["given_by"] == "recipe"
    assert details["machine"]["name"] == "infiniband-hdr"
    assert details["notes"] and "only the 1-rank configuration" in details["notes"][0]
    assert not (out / "machine.yaml").exists()   # nothing calibrated
    strong = details["scaling"][0]["strong"]
    assert [r["ranks"] for r in strong] == [1, 2, 4, 8]   # global batch 8 on 1 rank
    report = (out / "report.md").read_text()
    assert "This run had 1 process: only 1-rank steps were measured" in report
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["machine"]["name"] == "infiniband-hdr"


def test_the_metric_computes_ratio_and_error():
    result = StepTimePrediction().compare([
        {"ranks": 2, "predicted_s": 3e-3, "measured_s": 2e-3},
        {"ranks": 1, "predicted_s": 1e-3, "measured_s": 1.25e-3}])
    assert result.primary == "error"
    assert result.summary["ranks"] == 2
    assert result.summary["ratio"] == pytest.approx(1.5)
    assert result.summary["error"] == pytest.approx(0.5)
    assert result.summary["one_rank_ratio"] == pytest.approx(0.8)
    assert result.summary["one_rank_error"] == pytest.approx(0.2)
    only = StepTimePrediction().compare([{"ranks": 1, "predicted_s": 2.0,
                                          "measured_s": 2.0}])
    assert only.summary["error"] == 0.0 and only.summary["one_rank_error"] == 0.0
    with pytest.raises(Deep500Error, match="measured_s at 2 rank"):
        StepTimePrediction().compare([{"ranks": 2, "predicted_s": 1.0,
                                       "measured_s": math.nan}])
    with pytest.raises(Deep500Error, match="nothing to compare"):
        StepTimePrediction().compare([])


def _bad(**changes):
    recipe = json.loads(json.dumps(TINY))
    for key, value in changes.items():
        section, name = key.split("__")
        recipe[section][name] = value
    return recipe


@pytest.mark.parametrize("recipe, message", [
    (_bad(mutable__algorithm=["ring", "tree"]),
     "mutable.algorithm[1]: unknown allreduce algorithm 'tree'; registered: binomial, "
     "linear, mpi, rabenseifner, recursive_doubling, ring, segmented_ring."),
    (_bad(mutable__algorithm=[{"name": "ring"}]),
     "mutable.algorithm[0]: expected an allreduce algorithm name (a string), got a "
     "mapping"),
    (_bad(fixed__scaling_ranks=1000), "fixed.scaling_ranks: the scaling curves double the "
                                      "ranks from 1; give a power of two"),
    (_bad(fixed__what_if_machines=["no-such-machine"]),
     "fixed.what_if_machines: machine file no-such-machine does not exist"),
    (_bad(fixed__executor="onnxruntime"), "'onnxruntime' is not one of ['reference', "
                                          "'pytorch']"),
    ({**TINY, "metrics": {"TestAccuracy": {}}}, "unknown metric 'TestAccuracy' for an "
                                                "'models' recipe"),
])
def test_bad_models_recipes_fail_when_checked(recipe, message):
    with pytest.raises(RecipeError) as error:
        parse_recipe(recipe, "bad.yaml")
    assert message in str(error.value)


def test_the_shipped_recipe_checks(repo_root):
    from deep500.recipe import load_recipe
    recipe = load_recipe(str(repo_root / "recipes" / "models.yaml"))
    assert recipe.experiment == "models"
    assert len(recipe.configurations()) == 12
    assert [t.text for t in recipe.acceptance] == [
        "StepTimePrediction.one_rank_error <= 0.5", "StepTimePrediction.error <= 1"]
