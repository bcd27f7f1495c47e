"""One CMake build of a C++ operator into a shared library, in a folder of its own.

The generated ``CMakeLists.txt`` builds the user's sources as a shared library with
hidden symbol visibility (only ``D500_EXPORTED`` functions are visible), C++17, Release
flags, Deep500's include folder, and the operator's compile definitions. The whole
output of CMake and the compiler goes to ``build.log`` in that folder.

Two CMake cache variables add what an operator needs from outside (MPI, for one): pass
``-DD500_EXTRA_INCLUDE_DIRS=<dir;dir>`` and ``-DD500_EXTRA_LIBRARIES=<file or name;...>``
in ``additional_cmake_options`` (``deep500.lv3_distributed.mpi_toolchain`` does).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

from deep500.lv0_operators.toolchain import find_cmake
from deep500.utils.errors import CompilationError

INCLUDE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
LIBRARY_SUFFIXES = (".so", ".dylib", ".dll")
FIRST_ERROR_LINES = 12

_CMAKELISTS = """\
cmake_minimum_required(VERSION 3.15)
project({name} LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release)
endif()
add_library({name} SHARED
{sources}
)
target_include_directories({name} PRIVATE
{includes}
)
target_compile_definitions({name} PRIVATE
{definitions}
)
if(D500_EXTRA_INCLUDE_DIRS)
  target_include_directories({name} PRIVATE ${{D500_EXTRA_INCLUDE_DIRS}})
endif()
if(D500_EXTRA_LIBRARIES)
  target_link_libraries({name} PRIVATE ${{D500_EXTRA_LIBRARIES}})
endif()
set_target_properties({name} PROPERTIES
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  LIBRARY_OUTPUT_DIRECTORY "{output}"
  RUNTIME_OUTPUT_DIRECTORY "{output}")
"""


def _cmake_path(path: str) -> str:
    return path.replace("\\", "/").replace('"', '\\"')


def write_cmakelists(folder: str, name: str, sources: list[str],
                     definitions: dict[str, str]) -> str:
    """Write the operator's CMakeLists.txt into ``folder``; returns its path."""
    includes = [INCLUDE_DIR] + sorted({os.path.dirname(s) for s in sources})
    text = _CMAKELISTS.format(
        name=name, output=_cmake_path(folder),
        sources="\n".join(f'  "{_cmake_path(s)}"' for s in sources),
        includes="\n".join(f'  "{_cmake_path(i)}"' for i in includes),
        definitions="\n".join(f'  "{_cmake_path(k)}={_cmake_path(str(v))}"'
                              for k, v in definitions.items()))
    path = os.path.join(folder, "CMakeLists.txt")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def _run_logged(command: list[str], log, live_output: bool, cwd: str) -> int:
    """Run ``command`` (CMake, or a compiler) with its output logged; returns its exit
    status. It runs in a process group of its own, which is killed as a whole if this
    process is interrupted or fails meanwhile (SIGINT, SIGTERM under
    ``deep500.utils.interrupts.signals_raise``, any exception): CMake's make and
    compiler processes are its grandchildren and would otherwise keep running."""
    log.write("$ " + " ".join(command) + "\n")
    log.flush()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace",
                               start_new_session=True)
    try:
        with process.stdout:
            for line in process.stdout:
                log.write(line)
                if live_output:
                    sys.stdout.write(line)
                    sys.stdout.flush()
        return process.wait()
    except BaseException:
        kill_process_group(process)
        raise


def kill_process_group(process: subprocess.Popen, grace_seconds: float = 2.0) -> None:
    """End ``process`` and every process of its group (started with
    ``start_new_session``): SIGTERM, then SIGKILL to what is left after
    ``grace_seconds``."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        pass
    try:  # what is left of the group: make waits for its compilers, which may linger
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def first_errors(log_text: str, limit: int = FIRST_ERROR_LINES) -> list[str]:
    """The compiler's first error lines (with a few lines of context after each)."""
    lines = log_text.splitlines()
    pattern = re.compile(r"(error|Error|ERROR|undefined reference|fatal)")
    # make's own "*** [target] Error 1" lines only repeat that a step failed.
    make_line = re.compile(r"\s*g?make(\[\d+\])?: \*\*\*")
    picked: list[str] = []
    for index, line in enumerate(lines):
        if pattern.search(line) and not line.startswith("$ ") and not make_line.match(line):
            for extra in lines[index:index + 3]:
                if extra not in picked and not make_line.match(extra):
                    picked.append(extra)
            if len(picked) >= limit:
                break
    return picked[:limit] or lines[-limit:]


def build_library(folder: str, name: str, sources: list[str], definitions: dict[str, str],
                  compiler: str, cmake_options: list[str], live_output: bool = False) -> str:
    """Configure and build in ``folder``; returns the library's file name in it.

    Raises a CompilationError with the first error lines and the log's path.
    """
    cmake = find_cmake()
    write_cmakelists(folder, name, sources, definitions)
    build_dir = os.path.join(folder, "build")
    log_path = os.path.join(folder, "build.log")
    jobs = str(max(1, min(len(sources), os.cpu_count() or 1)))
    steps = [
        ("configure", [cmake, "-S", folder, "-B", build_dir,
                       f"-DCMAKE_CXX_COMPILER={compiler}", *cmake_options]),
        ("build", [cmake, "--build", build_dir, "--parallel", jobs]),
    ]
    with open(log_path, "w", encoding="utf-8") as log:
        for step, command in steps:
            status = _run_logged(command, log, live_output, folder)
            if status != 0:
                log.flush()
                with open(log_path, encoding="utf-8", errors="replace") as reader:
                    errors = first_errors(reader.read())
                raise CompilationError(
                    f"C++ operator {name!r} failed to {step} (exit status {status}).\n"
                    + "\n".join(errors) + f"\nFull log: {log_path}",
                    log_path=log_path, first_errors=errors)
    built = [f for f in os.listdir(folder) if f.endswith(LIBRARY_SUFFIXES)]
    if not built:
        raise CompilationError(f"C++ operator {name!r}: CMake succeeded but produced no "
                               f"shared library in {folder}. Full log: {log_path}",
                               log_path=log_path)
    return built[0]
