"""The deep500 command: info, run with bad input, report."""
import subprocess
import sys


def deep500(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "deep500", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_info_lists_versions_and_hardware():
    completed = deep500("info")
    assert completed.returncode == 0, completed.stderr
    for expected in ("python", "numpy", "onnx", "torch", "tensorflow", "mpi_library",
                     "CPU", "cores", "GPU", "torch_intra_op"):
        assert expected in completed.stdout, expected
    assert "MPICH" in completed.stdout


def test_info_json_is_machine_readable():
    import json
    completed = deep500("info", "--json")
    info = json.loads(completed.stdout)
    assert info["versions"]["numpy"] and info["hardware"]["logical_cpus"] >= 1


def test_bad_recipe_exits_2_with_a_message_and_writes_nothing(tmp_path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("mutable:\n  framework: [reference]\n  operator: [{op: Relu, shape: [2]}]\n"
                      "fixed: {framework: pytorch}\n")
    out = tmp_path / "out"
    completed = deep500("run", str(recipe), "--out", str(out))
    assert completed.returncode == 2
    assert "deep500: error: bad.yaml: ['framework'] are both fixed and mutable" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert not out.exists()


def test_missing_recipe_file(tmp_path):
    completed = deep500("run", str(tmp_path / "nope.yaml"))
    assert completed.returncode == 2 and "does not exist" in completed.stderr


def test_report_rebuilds_from_a_run_folder(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("fixed: {framework: reference}\nmutable:\n"
                      "  operator: [{op: Relu, shape: [5, 5]}]\n"
                      "metrics: {WallclockTime: {reruns: 6, warmup: 0}}\n")
    out = tmp_path / "out"
    assert deep500("run", str(recipe), "--out", str(out), "--quiet").returncode == 0
    (out / "report.md").unlink()
    completed = deep500("report", str(out))
    assert completed.returncode == 0 and (out / "report.md").is_file()
