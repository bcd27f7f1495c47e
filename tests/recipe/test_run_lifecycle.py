"""A run folder's life: one run per folder (a lock, --append sessions), a manifest built
fast and first, finished as ``interrupted`` on SIGTERM and SIGINT with the counts of what
is on disk, reported as interrupted when its process died, a per-configuration timeout;
and ``deep500 report`` on folders that are not runs."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from deep500.cli import main
from deep500.recipe import run_recipe
from deep500.results.files import (RunFolderError, append_record, read_manifest,
                                    read_results)
from deep500.recipe.watchdog import Watchdog
from deep500.utils.interrupts import Interrupted, deferred, signals_raise
from tests.recipe.test_run_endings_mpi import finished_stored_and_reported

REPO = Path(__file__).resolve().parents[2]
FAULTS = Path(__file__).parent / "scripts" / "run_with_faults.py"

QUICK = textwrap.dedent("""
    name: quick
    fixed: {framework: reference}
    mutable:
      operator: [{op: Relu, shape: [5, 5]}, {op: Relu, shape: [64, 256]}]
      threads: [1, 2]
    metrics: {WallclockTime: {reruns: 5, warmup: 0}}
""")

# Twelve configurations of about 0.2-0.5 s each: a run that can be stopped midway.
SLOW = textwrap.dedent("""
    name: slow
    fixed: {framework: reference, threads: 1}
    mutable:
      operator: [{op: Gemm, inputs: [[512, 512], [512, 512]]}]
      seed: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    metrics: {WallclockTime: {reruns: 100, warmup: 0}}
""")


def _recipe(tmp_path, text, name="recipe.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _environment():
    env = {k: v for k, v in os.environ.items()
           if k not in ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_PORT", "DEEP500_MPI_FORKED")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    return env


def _start(*args, program=("-m", "deep500"), env=None):
    return subprocess.Popen([sys.executable, *program, *map(str, args)], cwd=REPO,
                            env=env or _environment(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.02)


def _lines(out):
    path = out / "results.jsonl"
    return path.read_text().count("\n") if path.is_file() else 0


# --- one run per folder ------------------------------------------------------------

def test_a_folder_holding_a_run_is_refused_unless_appended(tmp_path):
    recipe, out = _recipe(tmp_path, QUICK), tmp_path / "out"
    first = run_recipe(recipe, str(out), progress=False, write_report=False)
    assert first.measurements == 4
    with pytest.raises(RunFolderError) as refused:
        run_recipe(recipe, str(out), progress=False, write_report=False)
    message = str(refused.value)
    assert "is not empty (.deep500.lock" not in message  # the lock is not content
    assert "results.jsonl" in message and "--append" in message and "new folder" in message
    assert len(read_results(str(out))) == 4  # nothing was written by the refused run

    run_recipe(recipe, str(out), progress=False, write_report=False, append=True)
    run_recipe(recipe, str(out), progress=False, write_report=False, append=True)
    records = read_results(str(out))
    assert [r["index"] for r in records] == list(range(12))  # indices never collide
    assert [r["session"] for r in records] == [0] * 4 + [1] * 4 + [2] * 4
    manifest = read_manifest(str(out))
    assert manifest["session"] == 2 and manifest["first_index"] == 8
    assert [s["session"] for s in manifest["sessions"]] == [0, 1]
    assert all(s["status"] == "complete" for s in manifest["sessions"])
    assert manifest["records"] == 4 and manifest["configurations_recorded"] == 4
    assert "sessions" not in manifest["sessions"][1]  # history is flat, not nested


def test_a_non_empty_folder_exits_2_from_the_command_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    completed = subprocess.run([sys.executable, "-m", "deep500", "run",
                                _recipe(tmp_path, QUICK), "--out", str(out)],
                               capture_output=True, text=True, timeout=120, cwd=REPO,
                               env=_environment())
    assert completed.returncode == 2, completed.stderr
    assert f"deep500: error: {out} is not empty (notes.txt)" in completed.stderr
    assert "give a new folder with --out, or add --append" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # left untouched


@pytest.mark.slow
def test_two_runs_into_one_folder_one_runs_the_other_exits_2(tmp_path):
    out = tmp_path / "out"
    first = _start("run", _recipe(tmp_path, SLOW, "slow.yaml"), "--out", out, "--quiet")
    try:
        # the second starts while the first holds the folder, mid-run
        _wait_for(lambda: (out / "manifest.json").is_file(), 120, "the first run's manifest")
        second = _start("run", _recipe(tmp_path, QUICK, "quick.yaml"), "--out", out)
        _, second_err = second.communicate(timeout=120)
        _, first_err = first.communicate(timeout=300)
    finally:
        first.kill()
    assert first.returncode == 0, first_err
    assert second.returncode == 2, second_err
    assert (f"deep500: error: {out} is in use by another deep500 run (process {first.pid} "
            f"on ") in second_err, second_err
    records = read_results(str(out))
    assert len(records) == 12
    assert {r["configuration"]["operator"]["op_type"] for r in records} == {"Gemm"}
    assert read_manifest(str(out))["recipe"]["name"] == "slow"


# --- the manifest: fast, first, with what is known -----------------------------------

def test_the_manifest_is_built_in_well_under_a_second_without_importing_frameworks(
        tmp_path):
    recipe = _recipe(tmp_path, QUICK)
    script = textwrap.dedent(f"""
        import json, sys, time
        from deep500.recipe.manifest import run_manifest
        from deep500.recipe.schema import load_recipe
        recipe = load_recipe({recipe!r})
        started = time.perf_counter()
        manifest = run_manifest(recipe, ["deep500"], 1, recipe.configurations())
        seconds = time.perf_counter() - started
        print(json.dumps({{"seconds": seconds, "torch": "torch" in sys.modules,
                          "tensorflow": "tensorflow" in sys.modules,
                          "threads": manifest["threads"]}}))
    """)
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True,
                               text=True, timeout=120, cwd=REPO, env=_environment())
    assert completed.returncode == 0, completed.stderr
    measured = json.loads(completed.stdout.splitlines()[-1])
    assert not measured["torch"] and not measured["tensorflow"]
    assert measured["seconds"] < 1.0, measured  # importing both took 11.3 s
    assert "torch_intra_op" not in measured["threads"]["in_force_at_start"]


@pytest.mark.slow
def test_thread_settings_of_a_framework_are_recorded_once_it_is_loaded(tmp_path):
    pytest.importorskip("torch")
    recipe = _recipe(tmp_path, QUICK.replace("framework: reference", "framework: pytorch"))
    out = tmp_path / "out"
    run_recipe(recipe, str(out), progress=False, write_report=False)
    threads = read_manifest(str(out))["threads"]
    # at start where checking the recipe imported it, else once a measurement did
    known = {**threads["in_force_at_start"], **threads.get("in_force_after_loading", {})}
    assert known["torch_intra_op"] in (1, 2)


def test_the_progress_bar_names_the_configuration(tmp_path, capsys):
    run_recipe(_recipe(tmp_path, QUICK), str(tmp_path / "out"), progress=True,
               write_report=False)
    err = capsys.readouterr().err
    for label in ("Relu 5x5 | reference | threads=1", "Relu 64x256 | reference | threads=2"):
        assert label in err, err


# --- stopped runs ----------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_mid_run_finishes_the_manifest_as_interrupted(tmp_path, signum, status):
    out = tmp_path / "out"
    process = _start("run", _recipe(tmp_path, SLOW), "--out", out)
    try:
        _wait_for(lambda: _lines(out) >= 2, 120, "two records")
        process.send_signal(signum)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == status, err
    assert f"deep500: interrupted (interrupted by {signal.Signals(signum).name}); " \
           f"results measured so far are on disk" in err
    assert "Traceback" not in err
    records = read_results(str(out))
    manifest = read_manifest(str(out))
    assert manifest["status"] == "interrupted"
    assert 2 <= len(records) < 12, len(records)  # stopped midway
    # the counts are what is on disk, not what was planned
    assert manifest["records"] == manifest["measurements"] == len(records)
    assert manifest["configurations_recorded"] == len({r["index"] for r in records})
    assert manifest["records_by_kind"] == {"measurement": len(records)}
    assert manifest["configurations"] == 12
    assert _lines(out) == len(records)  # no line cut in two
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert (f"| Status | interrupted; {len(records)} of 12 configurations recorded |"
            in report), report


@pytest.mark.slow
def test_a_killed_run_is_reported_as_interrupted(tmp_path):
    out = tmp_path / "out"
    process = _start("run", _recipe(tmp_path, SLOW), "--out", out, "--quiet")
    try:
        _wait_for(lambda: _lines(out) >= 1, 120, "a record")
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
    finally:
        process.kill()
    manifest = read_manifest(str(out))
    assert manifest["status"] == "running"  # nobody could finish it
    assert manifest["process"]["pid"] == process.pid
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert (f"| Status | interrupted (process {process.pid} on "
            f"{manifest['process']['hostname']} ended without finishing the manifest)"
            in report), report
    assert read_manifest(str(out))["status"] == "running"  # the report is only a view
    # the folder is free again, for --append
    run_recipe(_recipe(tmp_path, QUICK, "quick.yaml"), str(out), progress=False,
               write_report=False, append=True)
    history = read_manifest(str(out))["sessions"]
    assert history[0]["status"] == "interrupted" and "ended without" in history[0][
        "status_note"]


def test_a_live_run_is_reported_as_running(tmp_path):
    from deep500.results.files import process_identity, run_status
    assert run_status({"status": "running", "process": process_identity()}) == (
        "running", None)
    elsewhere = {**process_identity(), "hostname": "another-host"}
    status, why = run_status({"status": "running", "process": elsewhere})
    assert status == "running" and "cannot be checked from this host" in why
    reused = {**process_identity(), "started": process_identity()["started"] - 3600}
    assert run_status({"status": "running", "process": reused})[0] == "interrupted"


@pytest.mark.slow
def test_a_timeout_ends_a_single_process_run_and_keeps_what_was_measured(tmp_path):
    recipe = _recipe(tmp_path, QUICK.replace("{op: Relu, shape: [64, 256]}",
                                             "{op: Exp, shape: [8, 8]}") + "timeout: 2\n")
    out = tmp_path / "out"
    started = time.monotonic()
    database = tmp_path / "runs.db"
    process = _start("run", recipe, "--out", out, "--quiet", "--db", database,
                     program=[str(FAULTS)], env={**_environment(), "FAULT_RANK": "0"})
    try:
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    elapsed = time.monotonic() - started
    assert process.returncode == 124, err
    assert ("deep500: timeout: configuration 2 (Exp 8x8 | reference | threads=1) did not "
            "finish within 2 s on rank 0") in err
    records = read_results(str(out))
    assert [(r["index"], r["kind"]) for r in records] == [
        (0, "measurement"), (1, "measurement"), (2, "error")]
    assert records[2]["timeout"] is True and records[2]["timeout_s"] == 2
    assert records[2]["error"].startswith("TimeoutError: configuration 2 (Exp 8x8")
    manifest = read_manifest(str(out))
    assert manifest["status"] == "timed_out" and manifest["failure"]["index"] == 2
    assert manifest["records"] == 3 and manifest["configurations_recorded"] == 3
    # finished, stored and reported by the watchdog before the process ended
    finished_stored_and_reported(out, database, "timed_out")
    assert elapsed < 60  # the sleeping configuration alone would take an hour


def test_the_watchdog_fires_only_past_the_timeout():
    fired = []
    watchdog = Watchdog(0.3, lambda what, seconds: fired.append((what, seconds)))
    try:
        with watchdog.watch("quick"):
            time.sleep(0.05)
        time.sleep(0.4)
        assert fired == []
        with watchdog.watch("slow"):
            time.sleep(0.6)
        assert [what for what, _ in fired] == ["slow"]
        assert 0.3 <= fired[0][1] < 0.6
    finally:
        watchdog.close()
    watchdog._thread.join(timeout=2)
    assert not watchdog._thread.is_alive()


# --- signals, lines ---------------------------------------------------------------

def test_sigterm_raises_interrupted_and_waits_out_a_deferred_block():
    before = signal.getsignal(signal.SIGTERM)
    with signals_raise():
        with pytest.raises(Interrupted) as raised:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        assert raised.value.exit_status == 143
        done = []
        with pytest.raises(Interrupted):
            with deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                done.append(True)  # the block finishes before the signal is raised
        assert done == [True]
    assert signal.getsignal(signal.SIGTERM) is before


def test_records_appended_by_several_processes_never_interleave(tmp_path):
    import multiprocessing
    context = multiprocessing.get_context("fork")
    payload = "x" * 200_000  # far beyond a pipe's atomic size and stdio's buffer
    workers = [context.Process(target=_append_many, args=(str(tmp_path), w, payload))
               for w in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3 * 20
    records = [json.loads(line) for line in lines]
    assert all(r["payload"] == payload for r in records)
    assert sorted((r["rank"], r["index"]) for r in records) == [
        (w, i) for w in range(3) for i in range(20)]


def _append_many(output_dir, rank, payload):
    for index in range(20):
        append_record(output_dir, {"kind": "measurement", "rank": rank, "index": index,
                                   "payload": payload})


def test_a_rank_ending_the_job_holds_the_manifest_so_no_record_goes_uncounted(tmp_path):
    """The race behind a hung collective's two watchdogs: rank 0 ends the job
    (MPI_Abort) while rank 1 records its own error. Rank 0 holds the manifest's lock
    until it dies, so rank 1 waits; once rank 0 is dead, rank 1 adds nothing (it may be
    killed at any moment), and the counts match the disk."""
    import multiprocessing
    from deep500.results.files import (configuration_in_progress, hold_until_the_job_ends,
                                       record_counts, record_failure, write_manifest)
    folder = str(tmp_path)
    append_record(folder, {"kind": "measurement", "rank": 0, "index": 0})
    write_manifest(folder, {"status": "running", "session": 0,
                            **record_counts(read_results(folder))})
    context = multiprocessing.get_context("fork")
    holding, go = context.Event(), context.Event()

    def end_the_job():
        hold_until_the_job_ends(folder, 0)
        holding.set()
        go.wait(30)
        os._exit(124)                          # as MPI_Abort ends it, lock held

    def record_late():
        with configuration_in_progress(folder, {"index": 1, "label": "hangs",
                                                "level": 3}):
            record_failure(folder, 1, "TimeoutError: late", status="timed_out")

    ender = context.Process(target=end_the_job)
    ender.start()
    assert holding.wait(30)
    late = context.Process(target=record_late)
    late.start()
    late.join(0.5)
    assert late.is_alive()                     # waits for the ending rank's lock
    go.set()
    ender.join(30)
    late.join(30)
    assert late.exitcode == 0
    manifest = read_manifest(folder)
    assert manifest["job_ended_by"] == 0
    assert manifest["records"] == len(read_results(folder)) == 1


# --- deep500 report on folders that are not runs, --version --------------------------

def _corrupt(tmp_path, case):
    folder = tmp_path / case
    if case == "missing":
        return folder, "no such folder"
    if case == "a file":
        folder.write_text("x")
        return folder, "is not a folder"
    folder.mkdir()
    if case == "empty":
        return folder, "is not a run folder: it has neither manifest.json nor results.jsonl"
    if case == "manifest not JSON":
        (folder / "manifest.json").write_text("{not json")
        return folder, "manifest.json is not valid JSON"
    if case == "manifest a list":
        (folder / "manifest.json").write_text("[1, 2]")
        return folder, "a manifest is a JSON object, got list"
    if case == "records not deep500's":
        (folder / "results.jsonl").write_text(json.dumps(
            {"kind": "measurement", "level": 2, "index": 0, "configuration": {},
             "result": {}}) + "\n")
        return folder, "its records are not what 'deep500 run' writes (KeyError: "
    (folder / "results.jsonl").write_bytes(b"\x00\xffgarbage\n[1, 2]\n{\"no\": \"kind\"}\n"
                                           b"{\"kind\": \"measurement\"}\n{}\n")
    return folder, "line(s) 1, 2, 3, 4, 5 are not results (one JSON object per line"


@pytest.mark.parametrize("case", ["missing", "a file", "empty", "manifest not JSON",
                                  "manifest a list", "results garbage",
                                  "records not deep500's"])
def test_report_on_a_folder_that_is_not_a_run_exits_2(tmp_path, capsys, case):
    folder, message = _corrupt(tmp_path, case)
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("deep500: error: ") and message in err, err
    assert "Traceback" not in err


def test_report_keeps_a_run_whose_last_line_was_cut_by_a_crash(tmp_path):
    out = tmp_path / "out"
    run_recipe(_recipe(tmp_path, QUICK), str(out), progress=False, write_report=False)
    with open(out / "results.jsonl", "a") as handle:
        handle.write('{"kind": "measurement", "ind')
    assert main(["report", str(out)]) == 0
    assert "4 configurations measured" in (out / "report.md").read_text()


def test_version(capsys):
    import deep500
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"deep500 {deep500.__version__}"


def test_the_second_rank_failing_brings_the_manifest_counts_up_to_date(tmp_path):
    """Both ranks of a hung collective time out: each writes its error record; the
    manifest keeps the first failure and counts both records (as the disk holds them)."""
    from deep500.results.files import (configuration_in_progress, read_results,
                                        record_failure, write_manifest)
    out = str(tmp_path)
    write_manifest(out, {"status": "running", "session": 0})
    append_record(out, {"kind": "measurement", "index": 0, "rank": 0, "session": 0})
    header = {"index": 1, "label": "Hangs | reference", "session": 0}
    with configuration_in_progress(out, header):
        record_failure(out, 1, "TimeoutError: rank 1", status="timed_out")
        record_failure(out, 0, "TimeoutError: rank 0", status="timed_out")
    manifest = read_manifest(out)
    assert manifest["status"] == "timed_out" and manifest["failure"]["rank"] == 1
    assert manifest["records"] == len(read_results(out)) == 3
    assert manifest["records_by_kind"] == {"measurement": 1, "error": 2}
