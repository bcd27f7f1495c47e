"""Building C++ operators that call MPI: which ``mpi.h`` to compile with and which
``libmpi`` to link, so that the operator shares the MPI that mpi4py runs.

A C++ operator calling ``MPI_Allreduce`` on a communicator that mpi4py created must
call into the very library instance mpi4py initialised: a second libmpi in the process
would have its own, uninitialised state. So the library comes first: the ``libmpi``
that mpi4py has loaded into this process (on Linux read from ``/proc/self/maps``; with
the ``mpich`` wheel that is ``<venv>/lib/libmpi.so.12``). The operator links that file
by its full path (its directory goes into the library's RPATH), and when the operator
is loaded the dynamic loader finds the already-loaded library by its soname, so both
share one MPI. :func:`check_one_libmpi` verifies this after loading, and the kernels
themselves refuse to run when MPI is not initialised in the libmpi they see.

The headers must belong to that library's implementation (an Open MPI ``mpi.h`` with
MPICH's library compiles and then crashes). They are searched, in order, in:

1. ``$DEEP500_MPI_INCLUDE`` (folders separated by ``os.pathsep``), if set;
2. the library's own prefix: ``<prefix>/include`` for ``<prefix>/lib/libmpi*`` (the
   ``mpich`` wheel puts ``mpi.h`` in ``<venv>/include``);
3. the ``-I`` folders of the MPI compiler wrapper (``mpicxx``, ``mpicc`` beside the
   running Python, then on ``PATH``): ``-show`` (MPICH) or ``--showme:incdirs``
   (Open MPI);
4. the usual system folders of Debian/Ubuntu, Fedora/RHEL and Homebrew packages.

The first folder holding an ``mpi.h`` of the library's implementation (MPICH or
Open MPI, told apart by the macros the header defines) wins; when none does,
:class:`ToolchainError` says where it looked and what to install.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import re
import shutil
import subprocess
import sys
from typing import Sequence

from deep500.lv0_operators.toolchain import ToolchainError
from deep500.utils.errors import require

INCLUDE_VARIABLE = "DEEP500_MPI_INCLUDE"
_LIBMPI = re.compile(r"^lib(mpi|mpich|mpi_abi)(\.so(\.\d+)*|(\.\d+)*\.dylib)$")
_WRAPPERS = ("mpicxx", "mpic++", "mpicc")
SYSTEM_INCLUDE_DIRS = (
    "/usr/include/x86_64-linux-gnu/mpich", "/usr/include/aarch64-linux-gnu/mpich",
    "/usr/include/mpich", "/usr/include/mpich-x86_64", "/usr/include/mpich-aarch64",
    "/usr/lib/x86_64-linux-gnu/openmpi/include", "/usr/lib/aarch64-linux-gnu/openmpi/include",
    "/usr/include/openmpi-x86_64", "/usr/include/openmpi-aarch64", "/usr/include/openmpi",
    "/usr/local/include", "/opt/homebrew/include", "/usr/include")
MPICH, OPEN_MPI, MPI_ABI = "MPICH", "Open MPI", "MPI ABI"


@dataclasses.dataclass(frozen=True)
class MPIToolchain:
    """What an MPI operator is compiled and linked with.

    ``include_dirs``: the folder of ``mpi.h`` (and any other the wrapper names);
    ``library``: the libmpi file to link, the one mpi4py loaded; ``implementation``:
    MPICH, Open MPI or MPI ABI (the MPI 5 standard ABI, ``libmpi_abi``); ``found_by``:
    how the headers were found; ``definitions``: compile definitions the headers need.
    """
    include_dirs: tuple[str, ...]
    library: str
    implementation: str
    found_by: str
    definitions: dict = dataclasses.field(default_factory=dict)

    def cmake_options(self) -> list[str]:
        """Options for ``compile_custom_cppop(..., additional_cmake_options=...)``."""
        return [f"-DD500_EXTRA_INCLUDE_DIRS={';'.join(self.include_dirs)}",
                f"-DD500_EXTRA_LIBRARIES={self.library}"]


# -- the library -------------------------------------------------------------------------
def loaded_libmpis() -> list[str]:
    """Real paths of the MPI libraries mapped into this process (Linux), in map order."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as handle:
            lines = handle.readlines()
    except OSError:
        return []
    found: list[str] = []
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) == 6 and _LIBMPI.match(os.path.basename(fields[5].strip())):
            path = os.path.realpath(fields[5].strip())
            if path not in found:
                found.append(path)
    return found


def libmpi_in_use() -> str:
    """The libmpi mpi4py runs on (imports ``mpi4py.MPI``, which initialises MPI).

    Without ``/proc/self/maps`` (macOS), the ``libmpi`` of the environment's prefix
    (where the ``mpich`` wheel puts it) is taken."""
    require("mpi4py", "mpi", "C++ operators that call MPI")
    importlib.import_module("mpi4py.MPI")  # loads and initialises libmpi
    loaded = loaded_libmpis()
    if loaded:
        return loaded[0]
    for prefix in (sys.prefix, sys.base_prefix):
        for name in ("libmpi.dylib", "libmpi.so.12", "libmpi.so.40", "libmpi.so"):
            path = os.path.join(prefix, "lib", name)
            if os.path.isfile(path):
                return os.path.realpath(path)
    raise ToolchainError("Could not tell which libmpi mpi4py loaded (no /proc/self/maps, "
                         f"no libmpi in {sys.prefix}/lib); C++ operators that call MPI "
                         "must link that very library. Install the mpich wheel "
                         "(pip install mpich) into this environment")


def library_implementation(library: str) -> str:
    """MPICH, Open MPI or MPI ABI, by the library's file name and exported symbols."""
    name = os.path.basename(library)
    if name.startswith("libmpi_abi"):
        return MPI_ABI
    if name.startswith("libmpich"):
        return MPICH
    try:
        import ctypes
        handle = ctypes.CDLL(library, mode=getattr(os, "RTLD_NOLOAD", 0) | os.RTLD_LAZY)
    except OSError:
        return MPICH if name.startswith("libmpi.so.12") else "unknown"
    return OPEN_MPI if hasattr(handle, "ompi_mpi_comm_self") else MPICH


# -- the headers ------------------------------------------------------------------------
def header_implementation(include_dir: str) -> str | None:
    """MPICH or Open MPI for ``include_dir/mpi.h`` (None if there is none)."""
    path = os.path.join(include_dir, "mpi.h")
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    if "OMPI_MAJOR_VERSION" in text or "OPEN_MPI" in text:
        return OPEN_MPI
    if "MPICH_VERSION" in text or "MPICH_NAME" in text:
        return MPICH
    return "unknown"


def wrapper_include_dirs() -> list[tuple[str, str]]:
    """(folder, wrapper) for each ``-I`` folder that an MPI compiler wrapper names."""
    wrappers = []
    for name in _WRAPPERS:
        beside = os.path.join(os.path.dirname(sys.executable), name)
        for candidate in (beside if os.access(beside, os.X_OK) else None, shutil.which(name)):
            if candidate and candidate not in wrappers:
                wrappers.append(candidate)
    found = []
    for wrapper in wrappers:
        for flag in ("-show", "--showme:incdirs"):
            try:
                shown = subprocess.run([wrapper, flag], capture_output=True, text=True,
                                       timeout=30, check=False).stdout
            except (OSError, subprocess.SubprocessError):
                continue
            folders = re.findall(r"(?:^|\s)-I(\S+)", shown) if flag == "-show" else \
                shown.split()
            for folder in folders:
                if (folder, wrapper) not in found:
                    found.append((folder, wrapper))
            if folders:
                break
    return found


def _candidates(library: str) -> list[tuple[str, str]]:
    """(folder, how it was found) in search order."""
    candidates = [(folder, f"${INCLUDE_VARIABLE}")
                  for folder in os.environ.get(INCLUDE_VARIABLE, "").split(os.pathsep)
                  if folder]
    prefix = os.path.dirname(os.path.dirname(library))
    candidates.append((os.path.join(prefix, "include"), "the library's prefix"))
    candidates += [(folder, f"{wrapper} -show") for folder, wrapper in
                   wrapper_include_dirs()]
    candidates += [(folder, "system folder") for folder in SYSTEM_INCLUDE_DIRS]
    return candidates


def find_mpi_toolchain(library: str | None = None) -> MPIToolchain:
    """MPI's headers and the libmpi to link for operators run in this process.

    ``library``: the libmpi to build for; default :func:`libmpi_in_use`. Raises
    :class:`ToolchainError` naming where it looked and what to install when no
    matching ``mpi.h`` is found.
    """
    library = library or libmpi_in_use()
    wanted = library_implementation(library)
    header_wanted = MPICH if wanted == MPI_ABI else wanted
    looked, mismatched = [], []
    for folder, how in _candidates(library):
        folder = os.path.abspath(folder)
        if folder in looked:
            continue
        looked.append(folder)
        found = header_implementation(folder)
        if found is None:
            continue
        if wanted != "unknown" and found not in (header_wanted, "unknown"):
            mismatched.append(f"{folder}/mpi.h is {found}'s")
            continue
        definitions = {}
        if wanted == MPI_ABI:
            if not os.path.isfile(os.path.join(folder, "mpi_abi.h")):
                mismatched.append(f"{folder} has no mpi_abi.h for {library}")
                continue
            definitions["MPI_ABI"] = "1"
        return MPIToolchain((folder,), library, wanted, how, definitions)
    where = "; ".join(looked)
    also = f" Skipped: {'; '.join(mismatched)}." if mismatched else ""
    raise ToolchainError(
        f"No MPI headers (mpi.h) for the MPI library that mpi4py uses ({library}, "
        f"{wanted}) were found. Looked in: {where}.{also} C++ operators that call MPI "
        f"compile against them and link that library. Install the mpich wheel into this "
        f"environment (pip install mpich: it ships mpi.h in <venv>/include next to the "
        f"libmpi mpi4py loads), or your MPI's development package (apt install "
        f"libmpich-dev or libopenmpi-dev; dnf install mpich-devel or openmpi-devel), or "
        f"name the folder holding mpi.h in ${INCLUDE_VARIABLE}")


def check_one_libmpi(operator: str) -> None:
    """Raise ToolchainError if two different libmpi files are mapped in this process
    (an operator linked another MPI than mpi4py's). Linux only; elsewhere a no-op."""
    loaded = loaded_libmpis()
    if len(loaded) > 1:
        raise ToolchainError(
            f"C++ operator {operator!r} loaded a second MPI library: {', '.join(loaded)} "
            f"are all mapped in this process, so the operator would not share mpi4py's "
            f"MPI state. Rebuild it with deep500.lv3_distributed.mpi_toolchain."
            f"compile_mpi_cppop, which links the libmpi mpi4py loaded")


def compile_mpi_cppop(name: str, sources, input_descriptors: Sequence,
                      output_descriptors: Sequence, additional_definitions: dict | None = None,
                      additional_cmake_options: Sequence[str] = (), **options):
    """``d5.compile_custom_cppop`` for an operator that includes ``<mpi.h>``: adds MPI's
    include folder and links mpi4py's libmpi (:func:`find_mpi_toolchain`), loads the
    library and checks that the process still holds one libmpi. Collective in effect
    only through the build cache's lock: every rank may call it at once."""
    from deep500.lv0_operators.cpp_compiler import compile_custom_cppop
    toolchain = find_mpi_toolchain()
    descriptor = compile_custom_cppop(
        name, sources, input_descriptors, output_descriptors,
        {**toolchain.definitions, **(additional_definitions or {})},
        [*toolchain.cmake_options(), *additional_cmake_options], **options)
    descriptor.library()
    check_one_libmpi(name)
    return descriptor


def kernel_path(file_name: str) -> str:
    """Path of one of the MPI kernels shipped in ``deep500/lv3_distributed/kernels``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels", file_name)
