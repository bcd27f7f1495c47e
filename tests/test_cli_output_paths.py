"""Output paths that cannot be written are refused, exit 2 with a message, before any
work: ``calibrate --out`` (before measuring, nothing left behind), ``history --out``,
``predict --json``/``--plot``; and ``predict --global-batch 0``/``--threads 0`` are
refused instead of meaning "the default"."""
import os

import pytest
import yaml

from deep500.cli import main
from deep500.lv3_distributed.calibration import launch
from deep500.recipe import predict
from deep500.utils.errors import Deep500Error


@pytest.fixture
def no_measuring(monkeypatch):
    def measured(*args, **kwargs):
        raise AssertionError("calibrate measured before checking --out")
    monkeypatch.setattr(launch, "calibrate", measured)
    monkeypatch.setattr(launch, "_network_under_mpirun", measured)


@pytest.mark.parametrize("target, words", [
    ("missing/m.yaml", "the folder"), (".", "is a folder"),
    ("m.yaml", "is a folder")])  # there, its samples file's path is a folder
def test_calibrate_out_is_checked_before_measuring(tmp_path, capsys, no_measuring, target,
                                                   words):
    if target == "m.yaml":
        (tmp_path / "m.samples.jsonl").mkdir()
    before = sorted(os.listdir(tmp_path))
    out = os.path.normpath(tmp_path / target)
    for network in (["--no-network"], ["--np", "2"]):
        assert main(["calibrate", "--out", out, "--quick", "--quiet", *network]) == 2
        error = capsys.readouterr().err
        assert "deep500: error: --out" in error and words in error, error
        assert sorted(os.listdir(tmp_path)) == before  # no folder, no .tmp, no samples


def test_history_out_naming_a_folder(tmp_path, capsys):
    assert main(["history", "--config", "x", "--out", str(tmp_path),
                 "--db", str(tmp_path / "d.db")]) == 2
    assert "--out" in capsys.readouterr().err and not (tmp_path / "d.db").exists()


def _recipe(tmp_path):
    recipe = {"name": "p", "experiment": "distributed",
              "fixed": {"dataset": {"name": "digits"}, "network": {"model": "mlp", "hidden": [8]},
                        "optimizer": {"type": "sgd", "learning_rate": 0.1}, "batch_size": 8,
                        "epochs": 1, "threads": 1, "seed": 0,
                        "scheme": {"scheme": "ConsistentDecentralized", "algorithm": "ring"}}}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


@pytest.mark.parametrize("options, words", [
    (["--json", "{dir}"], "--json {dir} is a folder"),
    (["--plot", "{dir}"], "--plot {dir} is a folder"),
    (["--json", "{dir}/missing/c.json"], "the folder {dir}/missing does not exist"),
    (["--sweep", "ranks=2,4", "--json", "{dir}"], "--json {dir} is a folder"),
    (["--global-batch", "0"], "--global-batch: expected an integer >= 1, got '0'"),
    (["--threads", "0"], "--threads: expected an integer >= 1, got '0'"),
    (["--threads", "-3"], "got '-3'"),
])
def test_predict_refuses_bad_outputs_and_counts(tmp_path, capsys, monkeypatch, options,
                                                words):
    def profiled(*args, **kwargs):
        raise AssertionError("predict profiled before checking its options")
    monkeypatch.setattr(predict, "step_profile", profiled)
    options = [o.format(dir=tmp_path) for o in options]
    try:
        status = main(["predict", _recipe(tmp_path), "--machine", "infiniband-hdr",
                       "--compute", "analytic", *options])
    except SystemExit as exit_:  # argparse refuses a count
        status = exit_.code
    assert status == 2
    assert words.format(dir=tmp_path) in capsys.readouterr().err


def test_predict_api_refuses_zero_counts(tmp_path):
    for options in ({"threads": 0}, {"global_batch": 0}, {"threads": True}):
        with pytest.raises(Deep500Error, match="give an integer >= 1"):
            predict.predict_recipe(_recipe(tmp_path), "infiniband-hdr", **options)
