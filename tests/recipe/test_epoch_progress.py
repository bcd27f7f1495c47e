"""A training configuration shows its epochs on the console (issue 31, item 7): a bar on
a terminal, one line per epoch when stderr is not a terminal."""
import io
import types

import yaml

from deep500.recipe.epoch_progress import EpochProgress, epoch_events, shown

DISTRIBUTED = {"name": "tiny_distributed", "experiment": "distributed",
               "fixed": {"network": {"model": "mlp", "hidden": [8]},
                         "optimizer": {"type": "sgd", "learning_rate": 0.1},
                         "dataset": {"name": "digits"}, "epochs": 2, "batch_size": 64,
                         "scheme": "ConsistentDecentralized", "threads": 1},
               "metrics": {"TestAccuracy": {}}}


def test_epoch_events_exist_only_while_progress_is_shown():
    assert epoch_events() == []
    with shown(True):
        assert [type(e) for e in epoch_events()] == [EpochProgress]
    with shown(False):
        assert epoch_events() == []



def test_without_a_terminal_each_epoch_is_one_line():
    out = io.StringIO()
    event = EpochProgress(file=out)  # a StringIO is no terminal
    trainer = types.SimpleNamespace(epochs=3)
    event.before_training(trainer, None)
    for epoch, (loss, accuracy) in enumerate([(2.3, 0.5), (1.1, None)]):
        event.after_epoch(trainer, epoch, types.SimpleNamespace(
            train_loss=loss, test_accuracy=accuracy, wall_time=0.25))
    event.after_training(trainer, None)
    assert out.getvalue().splitlines() == [
        "  epoch 1/3, loss 2.3000, test accuracy 0.5000, 0.25 s",
        "  epoch 2/3, loss 1.1000, 0.25 s"]



def test_on_a_terminal_the_epochs_are_a_bar():
    out = io.StringIO()
    event = EpochProgress(file=out, terminal=True)
    trainer = types.SimpleNamespace(epochs=2)
    event.before_training(trainer, None)
    event.after_epoch(trainer, 0, types.SimpleNamespace(
        train_loss=0.5, test_accuracy=0.75, wall_time=0.1))
    assert event._bar.n == 1
    event.after_training(trainer, None)
    assert "epochs" in out.getvalue() and "epoch 1/2," not in out.getvalue()



def test_a_distributed_training_run_shows_its_epochs(tmp_path, capsys):
    from deep500.recipe import run_recipe
    recipe = tmp_path / "tiny_distributed.yaml"
    recipe.write_text(yaml.safe_dump(DISTRIBUTED))
    summary = run_recipe(str(recipe), str(tmp_path / "out"), progress=True,
                         write_report=False)
    assert summary.errors == 0
    stderr = capsys.readouterr().err
    epochs = [line for line in stderr.splitlines() if line.strip().startswith("epoch ")]
    assert [line.split(",")[0].strip() for line in epochs] == ["epoch 1/2", "epoch 2/2"]
    assert all("test accuracy" in line for line in epochs)
