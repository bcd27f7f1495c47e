"""Without MPI: a rank's watcher records how its rank ended and ends the same way
(:mod:`deep500.lv3_distributed.rank_watch`), and the launcher turns the endings, the
manifest on disk and ``mpirun``'s status into the run's final status
(:func:`deep500.recipe.run_endings.job_ending`). The same under real ``mpirun``:
``test_run_endings_mpi.py``."""
import os
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest

from deep500.lv3_distributed.rank_watch import describe, read_endings, watched
from deep500.recipe.run_endings import job_ending


def _watch(tmp_path, code, rank="1"):
    endings = tmp_path / "endings.jsonl"
    command = [sys.executable, *watched([sys.executable, "-c", code], str(endings))]
    process = subprocess.run(command, env={**os.environ, "PMI_RANK": rank},
                             capture_output=True, text=True, timeout=60)
    return process.returncode, read_endings(str(endings)), endings


def test_a_rank_that_exits_0_leaves_no_ending(tmp_path):
    status, endings, path = _watch(tmp_path, "print('measured')")
    assert status == 0 and endings == [] and not path.exists()


def test_an_exit_status_is_recorded_and_given_back(tmp_path):
    status, endings, _ = _watch(tmp_path, "import os; os._exit(3)")
    assert status == 3
    (ending,) = endings
    assert (ending["rank"], ending["status"]) == (1, 3) and "signal" not in ending
    assert describe(ending).endswith("exited with status 3")


@pytest.mark.parametrize("number", [signal.SIGKILL, signal.SIGSEGV])
def test_a_signal_is_recorded_and_the_watcher_ends_by_it_too(tmp_path, number):
    status, endings, _ = _watch(tmp_path, f"import os; os.kill(os.getpid(), {int(number)})",
                                rank="0")
    assert status == -number  # mpirun sees what it would have seen
    (ending,) = endings
    assert (ending["rank"], ending["signal"]) == (0, number)
    assert describe(ending).endswith(f"was ended by signal {int(number)} "
                                     f"({signal.Signals(number).name})")


def test_sigterm_to_the_watcher_reaches_its_rank(tmp_path):
    endings = tmp_path / "endings.jsonl"
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n")
    process = subprocess.Popen([sys.executable, *watched([sys.executable, "-c", code],
                                                         str(endings))],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 143  # the rank's own handler ended it
    assert [e["status"] for e in read_endings(str(endings))] == [143]


def _folder(tmp_path, status="running", **fields):
    return SimpleNamespace(path=str(tmp_path), manifest={"status": status, **fields})


KILLED = {"rank": 1, "pid": 42, "host": "h", "signal": 9, "time": 2.0}
EXITED = {"rank": 0, "pid": 41, "host": "h", "status": 143, "time": 1.0}


def test_a_job_that_ran_needs_no_final_status_from_the_launcher(tmp_path, capsys):
    assert job_ending(_folder(tmp_path), 0, [], 2) is None
    assert job_ending(_folder(tmp_path), 1, [{**EXITED, "status": 1}], 2) is None
    assert capsys.readouterr().err == ""


def test_a_failure_the_ranks_recorded_is_kept(tmp_path):
    folder = _folder(tmp_path, "timed_out", failure={"rank": 1})
    assert job_ending(folder, 124, [], 2) == ("timed_out",)


def test_a_silent_rank_is_named_once_and_is_the_failure(tmp_path, capsys):
    status, fields = job_ending(_folder(tmp_path), 9, [EXITED, KILLED], 2)
    assert status == "failed"
    failure = fields["failure"]
    assert (failure["rank"], failure["signal"], failure["pid"]) == (1, 9, 42)
    assert failure["error"] == "rank 1 (pid 42 on h) was ended by signal 9 (SIGKILL)"
    # rank 0 ended with SIGTERM's status, which deep500 gives with a message of its own
    assert capsys.readouterr().err.splitlines() == [
        f"deep500: rank 1 (pid 42 on h) was ended by signal 9 (SIGKILL), without "
        f"recording why; results written before it are kept in {tmp_path}"]


def test_mpirun_failing_without_any_rank_ending_says_so(tmp_path):
    status, fields = job_ending(_folder(tmp_path), 255, [], 4)
    assert status == "failed" and fields["failure"]["rank"] is None
    assert fields["failure"]["error"] == ("mpirun -np 4 exited with status 255 without "
                                          "recording a failure")
