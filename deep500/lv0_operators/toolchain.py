"""The tools that build C++ operators: CMake and a C++ compiler, found once per process.

CMake comes from the ``cmake`` Python package when it is installed (``pip install
cmake``), else from ``PATH``. The compiler is ``$CXX`` when set, else the first of
``c++``, ``g++``, ``clang++`` on ``PATH``. Its identity (path and ``--version`` banner)
is part of every cache key, so that a new compiler rebuilds every operator.

Glue libraries (``glue_build``) link against a framework's large shared libraries, and
the linker reads all of their symbols: GNU ld spends ~12 CPU-s on TensorFlow's 788 MB
``libtensorflow_cc.so.2`` for the eager glue, gold ~2 s for the same library (same
dependencies and exported symbols). :func:`fast_linker_flags` picks gold when the
compiler can use it.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile

from deep500.utils.errors import Deep500Error

COMPILER_CANDIDATES = ("c++", "g++", "clang++")
#: Linkers tried for glue libraries, as ``-fuse-ld=<name>``; none usable: the default.
FAST_LINKERS = ("gold",)


class ToolchainError(Deep500Error):
    """CMake or the C++ compiler is missing; the message says what to install."""


def find_cmake() -> str:
    """Path of the ``cmake`` executable, or a ToolchainError saying how to get one."""
    try:
        import cmake  # the PyPI wheel ships the binaries
        candidate = os.path.join(cmake.CMAKE_BIN_DIR, "cmake")
        if os.access(candidate, os.X_OK):
            return candidate
    except (ImportError, AttributeError):
        pass
    found = shutil.which("cmake")
    if found:
        return found
    raise ToolchainError("CMake was not found: C++ operators are built with it. Install "
                         "it with 'pip install cmake' (or your system's package manager)")


def find_cxx_compiler() -> str:
    """Path of the C++ compiler, or a ToolchainError saying how to get one."""
    requested = os.environ.get("CXX")
    if requested:
        found = shutil.which(requested)
        if not found:
            raise ToolchainError(f"The C++ compiler named by $CXX ({requested!r}) was not "
                                 f"found. Fix $CXX or unset it to use c++/g++/clang++")
        return found
    for name in COMPILER_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    raise ToolchainError("No C++ compiler was found (looked for $CXX, "
                         f"{', '.join(COMPILER_CANDIDATES)}). Install one, e.g. "
                         "'apt install g++' on Debian/Ubuntu, 'dnf install gcc-c++' on "
                         "Fedora, or 'xcode-select --install' on macOS")


@functools.lru_cache(maxsize=None)
def _version_banner(compiler: str) -> str:
    try:
        completed = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                                   timeout=60, check=False)
    except OSError as exc:
        raise ToolchainError(f"The C++ compiler {compiler} cannot be run: {exc}") from exc
    return completed.stdout.strip().splitlines()[0] if completed.stdout.strip() else ""


def compiler_identity(compiler: str | None = None) -> dict:
    """What identifies the compiler in a cache key: its resolved path and version banner."""
    compiler = compiler or find_cxx_compiler()
    return {"path": os.path.realpath(compiler), "version": _version_banner(compiler)}


@functools.lru_cache(maxsize=None)
def fast_linker_flags(compiler: str) -> tuple[str, ...]:
    """``("-fuse-ld=<name>",)`` for the first of :data:`FAST_LINKERS` with which
    ``compiler`` links a shared library, else ``()`` (its default linker). Probed once per
    process by linking a one-function library (~0.1 s)."""
    with tempfile.TemporaryDirectory() as folder:
        source = os.path.join(folder, "probe.cpp")
        with open(source, "w", encoding="utf-8") as handle:
            handle.write("int d500_linker_probe() { return 0; }\n")
        for name in FAST_LINKERS:
            flag = f"-fuse-ld={name}"
            try:
                completed = subprocess.run(
                    [compiler, flag, "-shared", "-fPIC", source, "-o",
                     os.path.join(folder, "probe.so")], capture_output=True, timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if completed.returncode == 0:
                return (flag,)
    return ()
