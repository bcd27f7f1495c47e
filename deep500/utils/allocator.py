"""A fixed C allocator policy, so that timings do not depend on a process's history;
and the one way Deep500 allocates C++ operators' outputs.

glibc adapts its mmap and trim thresholds to the sizes freed so far, so whether a
tensor of a few MiB comes from fresh, page-faulting ``mmap`` memory or from the reused
heap depends on what ran before and in which order frameworks allocate and free.
Measured on ResNet-20 at batch 32: thousands of page faults per inference early in a
process and none later, and framework-vs-native ratios swinging between 0.93 and 1.2.
Fixing both thresholds (mmap 32 MiB, trim 2 GiB) removes the faults and the swings.
"""
from __future__ import annotations

import ctypes
import math

import numpy as np

_M_TRIM_THRESHOLD = -1  # <malloc.h>
_M_MMAP_THRESHOLD = -3


def fix_allocator_thresholds(mmap_threshold: int = 32 << 20,
                             trim_threshold: int = 2 ** 31 - 1) -> str:
    """Fix glibc's thresholds (call before frameworks allocate); returns what is in
    force, for the record."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return "system default (no glibc mallopt)"
    if mallopt(_M_MMAP_THRESHOLD, mmap_threshold) and mallopt(_M_TRIM_THRESHOLD,
                                                              trim_threshold):
        return (f"glibc, mmap threshold {mmap_threshold >> 20} MiB, trim threshold "
                f"{trim_threshold / 2 ** 30:.0f} GiB (fixed)")
    return "glibc defaults (mallopt refused the fixed thresholds)"


# Outputs of C++ operators start on a cache line (64 bytes: Eigen's largest vector
# alignment, which TensorFlow checks, and c10's). Every path allocates them alike,
# malloc(nbytes + OUTPUT_ALIGNMENT): NumPy's buffer here, the C++ glue libraries'
# malloc. A buffer freed by one path is then reused by the next call of any path, and
# the bare-call baseline of benchmarks/lv0_cppop_overhead.py writes to the same pages as
# the call it is compared with (whether a 16 MiB kernel's output gets transparent huge
# pages changes its time by several percent).
OUTPUT_ALIGNMENT = 64
_address_of = ctypes.addressof
_buffer_view = ctypes.c_char.from_buffer  # cheaper than ndarray.ctypes, see cpp_op


def aligned_empty(shape, dtype, nbytes: int | None = None) -> np.ndarray:
    """An uninitialised C-ordered array whose data is OUTPUT_ALIGNMENT-aligned;
    ``nbytes`` (its size) may be given to save computing it."""
    dtype = np.dtype(dtype)
    if nbytes is None:
        nbytes = math.prod(shape) * dtype.itemsize
    buffer = np.empty(nbytes + OUTPUT_ALIGNMENT, np.uint8)
    offset = -_address_of(_buffer_view(buffer)) % OUTPUT_ALIGNMENT
    return np.ndarray(shape, dtype, buffer, offset)
