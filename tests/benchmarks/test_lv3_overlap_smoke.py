"""benchmarks/lv3_overlap.py runs end to end: ``--smoke``, given the session's quick
calibration (``--machine``; tests/benchmarks/quick_calibration.py), starts 2 ranks,
measures the exposed communication of both MLPs blocking and overlapped (here with
Deep500's non-blocking ring advanced by the progress thread), prints the simulator's
predictions next to them, and ends with the ``overlap hides X% of communication``
line. No figure is asserted (on 2 shared cores it is noise); that every row is there,
with finite numbers, and that the wide model forms more than one bucket, is."""
import re
import subprocess
import sys

import pytest

from tests.benchmarks.quick_calibration import (calibration_command,
                                                same_as_the_sessions)
from tests.benchmarks.run_time_line import says_expected_run_time_first

LAST = re.compile(r"^overlap hides (-?\d+)% of communication$")
ROW = re.compile(r"^(mlp .+?)\s+ring\s+(blocking|overlap/thread)\s+(-?[\d.]+)\s+([\d.]+)"
                 r"\s+([\d.]+)\s+rounds: .*?(?:; (\d+) buckets)?$", re.M)


@pytest.mark.mpi
@pytest.mark.slow
def test_smoke_prints_both_modes_per_model_and_the_verdict_last(repo_root, quick_machine):
    script = repo_root / "benchmarks" / "lv3_overlap.py"
    calibrated, machine = quick_machine  # what it would calibrate (tests/conftest.py)
    assert calibrated.returncode == 0, calibrated.stderr[-3000:]
    done = subprocess.run([sys.executable, str(script), "--smoke", "--algorithms", "ring",
                           "--progress", "thread", "--machine", str(machine)],
                          capture_output=True, text=True, timeout=400, cwd=repo_root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert says_expected_run_time_first(done.stdout), done.stdout[:1000]
    rows = ROW.findall(done.stdout)
    assert len(rows) == 4, done.stdout
    assert {(r[0].strip(), r[1]) for r in rows} == {
        (model, mode) for model in {r[0].strip() for r in rows}
        for mode in ("blocking", "overlap/thread")}
    for model, mode, exposed, predicted, step, buckets in rows:
        assert float(predicted) >= 0 and float(step) > 0
        if mode == "overlap/thread" and "wide" in model:
            assert int(buckets) >= 2
    last = done.stdout.strip().splitlines()[-1]
    assert LAST.match(last), last


def test_without_a_machine_file_it_calibrates_as_the_session_does(monkeypatch, tmp_path):
    command, machine = calibration_command("lv3_overlap", monkeypatch, tmp_path, None)
    assert same_as_the_sessions(command, machine, tmp_path), command
