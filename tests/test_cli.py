"""The deep500 command: info, run with bad input, report, build-glue."""
import os
import subprocess
import sys


def deep500(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "deep500", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_info_lists_versions_and_hardware(capsys):
    from deep500.cli import main
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for expected in ("python", "numpy", "onnx", "torch", "tensorflow", "mpi_library",
                     "CPU", "cores", "GPU", "OMP_NUM_THREADS", "info --frameworks"):
        assert expected in out, expected
    assert "MPICH" in out


def test_info_json_is_machine_readable(capsys):
    import json
    from deep500.cli import main
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
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


GLUE_NAMES = ("Deep500's PyTorch glue", "Deep500's TensorFlow kernel",
              "Deep500's TensorFlow eager glue")


def test_build_glue_builds_each_framework_glue_then_finds_it_cached(capsys):
    # In-process, into the session's cache: the tests that use the glue load these builds.
    from deep500.cli import main
    assert main(["build-glue"]) == 0
    first = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in first] == list(GLUE_NAMES)
    for line in first:
        assert os.path.isfile(line.rsplit(": ", 1)[1]), line
    assert main(["build-glue", "--framework", "tensorflow"]) == 0
    again = capsys.readouterr().out.splitlines()
    assert len(again) == 2 and all("found in the cache" in line for line in again)


def test_build_glue_without_a_compiler_says_what_failed(capsys, monkeypatch, tmp_path):
    from deep500.cli import main
    from deep500.lv0_operators import toolchain

    def no_compiler():
        raise toolchain.ToolchainError("No C++ compiler was found (test)")
    monkeypatch.setattr(toolchain, "find_cxx_compiler", no_compiler)
    monkeypatch.setenv("DEEP500_CACHE", str(tmp_path))  # nothing built there
    assert main(["build-glue"]) == 1
    errors = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in errors] == list(GLUE_NAMES)
    assert all("FAILED: No C++ compiler was found (test)" in line for line in errors)
