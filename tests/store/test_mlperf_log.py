"""MLPerf logs of training runs (deep500 report DIR --mlperf), written by mllog and
checked by MLCommons' compliance checker."""
import json
import os
import textwrap

import pytest

from deep500.cli import main
from deep500.store.mlperf_compliance import NOT_APPLICABLE, check_mlperf_log
from deep500.store.mlperf_log import PREFIX, mlperf_lines, write_mlperf_logs

TRAINING = textwrap.dedent("""
    name: mlperftiny
    experiment: training
    fixed:
      dataset: {name: digits}
      network: {model: mlp, hidden: [16]}
      batch_size: 64
      epochs: 3
      threads: 1
      seed: 0
      executor: reference
    mutable:
      optimizer: [{type: sgd, learning_rate: 0.05}]
    metrics:
      TestAccuracy: {}
      TimeToAccuracy: {target: 0.01}
""")


def parse(lines):
    assert all(line.startswith(PREFIX) for line in lines)
    return [json.loads(line[len(PREFIX):]) for line in lines]


@pytest.fixture(scope="module")
def training_run(tmp_path_factory):
    from deep500.recipe import run_recipe
    folder = tmp_path_factory.mktemp("train")
    recipe = folder / "mlperftiny.yaml"
    recipe.write_text(TRAINING)
    summary = run_recipe(str(recipe), str(folder / "run"), progress=False,
                         write_report=False)
    assert summary.measurements == 1
    return str(folder / "run")


def test_report_writes_mlperf_lines(training_run, capsys):
    assert main(["report", training_run, "--mlperf", "--figure-format", "none"]) == 0
    [path] = [p for p in capsys.readouterr().out.split() if "/mlperf/" in p]
    assert os.path.dirname(path) == os.path.join(training_run, "mlperf")
    events = parse(open(path).read().splitlines())
    for event in events:
        assert set(event) == {"namespace", "time_ms", "event_type", "key", "value",
                              "metadata"}
        assert event["event_type"] in ("POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END")
    keys = [e["key"] for e in events]
    assert keys[0] == "init_start" and keys.index("init_stop") < keys.index("run_start")
    assert keys.count("run_start") == 1 and keys[-1] == "run_stop"
    assert keys.index("run_start") < keys.index("epoch_start")
    # the 1% target is reached after the first epoch: MLPerf's run stops there
    assert events[-1]["metadata"]["status"] == "success"
    # init is the measured set-up: datasets, network and executor built before training
    init = {e["key"]: e["time_ms"] for e in events if e["key"] in ("init_start", "init_stop")}
    assert 0 < init["init_stop"] - init["init_start"] < 60_000
    assert keys.count("epoch_start") == 1 and keys.count("eval_accuracy") == 1
    times = [e["time_ms"] for e in events]
    assert times == sorted(times)
    values = {e["key"]: e["value"] for e in events}
    assert values["global_batch_size"] == 64 and values["opt_name"] == "sgd"
    assert values["eval_accuracy"] >= 0.01
    assert values["submission_division"] == "open" and values["config_filename"] == \
        "mlperftiny.yaml"


def test_logs_pass_the_compliance_checker(training_run, capsys):
    assert len(write_mlperf_logs(training_run)) == 1
    err = capsys.readouterr().err
    assert "MLPerf compliance (training 6.1.0" in err and ": passed" in err
    [path] = [os.path.join(training_run, "mlperf", name)
              for name in os.listdir(os.path.join(training_run, "mlperf"))]
    verdict = check_mlperf_log(path)
    assert verdict.passed, verdict.messages
    assert len(NOT_APPLICABLE) == 2


@pytest.mark.parametrize("drop, rule", [("init_stop", "init_stop"),
                                        ("eval_accuracy", "eval_accuracy"),
                                        ("submission_org", "submission_org")])
def test_the_checker_fails_a_log_without_a_required_key(training_run, tmp_path, drop, rule):
    [name] = os.listdir(os.path.join(training_run, "mlperf"))
    lines = open(os.path.join(training_run, "mlperf", name)).read().splitlines()
    broken = tmp_path / "broken.log"
    broken.write_text("\n".join(line for line in lines
                                if json.loads(line[len(PREFIX):])["key"] != drop) + "\n")
    verdict = check_mlperf_log(str(broken))
    assert not verdict.passed and any(rule in message for message in verdict.messages)
    assert "FAILED" in verdict.summary()


def test_a_missed_target_is_aborted_after_every_epoch():
    epochs = [{"epoch": i, "wall_time": 0.5, "validation_time": 0.1, "test_accuracy": a,
               "completed": True} for i, a in enumerate((0.2, 0.4, 0.6))]
    record = {"kind": "measurement", "index": 0, "rank": 0, "label": "x",
              "configuration": {"batch_size": 8, "optimizer": {"type": "adam"}},
              "telemetry_series": {"started_unix": 1000.0},
              "result": {"metrics": [{"metric": "TimeToAccuracy",
                                      "summary": {"target": 0.9}}],
                         "details": {"statistics": {"epochs": epochs}}}}
    events = parse(mlperf_lines(record, {}))
    assert [e["metadata"]["epoch_num"] for e in events if e["key"] == "epoch_stop"] == [1, 2, 3]
    assert events[-1]["key"] == "run_stop" and events[-1]["metadata"]["status"] == "aborted"
    assert events[-1]["time_ms"] - events[0]["time_ms"] == 1500  # three 0.5 s epochs
    # an old record without its training start: init_stop at the configuration's start
    stop = next(e for e in events if e["key"] == "epoch_stop")
    assert stop["time_ms"] == 1000400  # after its steps, before its 0.1 s validation
    assert mlperf_lines({**record, "result": {"metrics": []}}, {}) == []


def test_no_training_records_no_log(real_run, capsys):
    assert main(["report", real_run, "--mlperf", "--figure-format", "none"]) == 0
    assert "no training records" in capsys.readouterr().err
    assert not os.path.exists(os.path.join(real_run, "mlperf"))
