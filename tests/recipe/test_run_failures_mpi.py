"""Under real ``mpirun -np 2``, results reach disk whichever rank fails first: the
manifest is written before any rank measures; a configuration raising on one rank is an
error record (and the run goes on where the ranks measure independently, or the job is
aborted after the failing rank recorded it where they measure together); a hung rank
ends the job after the recipe's ``timeout``; SIGTERM to ``deep500 run --np 2`` reaches
the ranks, and the launcher finishes, stores and reports the run as interrupted.

The faults are those of ``scripts/run_with_faults.py`` (a test-only wrapper of the
``deep500`` command), on rank 1."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from deep500.lv3_distributed import mpirun_executable
from deep500.results.files import read_manifest, read_results
from tests.recipe.test_run_endings_mpi import FAULTS, OPERATORS, finished_stored_and_reported
from tests.lv3_distributed.mpi_helpers import REPO, _environment, run_program

DISTRIBUTED = textwrap.dedent("""
    name: dist
    experiment: distributed
    fixed:
      dataset: {name: digits, normalize: standardize}
      network: {model: mlp, hidden: [16]}
      optimizer: {type: sgd, learning_rate: 0.1}
      batch_size: 16
      epochs: 1
      threads: 1
      seed: 0
    mutable:
      scheme: %s
    metrics: {TestAccuracy: {}}
""")


def _with_faults(tmp_path, recipe_text, *options, timeout=180):
    path = tmp_path / "recipe.yaml"
    path.write_text(recipe_text)
    out = tmp_path / "out"
    status, output, seconds = run_program(
        [mpirun_executable(), "-np", "2", sys.executable, str(FAULTS), "run", str(path),
         "--out", str(out), "--quiet", *options], timeout=timeout)
    return status, output, seconds, out


def _counts_match_the_disk(out):
    records = read_results(str(out))
    manifest = read_manifest(str(out))
    assert manifest["records"] == len(records)
    assert manifest["configurations_recorded"] == len({r["index"] for r in records})
    return records, manifest


@pytest.mark.mpi
def test_an_error_on_one_rank_is_an_error_record_and_the_run_goes_on(tmp_path):
    status, output, _, out = _with_faults(
        tmp_path, OPERATORS % "{op: Softmax, shape: [8, 8], axis: 1}")
    assert status == 1, output  # a configuration failed to run; the rest was measured
    assert "2 configurations measured, 1 failed to run" in output
    records, manifest = _counts_match_the_disk(out)
    assert sorted((r["index"], r["rank"], r["kind"]) for r in records) == [
        (0, 0, "measurement"), (0, 1, "measurement"),
        (1, 0, "measurement"), (1, 1, "error"),
        (2, 0, "measurement"), (2, 1, "measurement")]
    error = next(r for r in records if r["kind"] == "error")
    assert error["error"] == "ZeroDivisionError: Softmax fails on purpose"
    assert error["label"] == "Softmax 8x8 (axis=1) | reference"
    assert manifest["status"] == "complete" and manifest["mpi_ranks"] == 2


@pytest.mark.mpi
@pytest.mark.slow
def test_a_rank_failing_in_the_first_collective_step_keeps_manifest_and_error_record(
        tmp_path):
    status, output, _, out = _with_faults(
        tmp_path, DISTRIBUTED % '["FailsAtFirstStep", "ConsistentDecentralized"]')
    assert status != 0
    assert "rank 1 failed: Traceback" in output
    records, manifest = _counts_match_the_disk(out)
    assert [(r["index"], r["rank"], r["kind"]) for r in records] == [(0, 1, "error")]
    assert records[0]["error"] == "KeyError: 'FailsAtFirstStep fails on purpose'"
    assert manifest["status"] == "failed"
    assert manifest["failure"]["rank"] == 1 and manifest["failure"]["index"] == 0
    assert manifest["failure"]["error"] == "KeyError: 'FailsAtFirstStep fails on purpose'"
    assert "Traceback" in manifest["failure"]["traceback"]


@pytest.mark.mpi
@pytest.mark.slow
def test_a_rank_hanging_in_a_collective_ends_the_job_after_the_timeout(tmp_path):
    timeout = 8
    status, output, seconds, out = _with_faults(
        tmp_path, DISTRIBUTED % '["ConsistentDecentralized", "HangsAtFirstStep", '
                                '"InconsistentParameterServer"]' + f"timeout: {timeout}\n")
    assert status == 124, output
    assert f"did not finish within {timeout} s on rank" in output
    assert "configuration 1 (HangsAtFirstStep | reference)" in output
    records, manifest = _counts_match_the_disk(out)
    measured = [(r["index"], r["rank"]) for r in records if r["kind"] == "measurement"]
    assert measured == [(0, 0), (0, 1)]  # what was measured before is kept
    timed_out = [r for r in records if r["kind"] == "error"]
    assert timed_out and all(r["index"] == 1 and r["timeout"] is True for r in timed_out)
    assert manifest["status"] == "timed_out" and manifest["failure"]["index"] == 1
    # startup and the first scheme take a few seconds; the hung rank sleeps an hour
    assert seconds < timeout + 60, seconds


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("hang, who", [
    ("{op: Exp, shape: [8, 8]}", "on rank 1"),  # its own watchdog ends the job
    ("{op: Tanh, shape: [8, 8]}", "rank(s) [1] did not finish"),  # holds the GIL: rank 0
])
def test_a_rank_hanging_alone_ends_the_job_after_the_timeout(tmp_path, hang, who):
    timeout = 3
    status, output, seconds, out = _with_faults(tmp_path, OPERATORS % hang
                                                + f"timeout: {timeout}\n")
    assert status == 124, output
    assert who in output and f"within {timeout} s" in output, output
    records, manifest = _counts_match_the_disk(out)
    assert [(r["index"], r["rank"]) for r in records if r["kind"] == "measurement"
            ][:2] == [(0, 0), (0, 1)]
    (error,) = [r for r in records if r["kind"] == "error"]
    assert (error["index"], error["rank"], error["timeout"]) == (1, 1, True)
    assert manifest["status"] == "timed_out" and manifest["failure"]["rank"] == 1
    assert seconds < timeout + 40, seconds


@pytest.mark.mpi
def test_np_2_into_a_folder_in_use_or_not_empty_exits_2_on_every_rank(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_text("")
    path = tmp_path / "recipe.yaml"
    path.write_text(OPERATORS % "{op: Tanh, shape: [8, 8]}")
    status, output, _ = run_program([sys.executable, "-m", "deep500", "run", "--np", "2",
                                     str(path), "--out", str(out)], timeout=120)
    assert status == 2, output
    assert output.count(f"deep500: error: {out} is not empty (results.jsonl)") == 1, output
    assert "Abort" not in output and "Traceback" not in output
    assert (out / "results.jsonl").read_text() == ""


SLOW = textwrap.dedent("""
    name: slow
    fixed: {framework: reference, threads: 1}
    mutable:
      operator: [{op: Gemm, inputs: [[512, 512], [512, 512]]}]
      seed: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    metrics: {WallclockTime: {reruns: 100, warmup: 0}}
""")


@pytest.mark.mpi
@pytest.mark.slow
def test_sigterm_to_deep500_run_np_2_reaches_the_ranks(tmp_path):
    path = tmp_path / "slow.yaml"
    path.write_text(SLOW)
    out = tmp_path / "out"
    database = tmp_path / "runs.db"
    process = subprocess.Popen([sys.executable, "-m", "deep500", "run", "--np", "2",
                                str(path), "--out", str(out), "--quiet", "--db",
                                str(database)], cwd=REPO,
                               env=_environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        results = out / "results.jsonl"
        while not (results.is_file() and results.read_text().count("\n") >= 4):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)  # to deep500 alone, not to its group
        output, _ = process.communicate(timeout=60)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert process.returncode == 143, output
    assert "deep500: interrupted (interrupted by SIGTERM)" in output
    # deep500 run outlived mpirun: it finished, stored and reported the run
    manifest, records = finished_stored_and_reported(out, database, "interrupted")
    assert manifest["signal"] == "SIGTERM"
    assert 4 <= len(records) < 24  # stopped midway, what was written is counted
