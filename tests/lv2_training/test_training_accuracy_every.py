"""``TrainingAccuracy(every=k)``: the training accuracy sampled every k steps (as the
Deep500 paper samples it), from the per-step counts the trainer records; in recipes as
``metrics: {TrainingAccuracy: {every: k}}``, stored as (step, accuracy) samples and
drawn in the report beside the per-epoch curves."""
import json
import textwrap

import pytest

from tests.report.test_training_accuracy_steps import stub_figures

from deep500.lv2_training.training_metrics import TrainingAccuracy
from deep500.lv2_training.training_statistics import EpochStatistics, TrainingStatistics
from deep500.lv2_training.training_validation import test_training
from deep500.utils.errors import Deep500Error, RecipeError
from tests.lv2_training.test_trainer import SGD, mlp_executor, small_datasets


def _epochs(*per_epoch):
    """Statistics whose epochs hold the given per-step (correct, counted) pairs."""
    epochs = []
    for index, steps in enumerate(per_epoch):
        correct = sum(c for c, _ in steps)
        counted = sum(n for _, n in steps)
        epochs.append(EpochStatistics(
            epoch=index, steps=len(steps), train_accuracy=correct / counted if counted
            else None, step_losses=[1.0] * len(steps), step_times=[0.1] * len(steps),
            step_correct=[c for c, _ in steps], step_counted=[n for _, n in steps]))
    return TrainingStatistics(epochs)


def test_windows_of_k_steps_span_epochs_and_end_short():
    stats = _epochs([(1, 4), (2, 4), (3, 4)], [(4, 4), (0, 2)])
    result = TrainingAccuracy(every=2).measure_training(stats)
    assert result.samples == [
        {"step": 2, "epoch": 0, "accuracy": 3 / 8, "steps": 2},
        {"step": 4, "epoch": 1, "accuracy": 7 / 8, "steps": 2},   # epochs 0 and 1
        {"step": 5, "epoch": 1, "accuracy": 0.0, "steps": 1}]     # the short last one
    assert result.summary["every"] == 2 and result.summary["sampled"] == 3
    assert result.summary["last_window"] == 0.0
    assert result.summary["per_epoch"] == [0.5, pytest.approx(4 / 6)]
    assert result.get("final") == pytest.approx(4 / 6)   # the per-epoch headline stays
    assert result.conditions["every"] == 2 and not result.warnings
    json.dumps(result.to_dict())
    # without every: one value per epoch, as before
    assert TrainingAccuracy().measure_training(stats).samples == [0.5, pytest.approx(4 / 6)]


def test_a_window_without_labels_has_no_accuracy():
    result = TrainingAccuracy(every=1).measure_training(_epochs([(0, 0), (3, 4)]))
    assert [s["accuracy"] for s in result.samples] == [None, 0.75]


def test_statistics_without_per_step_counts_say_so():
    old = EpochStatistics.from_dict({"epoch": 0, "steps": 3, "train_accuracy": 0.5,
                                     "step_losses": [1.0, 1.0, 1.0]})
    result = TrainingAccuracy(every=2).measure_training(TrainingStatistics([old]))
    assert result.samples == [] and result.summary["sampled"] == 0
    assert "no per-step accuracy was recorded" in result.warnings[0]
    assert result.get("final") == 0.5


@pytest.mark.parametrize("every", [0, -3, 2.5, True, "5"])
def test_every_is_a_positive_number_of_steps(every):
    with pytest.raises(Deep500Error, match="number of training steps >= 1"):
        TrainingAccuracy(every=every)


def test_a_training_run_samples_every_k_steps():
    train, test = small_datasets(samples=64)
    executor = mlp_executor(hidden=(16,))
    result = test_training(executor, train, test, SGD(executor), epochs=3, batch_size=16,
                           metrics=[TrainingAccuracy(every=3)])
    stats = result.outputs
    samples = result["TrainingAccuracy"].samples
    assert [s["step"] for s in samples] == [3, 6, 9, 12]   # 4 steps per epoch, 12 steps
    assert [s["epoch"] for s in samples] == [0, 1, 2, 2]
    correct = [c for e in stats for c in e.step_correct]
    counted = [n for e in stats for n in e.step_counted]
    assert counted == [16] * 12
    for s in samples:
        window = slice(s["step"] - 3, s["step"])
        assert s["accuracy"] == sum(correct[window]) / sum(counted[window])
    for epoch in stats:   # the per-step counts add up to the per-epoch accuracy
        assert sum(epoch.step_correct) / sum(epoch.step_counted) == epoch.train_accuracy
    # they are stored with the statistics (records, checkpoints) and read back
    again = TrainingStatistics.from_json(stats.to_json())
    assert again[1].step_correct == stats[1].step_correct
    assert result.details["statistics"]["epochs"][0]["step_counted"] == [16] * 4


RECIPE = textwrap.dedent("""
    name: accuracy-every
    experiment: training
    fixed:
      dataset: {name: digits, normalize: standardize}
      network: {model: mlp, hidden: [16]}
      optimizer: {type: sgd, learning_rate: 0.1}
      executor: reference
      batch_size: 128
      epochs: 2
      threads: 1
      seed: 0
    metrics:
      TrainingAccuracy: {every: EVERY}
      TestAccuracy: {}
    acceptance: ["TrainingAccuracy.last_window >= 0.3"]
""")


@pytest.mark.parametrize("every, message", [(0, "number of training steps >= 1"),
                                            ("often", "every")])
def test_a_recipe_with_a_bad_every_is_refused(tmp_path, every, message):
    from deep500.recipe.schema import load_recipe
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE.replace("EVERY", str(every)))
    with pytest.raises(RecipeError, match=message):
        load_recipe(str(path))


def test_a_recipe_records_the_samples_and_the_report_draws_them(tmp_path, monkeypatch):
    from deep500.recipe import run_recipe
    from deep500.report import level2
    from deep500.report.reading import report_records
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE.replace("EVERY", "4"))
    run = tmp_path / "run"
    run_recipe(str(path), str(run), argv=["deep500", "run"], progress=False,
               write_report=False)
    # the report's reading keeps these samples (it drops other metrics' raw samples)
    (record,) = [r for r in report_records(str(run)) if r.get("result")]
    (entry,) = [m for m in record["result"]["metrics"] if m["metric"] == "TrainingAccuracy"]
    # digits: 1437 training samples, 11 full batches of 128 per epoch, 22 steps
    assert [s["step"] for s in entry["samples"]] == [4, 8, 12, 16, 20, 22]
    assert entry["summary"]["every"] == 4 and entry["samples"][-1]["steps"] == 2
    assert all(0.0 <= s["accuracy"] <= 1.0 for s in entry["samples"])
    assert not [m for m in record["result"]["metrics"]
                if m["metric"] == "TestAccuracy" and "samples" in m]
    drawn = stub_figures(monkeypatch)
    section = level2.build([record], str(run))
    (figure,) = [d for d in drawn if d[0].endswith("level2_train_accuracy_steps.png")]
    ((_, _, series),) = figure[2]
    ((xs, ys),) = series.values()
    assert xs == [4, 8, 12, 16, 20, 22] and ys == [s["accuracy"] for s in entry["samples"]]
    captions = [caption for caption, _ in section["plots"]]
    at = captions.index(next(c for c in captions if c.startswith("Training accuracy every 4")))
    assert captions[at - 1] == "Accuracy and loss curves"   # beside the per-epoch curves
