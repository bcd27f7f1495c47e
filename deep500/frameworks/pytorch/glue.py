"""Deep500's PyTorch glue (``native/d500_torch_glue.cpp``): a CPython extension, built
once per PyTorch installation, through which ``d5pt.custom_op`` calls a C++ operator.

Why: a kernel that streams more memory than the last-level cache (a 4 M-element
elementwise operator reads and writes 32 MiB) leaves every cache cold, so the Python
that runs next pays a miss on nearly every object it touches. Measured right after
such a kernel on the 2-core development VM (L3 32 MiB): each Python-level torch call
(``tensor.dtype``, ``data_ptr()``, ``torch.from_numpy``...) costs 8-37 µs instead of
0.1-1 µs, and the Python path of ``d5pt.custom_op`` (checks, output allocation, call,
hook checks) added 55-90 µs per call, 7-11% of the kernel. The glue does the same work
in one C++ function: the module's hook checks, the tensors' count, dtype, shape, device
and layout, the output allocation, the call with the GIL released (as ctypes does) and,
when a gradient is recorded, a C++ ``torch::autograd::Function``. Anything it does not
handle (a hook, tracing, functorch, a non-contiguous or mismatched tensor) takes the
Python path, which copies or explains. See ``benchmarks/lv0_cppop_overhead.py``.

Compiled with the system C++ compiler against the headers and libraries in the torch
wheel (``torch/include``, ``torch/lib``), PyTorch's C++ ABI flag and Python's headers,
in about 20 s, by ``frameworks/_bridge/glue_library.py``; cached as ``glue_build``
describes (``$DEEP500_CACHE/cppops``, locked, atomic). When it cannot be had (no
compiler, no Python headers, a failed build or load), ``GLUE.get()`` warns once
(:class:`NativeGlueWarning`) and returns None, and ``d5pt.custom_op`` runs C++ operators
through the Python path (ctypes).
``DEEP500_TORCH_NATIVE_GLUE=0`` selects that path without trying.

Build ahead of time (a Docker image, before an MPI job):
``deep500 build-glue --framework pytorch``.
"""
from __future__ import annotations

import os

from deep500.frameworks._bridge.glue_library import python_extension
from deep500.utils.errors import Deep500Error, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


class NativeGlueWarning(UserWarning):
    """Deep500's PyTorch glue is unavailable: C++ operators run through the Python path
    (a few µs more per call when caches are warm, tens of µs after a large kernel)."""


def _torch_flags() -> tuple[list[str], dict]:
    """The flags of torch's headers, C++ ABI and libraries, and torch's version fields."""
    root = os.path.dirname(os.path.abspath(torch.__file__))
    include = os.path.join(root, "include")
    if not os.path.isfile(os.path.join(include, "torch", "csrc", "autograd",
                                       "custom_function.h")):
        raise Deep500Error(f"PyTorch's C++ headers are missing from {include}: this "
                           f"PyTorch installation cannot build extensions")
    library = os.path.join(root, "lib")
    flags = [f"-I{include}", f"-I{os.path.join(include, 'torch', 'csrc', 'api', 'include')}",
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
             f"-L{library}", "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python",
             f"-Wl,-rpath,{library}"]
    return flags, {"torch": torch.__version__,
                   "torch_git": getattr(torch.version, "git_version", "")}


GLUE = python_extension(
    name="d500_torch_glue", what="Deep500's PyTorch glue",
    source=os.path.join(os.path.dirname(os.path.abspath(__file__)), "native",
                        "d500_torch_glue.cpp"),
    switch="DEEP500_TORCH_NATIVE_GLUE", fallback="C++ operators run through the Python path",
    category=NativeGlueWarning,
    # Release build; PyTorch's headers need C++17 and use C++20 features when available.
    cxxflags=["-shared", "-fPIC", "-O2", "-std=c++20", "-Wno-deprecated-declarations"],
    configure=_torch_flags, expected_seconds=25)
# What the registry and ``deep500 build-glue`` ask of a glue module.
LOADER, build = GLUE.loader, GLUE.build
