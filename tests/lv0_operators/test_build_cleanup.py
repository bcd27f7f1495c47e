"""A build that is stopped leaves nothing behind: SIGTERM to ``deep500 compile`` while the
compiler runs ends CMake, make and the compiler (they run in a process group of their
own, killed as a whole) and removes the temporary build folder; what a killed process
left is removed by the next build."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from deep500.lv0_operators.cpp_compiler import remove_stale_temporaries
from deep500.lv0_operators.toolchain import find_cmake, find_cxx_compiler
from deep500.utils.errors import Deep500Error


def _toolchain_or_skip():
    try:
        find_cmake()
        find_cxx_compiler()
    except Deep500Error as exc:
        pytest.skip(f"no C++ toolchain: {exc}")


def _slow_source(path):
    # 6000 optimised loops: about 20 s of compiling on a 2-core machine; the test
    # stops it within a second of the compiler starting.
    path.write_text("\n".join(
        f"double f{i}(const double* x, int n) {{ double s = 0; for (int j = 0; j < n; ++j) "
        f"s += x[j] * {i} + s / (j + {i + 1}); return s; }}" for i in range(6000)) + "\n")


def _compiling(process, source_name):
    for child in process.children(recursive=True):
        try:
            if any(source_name in part for part in child.cmdline()[1:]):
                return True
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return False


@pytest.mark.slow
def test_sigterm_while_compiling_leaves_no_process_and_no_temporary_folder(tmp_path):
    _toolchain_or_skip()
    source = tmp_path / "slow_source.cpp"
    _slow_source(source)
    output = tmp_path / "build" / "slow"
    env = {**os.environ, "DEEP500_CACHE": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "deep500", "compile", str(source), "--name", "slow",
               "--outputs", "float32:8", "--output-folder", str(output)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    watched = psutil.Process(process.pid)
    build = []
    try:
        deadline = time.monotonic() + 120
        while not _compiling(watched, source.name):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the compiler never started"
            time.sleep(0.05)
        build = watched.children(recursive=True)  # cmake, make, c++, cc1plus, ...
        assert len(build) >= 2, build
        assert [p for p in build if "cmake" in p.name()], build
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 143, stderr
        assert "deep500: interrupted (interrupted by SIGTERM)" in stderr
        assert "Traceback" not in stderr
        gone, alive = psutil.wait_procs(build, timeout=5)
        alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
        assert not alive, f"still running after the build was stopped: {alive}"
        left = sorted(p.name for p in output.parent.iterdir())
        assert not [name for name in left if ".tmp-" in name], left
        assert not output.exists()
    finally:
        for child in build:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        if process.poll() is None:
            process.kill()
            process.wait()


def _dead_pid():
    finished = subprocess.Popen(["true"])
    finished.wait()
    return finished.pid


def test_the_next_build_removes_what_killed_builds_left(tmp_path):
    from filelock import FileLock
    final = str(tmp_path / "op-0123")
    dead = _dead_pid()
    stale = [f"{final}.tmp-{dead}-0123abcd", f"{final}.stale-89abcdef"]
    own_running = f"{final}.tmp-{os.getpid()}-fedcba98"        # a live build's folder
    other = str(tmp_path / "other-4567")
    other_dead = f"{other}.tmp-{dead}-00000000"                 # another target's
    busy = str(tmp_path / "busy-89ab")
    busy_dead = f"{busy}.tmp-{dead}-11111111"                   # its lock is held
    kept = [f"{final}.failed", str(tmp_path / "unrelated.tmp-1-notahexx")]
    for path in stale + [own_running, other_dead, busy_dead] + kept:
        os.makedirs(os.path.join(path, "build"))
    with FileLock(busy + ".lock"):
        removed = remove_stale_temporaries(final)
    assert sorted(removed) == sorted(stale + [other_dead])
    for path in removed:
        assert not os.path.exists(path)
    for path in [own_running, busy_dead] + kept:
        assert os.path.isdir(path), path
