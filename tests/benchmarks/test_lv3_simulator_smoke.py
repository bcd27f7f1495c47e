"""benchmarks/lv3_simulator.py runs end to end: ``--smoke``, given the session's quick
calibration (``--machine``; tests/benchmarks/quick_calibration.py), profiles the
distributed recipe's model, measures it with ``deep500 run --np 1`` and ``--np 2``, and
prints predicted and measured step times per configuration with the error line last.
The 10% target is not asserted (timings belong to the benchmark); that the predicted
and measured times are of one order is (a wrong unit or a missing phase would be off
by far more)."""
import re
import subprocess
import sys

import pytest

from tests.benchmarks.quick_calibration import (calibration_command,
                                                same_as_the_sessions)
from tests.benchmarks.run_time_line import says_expected_run_time_first

LAST = re.compile(r"^simulator step-time error: (\d+\.\d)%$")
ROW = re.compile(r"^\s*(\d)\s+(\d+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+"
                 r"([\d.]+)\s+([\d.]+)\s+([\d.]+)$", re.M)


@pytest.mark.mpi
@pytest.mark.slow
def test_smoke_prints_every_configuration_and_the_error_last(repo_root, quick_machine):
    script = repo_root / "benchmarks" / "lv3_simulator.py"
    calibrated, machine = quick_machine  # what --smoke would calibrate (tests/conftest.py)
    assert calibrated.returncode == 0, calibrated.stderr[-3000:]
    done = subprocess.run([sys.executable, str(script), "--smoke", "--machine", str(machine)],
                          capture_output=True, text=True, timeout=400, cwd=repo_root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert says_expected_run_time_first(done.stdout), done.stdout[:1000]
    rows = ROW.findall(done.stdout)
    assert {(r[0], r[2]) for r in rows} == {("1", "(none)"), ("2", "ring"), ("2", "mpi")}
    for row in rows:
        predicted, measured, ratio = float(row[7]), float(row[8]), float(row[9])
        assert predicted > 0 and measured > 0
        assert ratio == pytest.approx(predicted / measured, abs=0.011)
        assert 0.1 < ratio < 10, done.stdout
    last = done.stdout.strip().splitlines()[-1]
    assert LAST.match(last), last


def test_smoke_without_a_machine_file_calibrates_as_the_session_does(monkeypatch, tmp_path):
    command, machine = calibration_command("lv3_simulator", monkeypatch, tmp_path, True)
    assert same_as_the_sessions(command, machine, tmp_path), command
