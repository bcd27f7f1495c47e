"""Level-2 recipes: training across executors and optimizers, checked up front,
trained, compared with the reference trajectory, and reported."""
import os
import textwrap

import pytest

from deep500.recipe import parse_recipe, run_recipe
from deep500.results.files import read_results
from deep500.utils.errors import RecipeError

RECIPE = textwrap.dedent("""
    name: train
    experiment: training
    fixed:
      dataset: {name: digits, normalize: standardize}
      network: {model: mlp, hidden: [32]}
      batch_size: 32
      epochs: 3
      threads: 1
      seed: 0
    mutable:
      optimizer:
        - {type: momentum, learning_rate: 0.05}
        - {type: momentum, learning_rate: 0.05, implementation: reference}
      executor: [reference, pytorch]
    metrics:
      TestAccuracy: {}
      TimeToAccuracy: {target: 0.8}
      LossCurve: {}
      TrajectoryDivergence: {steps: 6}
    acceptance: ["TestAccuracy.final >= 0.8"]
""")


def test_training_recipe_trains_compares_and_reports(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text(RECIPE)
    out = tmp_path / "out"
    summary = run_recipe(str(path), str(out), progress=False)
    records = read_results(str(out))
    measured = [r for r in records if r["kind"] == "measurement"]
    skipped = [r for r in records if r["kind"] == "skipped"]
    # the reference optimizer on the reference executor is the native one: run once
    assert len(measured) == 3 and len(skipped) == 1, records
    assert summary.ok, [r.get("error") or r.get("acceptance") for r in records]
    assert summary.report_paths
    for record in measured:
        metrics = {m["metric"]: m for m in record["result"]["metrics"]}
        assert metrics["TestAccuracy"]["summary"]["final"] >= 0.8
        epochs = record["result"]["details"]["statistics"]["epochs"]
        assert len(epochs) == 3
        losses = [e["train_loss"] for e in epochs]
        assert losses[-1] < losses[0]
        divergence = metrics["TrajectoryDivergence"]
        assert len(divergence["samples"]) == 6
        # Same algorithm, same weights and batches: only rounding differs (float32).
        assert divergence["summary"]["max_relative_l2"] <= 1e-5
        # the per-epoch CSV log is on disk
        logs = os.listdir(out / "training")
        assert any(name.endswith(".csv") for name in logs)
    on_reference = [r for r in measured if r["configuration"]["executor"] == "reference"]
    assert on_reference[0]["result"]["metrics"][-1]["summary"]["max_relative_l2"] == 0.0
    report = (out / "report.md").read_text()
    assert "Level 2 — training" in report and "where an epoch's time goes" in report
    for plot in ("level2_curves.png", "level2_epoch_time.png", "level2_divergence.png",
                 "level2_phases.png"):
        assert (out / "plots" / plot).is_file(), plot


BASE = {"experiment": "training",
        "fixed": {"network": "mlp", "optimizer": {"type": "sgd"}},
        "mutable": {"executor": ["reference"]}}


@pytest.mark.parametrize("change, message", [
    ({"mutable": {"executor": ["onnxruntime"]}}, "runs inference only"),
    ({"fixed": {"network": "mlp", "optimizer": {"type": "lbfgs"}}},
     "unknown optimizer 'lbfgs'"),
    ({"fixed": {"network": "mlp", "optimizer": {"type": "adam", "beta3": 0.5}}},
     "takes no ['beta3']"),
    ({"fixed": {"network": "mlp", "optimizer": {"type": "adam",
                                                 "implementation": "keras"}}},
     "'native'"),
    ({"fixed": {"network": "mlp", "optimizer": "sgd", "dataset": "imagenet22k"}},
     "unknown dataset 'imagenet22k'"),
    ({"fixed": {"network": "mlp", "optimizer": "sgd"}, "metrics": {"FLOPs": {}}},
     "unknown metric 'FLOPs'"),
    ({"fixed": {"network": "mlp", "optimizer": "sgd"},
      "metrics": {"TimeToAccuracy": {"target": "high"}}}, "TimeToAccuracy"),
])
def test_bad_training_recipes(change, message):
    raw = {**BASE, **change}
    with pytest.raises(RecipeError) as error:
        parse_recipe(raw, "bad.yaml")
    assert message in str(error.value)


def test_the_dataset_defaults_to_the_digits(tmp_path):
    """A training recipe without a dataset trains on the embedded digits."""
    path = tmp_path / "default_dataset.yaml"
    path.write_text(textwrap.dedent("""
        name: default-dataset
        experiment: training
        fixed: {network: {model: mlp, hidden: [8]}, batch_size: 64, epochs: 1,
                threads: 1, seed: 0, executor: reference}
        mutable:
          optimizer: [{type: sgd, learning_rate: 0.1}]
        metrics: {TestAccuracy: {}}
    """))
    summary = run_recipe(str(path), str(tmp_path / "run"), progress=False,
                         write_report=False)
    records = [r for r in read_results(summary.output_dir) if r["kind"] == "measurement"]
    assert summary.errors == 0 and len(records) == 1
    assert records[0]["configuration"]["dataset"]["name"] == "digits"
