"""``deep500 run --np 2`` outlives its ``mpirun`` job and finishes the run however the
job ends: a rank killed (SIGKILL), crashing (SIGSEGV) or leaving with ``os._exit(3)``
without a word is named in one line and in the manifest's ``failure``; a stopped rank
(SIGSTOP) ends the job after the recipe's timeout; SIGTERM to a rank ends the run
``interrupted``. Each ends with a finished manifest whose counts are the records on
disk, the run stored in the results database, and a report.

The faults are those of ``scripts/run_with_faults.py`` (its ranks run it too)."""
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

from deep500.recipe.run_endings import ENDINGS_FILE
from deep500.results.files import read_manifest, read_results
from deep500.store import Database
from tests.lv3_distributed.mpi_helpers import run_program

FAULTS = Path(__file__).parent / "scripts" / "run_with_faults.py"

OPERATORS = textwrap.dedent("""
    name: ops
    fixed: {framework: reference, threads: 1}
    mutable:
      operator: [{op: Relu, shape: [8, 8]}, %s, {op: Sigmoid, shape: [8, 8]}]
    metrics: {WallclockTime: {reruns: 5, warmup: 0}}
""")


def _launch(tmp_path, fault, fault_rank=1, extra=""):
    path = tmp_path / "recipe.yaml"
    path.write_text(OPERATORS % fault + extra)
    out, database = tmp_path / "out", tmp_path / "runs.db"
    command = [sys.executable, str(FAULTS), "run", "--np", "2", str(path), "--out",
               str(out), "--quiet", "--db", str(database)]
    settings = {"FAULT_RANK": str(fault_rank), "FAULT_AFTER_RECORDS": str(out)}
    previous = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        status, output, _ = run_program(command, timeout=180)
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name)
            else:
                os.environ[name] = value
    return status, output, out, database


def finished_stored_and_reported(out, database, status):
    """The run's manifest is final (``status``, its end time, counts equal to the
    records on disk), the database holds it, and its report is written."""
    manifest, records = read_manifest(str(out)), read_results(str(out))
    assert manifest["status"] == status, manifest
    assert "finished" in manifest and "duration_s" in manifest
    assert manifest["records"] == len(records)
    assert manifest["configurations_recorded"] == len({r["index"] for r in records})
    with Database(str(database), create=False) as stored:
        (run,) = stored.runs()
        assert run["folder"] == os.path.realpath(out)
        assert (run["status"], run["records"]) == (status, len(records))
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
    assert not (out / ENDINGS_FILE).exists()
    return manifest, records


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("fault, rank, ending, field", [
    ("{op: Neg, shape: [8, 8]}", 0, "was ended by signal 9 (SIGKILL)", {"signal": 9}),
    ("{op: Abs, shape: [8, 8]}", 1, "exited with status 3", {"status": 3}),
    ("{op: Floor, shape: [8, 8]}", 1, "was ended by signal 11 (SIGSEGV)",
     {"signal": 11}),
])
def test_a_rank_dying_without_a_word_is_named_and_the_run_finished(tmp_path, fault, rank,
                                                                  ending, field):
    status, output, out, database = _launch(tmp_path, fault, fault_rank=rank)
    assert status not in (0, 1), output
    said = re.findall(rf"deep500: rank {rank} \(pid \d+ on \S+\) {re.escape(ending)}, "
                      rf"without recording why", output)
    assert len(said) == 1, output
    manifest, records = finished_stored_and_reported(out, database, "failed")
    failure = manifest["failure"]
    assert failure["rank"] == rank and ending in failure["error"], failure
    assert {k: failure[k] for k in field} == field
    assert manifest["rank_endings"][0]["rank"] == rank
    # the first configuration was measured on both ranks before the fault
    assert [(r["index"], r["rank"], r["kind"]) for r in records][:2] == [
        (0, 0, "measurement"), (0, 1, "measurement")]
    assert all(r["index"] < 2 for r in records)


@pytest.mark.mpi
@pytest.mark.slow
def test_a_stopped_rank_ends_the_job_after_the_timeout_and_the_run_is_finished(
        tmp_path):
    status, output, out, database = _launch(tmp_path, "{op: Ceil, shape: [8, 8]}",
                                            extra="timeout: 3\n")
    assert status == 124, output
    assert "rank(s) [1] did not finish within 3 s" in output
    manifest, records = finished_stored_and_reported(out, database, "timed_out")
    assert manifest["failure"]["rank"] == 1 and manifest["failure"]["index"] == 1
    (error,) = [r for r in records if r["kind"] == "error"]
    assert (error["index"], error["rank"], error["timeout"]) == (1, 1, True)


@pytest.mark.mpi
@pytest.mark.slow
def test_sigterm_to_a_rank_ends_the_run_interrupted_with_the_signal(tmp_path):
    status, output, out, database = _launch(tmp_path, "{op: Reciprocal, shape: [8, 8]}")
    assert status == 143, output
    manifest, _ = finished_stored_and_reported(out, database, "interrupted")
    assert manifest["signal"] == "SIGTERM"
    assert manifest["failure"]["rank"] == 1
    assert "without recording why" not in output  # the rank said why
