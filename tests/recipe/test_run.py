"""Running recipes end to end: results on disk as measured, manifest, reports."""
import json
import runpy
import sys
import textwrap

import pytest

import deep500.recipe.experiments.operators as operators_experiment
import deep500.recipe.runner as runner
from deep500.recipe import run_recipe
from deep500.results.files import read_manifest, read_results

TINY = textwrap.dedent("""
    name: tiny
    fixed: {dtype: float32, threads: 1, seed: 3}
    mutable:
      framework: [reference, pytorch, tensorflow]
      operator:
        - {op: Gemm, inputs: [[32, 16], [16, 8]]}
        - {op: Conv, inputs: [[2, 3, 9, 9], [4, 3, 3, 3]], pads: [1, 1, 1, 1], strides: [2, 2]}
        - {op: Softmax, shape: [4, 10], axis: 1}
    metrics:
      WallclockTime: {reruns: 6, warmup: 1}
      FLOPs: {}
      L2Error: {}
      MaxError: {}
    acceptance: ["L2Error.relative <= 1e-4", "MaxError.relative <= 1e-3"]
""")


def write_recipe(tmp_path, text=TINY, name="tiny.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_run_writes_results_manifest_and_reports(tmp_path):
    out = tmp_path / "run"
    summary = run_recipe(write_recipe(tmp_path), str(out), argv=["deep500", "run"],
                         progress=False)
    assert summary.ok and summary.measurements == 9
    records = read_results(str(out))
    assert len(records) == 9 and all(r["kind"] == "measurement" for r in records)
    for record in records:
        metrics = {m["metric"]: m for m in record["result"]["metrics"]}
        assert len(metrics["WallclockTime"]["samples"]) == 6
        assert metrics["WallclockTime"]["summary"]["median"] > 0
        assert metrics["L2Error"]["summary"]["relative"] <= 1e-4
        assert record["result"]["conditions"]["threads"]["torch_threads"] == 1
        assert record["passed"] is True
    gemm = [r for r in records if r["configuration"]["operator"]["op_type"] == "Gemm"]
    flops = {m["metric"]: m for m in gemm[0]["result"]["metrics"]}["FLOPs"]["summary"]
    assert flops["flops"] == 2 * 32 * 8 * 16 and flops["gflops_per_s"] > 0
    manifest = read_manifest(str(out))
    assert manifest["status"] == "complete"
    assert manifest["versions"]["numpy"] and manifest["hardware"]["cpu_model"]
    assert manifest["recipe"]["content"]["name"] == "tiny"
    assert manifest["threads"]["requested"] == 1 and manifest["seeds"]["seed"] == 3
    assert "git_revision" in manifest and manifest["command_line"] == ["deep500", "run"]
    assert manifest["allocator"]  # the allocator policy timings were taken under
    report = (out / "report.md").read_text()
    assert "Level 0 — operators" in report and "plots/level0_time.png" in report
    assert report.count("| pass |") == 9
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2  # time and GFLOP/s plots
    assert (out / "plots" / "level0_time.png").stat().st_size > 5000


def test_inputs_are_identical_across_frameworks(tmp_path):
    """Fairness: every framework sees the same inputs, so errors are comparable."""
    spec = runner.load_recipe(write_recipe(tmp_path)).configurations()[0]["operator"]
    first = operators_experiment.make_inputs(spec, "float32", 3)
    second = operators_experiment.make_inputs(spec, "float32", 3)
    other_seed = operators_experiment.make_inputs(spec, "float32", 4)
    assert all((a == b).all() for a, b in zip(first, second))
    assert not (first[0] == other_seed[0]).all()


def test_crash_keeps_what_was_measured(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = operators_experiment.test_op_forward

    def crash_on_fourth(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(operators_experiment, "test_op_forward", crash_on_fourth)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_recipe(write_recipe(tmp_path), str(out), progress=False)
    assert len(read_results(str(out))) == 3
    assert read_manifest(str(out))["status"] == "interrupted"
    # The report can be rebuilt from what is on disk.
    from deep500.report import write_reports
    paths = write_reports(str(out))
    assert "3 configurations measured, 0 failed to run" in open(paths[0]).read()


def test_failing_configuration_is_recorded_and_others_run(tmp_path, monkeypatch):
    real = operators_experiment.test_op_forward

    def broken_tensorflow_softmax(op, *args, **kwargs):
        if op.name == "tensorflow:Softmax":
            raise RuntimeError("simulated kernel failure")
        return real(op, *args, **kwargs)

    monkeypatch.setattr(operators_experiment, "test_op_forward", broken_tensorflow_softmax)
    out = tmp_path / "run"
    summary = run_recipe(write_recipe(tmp_path), str(out), progress=False)
    records = read_results(str(out))
    assert len(records) == 9 and summary.errors == 1 and not summary.ok
    error = [r for r in records if r["kind"] == "error"][0]
    assert "simulated kernel failure" in error["error"]
    assert "configurations that failed" in (out / "report.md").read_text()


def test_acceptance_failure_is_reported(tmp_path):
    strict = TINY.replace("L2Error.relative <= 1e-4", "L2Error.relative <= 1e-30")
    out = tmp_path / "run"
    summary = run_recipe(write_recipe(tmp_path, strict), str(out), progress=False)
    assert summary.acceptance_failures > 0 and not summary.ok
    assert "FAIL: L2Error.relative <= 1e-30" in (out / "report.md").read_text()


def python_m_deep500(monkeypatch, capsys, *arguments):
    """``python -m deep500 ARGUMENTS`` run in this process (deep500/__main__.py as
    ``__main__``, its arguments from sys.argv, its status from sys.exit): a new
    interpreter would spend a good part of these tests importing PyTorch and
    TensorFlow again. Returns the exit status and what it printed."""
    monkeypatch.setattr(sys, "argv", ["deep500", *map(str, arguments)])
    with pytest.raises(SystemExit) as exited:
        runpy.run_module("deep500", run_name="__main__")
    out, err = capsys.readouterr()
    return exited.value.code, out, err


@pytest.mark.slow
def test_quickstart_recipe_runs_from_the_command_line(tmp_path, repo_root, monkeypatch,
                                                      capsys):
    """The main job: the shipped default recipe, as the README runs it."""
    out = tmp_path / "quickstart"
    status, _, err = python_m_deep500(monkeypatch, capsys, "run",
                                      repo_root / "recipes" / "quickstart.yaml",
                                      "--out", out, "--quiet")
    assert status == 0, err[-3000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    measured = [r for r in records if r["kind"] == "measurement"]
    # 10 operators x 3 frameworks, plus the two C++ kernels on their own operators.
    assert len(measured) == 32 and all(r["passed"] for r in measured)
    kernels = sorted(r["configuration"]["framework"] for r in measured
                     if "cpp_kernel" in r["configuration"])
    assert kernels == ["cpp-relu", "cpp-softmax"]
    assert {r["kind"] for r in records} == {"measurement", "skipped"}
    assert (out / "report.html").is_file() and (out / "report.md").is_file()


@pytest.mark.slow
def test_training_recipe_runs_from_the_command_line(tmp_path, repo_root, monkeypatch, capsys):
    """The main job's training part: every executor and optimizer reaches 95% test
    accuracy on digits (the recipe's acceptance threshold)."""
    out = tmp_path / "training"
    status, printed, err = python_m_deep500(monkeypatch, capsys, "run",
                                            repo_root / "recipes" / "training.yaml",
                                            "--out", out, "--quiet")
    assert status == 0, printed[-3000:] + err[-3000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    measured = [r for r in records if r["kind"] == "measurement"]
    assert len(measured) == 10 and all(r["passed"] for r in measured)
    assert "Level 2 — training" in (out / "report.md").read_text()


def test_a_rank_failure_is_recorded_only_in_a_running_manifest(tmp_path):
    from deep500.results.files import mark_run_failed, write_manifest
    write_manifest(str(tmp_path), {"status": "running", "configurations": 3})
    mark_run_failed(str(tmp_path), 2, "Traceback (most recent call last):\n  ...\n"
                                      "ValueError: broken on purpose\n")
    manifest = read_manifest(str(tmp_path))
    assert manifest["status"] == "failed" and manifest["configurations"] == 3
    assert manifest["failure"]["rank"] == 2
    assert manifest["failure"]["error"] == "ValueError: broken on purpose"
    assert not list(tmp_path.glob("*.tmp"))
    write_manifest(str(tmp_path), {"status": "complete"})
    mark_run_failed(str(tmp_path), 1, "late")   # a finished run stays as it finished
    assert read_manifest(str(tmp_path)) == {"status": "complete"}
