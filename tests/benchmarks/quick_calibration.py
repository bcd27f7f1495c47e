"""The smoke tests of benchmarks that calibrate before they measure (lv3_simulator,
lv3_overlap) are handed the session's quick calibration (``quick_machine`` in
tests/conftest.py) as ``--machine``: a calibration is most of such a run. What each
benchmark would have run instead is checked here, without running it: its ``calibrate``
helper must ask for the same quick 2-rank calibration as the session's."""
import importlib.util
import os
import pathlib
import sys

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


def calibration_command(name, monkeypatch, tmp_path, *arguments):
    """The command line that ``benchmarks/<name>.py``'s ``calibrate(folder, *arguments)``
    runs, captured in place of running it, and the machine file it returns. The module's
    import-time settings (OMP_NUM_THREADS, sys.path) are undone afterwards."""
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}",
                                                  BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    commands = []
    monkeypatch.setattr(module.subprocess, "run",
                        lambda command, **options: commands.append(command))
    machine = module.calibrate(str(tmp_path), *arguments)
    assert len(commands) == 1
    return commands[0], machine


def same_as_the_sessions(command, machine, folder) -> bool:
    """``command`` is ``deep500 calibrate --np 2 --quick --quiet --out <folder>/...``
    writing ``machine``, as quick_machine runs it."""
    assert command[:3] == [sys.executable, "-m", "deep500"], command
    out = command[command.index("--out") + 1]
    assert out == machine and os.path.dirname(out) == str(folder), command
    rest = command[3:command.index("--out")] + command[command.index("--out") + 2:]
    return sorted(rest) == sorted(["calibrate", "--np", "2", "--quick", "--quiet"])
