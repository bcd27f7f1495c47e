"""Measured GEMM time as a function of its size: the seconds of a float32 NumPy
product (m×k)·(k×n) on this machine, measured once per size when first asked for.

A roofline with one GEMM peak (the rate of a large square product) is several times
off for the small, skinny products of a network's layers, and not smoothly: a batch-8
fully connected layer is an 8-row product whose speed jumps with the BLAS's choice of
kernel (OpenBLAS' small-matrix path: 8×784 by 784×128 runs at ~100 GFLOP/s, 8×784 by
784×160 at ~20), and a 16-channel 3×3 convolution lowered to im2col is a 16×144 by
144×(N·H·W) product at half the rate of a 64-channel one. Interpolating a coarse grid
of sizes smooths such steps away, so each product is timed at its own size instead: an
isolated call of the machine's BLAS, not a measurement of any network (the kernel
micro-benchmarks of per-layer performance models; PALEO, Qi et al., ICLR 2017, scales
peak by a measured efficiency, and Catalán's thesis calibrates its per-layer model with
measured GEMM rates).

The second operand is stored transposed, (n, k) row-major, as the weight of a fully
connected layer is (ONNX Gemm with transB=1, PyTorch's Linear). ``library`` picks whose
product is timed: "numpy" (the BLAS of the reference executor) or "torch" (PyTorch's
``torch.matmul``, MKL/oneDNN: no OpenBLAS small-matrix kernel, other steps), so that an
executor's layers are modelled with its own library's speed. Each size is the best of
``repeats`` calls after one warm-up call (the rate the BLAS reaches with warm caches, as
the roofline's peak), at the calling thread count (limit it with ``threadpoolctl``).
"""
from __future__ import annotations

import math
import time

import numpy as np

from deep500.utils.errors import Deep500Error, require


class GemmRate:
    """Seconds and FLOP/s of (m×k)·(k×n) float32 products, timed on first use.

    Args:
        repeats: timed calls per size (the best is kept).
        library: "numpy" or "torch": whose matrix product is timed.
        times: already measured sizes, {(m, n, k): seconds} or the list of
            [m, n, k, seconds] rows of ``to_dict()["times"]``; those are not re-timed.
    """

    def __init__(self, repeats: int = 5, times=None, library: str = "numpy"):
        if repeats < 1:
            raise Deep500Error(f"GemmRate repeats must be at least 1, got {repeats}")
        if library not in ("numpy", "torch"):
            raise Deep500Error(f"GemmRate library must be 'numpy' or 'torch', not {library!r}")
        self.repeats, self.library = int(repeats), library
        if isinstance(times, dict):
            times = [(*key, value) for key, value in times.items()]
        self._times = {}
        for row in times or []:
            m, n, k, seconds = row
            if seconds <= 0:
                raise Deep500Error(f"GemmRate time of {m}×{n}×{k} must be positive, "
                                   f"got {seconds}")
            self._times[self._key(m, n, k)] = float(seconds)

    @staticmethod
    def _key(m, n, k) -> tuple:
        key = (int(m), int(n), int(k))
        if min(key) < 1:
            raise Deep500Error(f"GEMM sizes must be positive, got m={m}, n={n}, k={k}")
        return key

    def time(self, m: int, n: int, k: int) -> float:
        """Seconds of one (m×k)·(k×n) product (timed now if this size is new)."""
        key = self._key(m, n, k)
        if key not in self._times:
            self._times[key] = self._measure(*key)
        return self._times[key]

    def _measure(self, m: int, n: int, k: int) -> float:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, k), dtype=np.float32)
        weight = rng.standard_normal((n, k), dtype=np.float32)
        out = np.empty((m, n), np.float32)
        if self.library == "torch":
            torch = require("torch", "pytorch", "GemmRate(library='torch')")
            a, weight, out = torch.from_numpy(a), torch.from_numpy(weight), torch.from_numpy(out)
            matmul = torch.matmul
        else:
            matmul = np.matmul
        matmul(a, weight.T, out=out)
        best = math.inf
        for _ in range(self.repeats):
            start = time.perf_counter()
            matmul(a, weight.T, out=out)
            best = min(best, time.perf_counter() - start)
        return max(best, 1e-9)

    def rate(self, m: int, n: int, k: int) -> float:
        """FLOP/s of the product: 2·m·n·k / ``time``."""
        return 2.0 * m * n * k / self.time(m, n, k)

    def seconds(self, gemms) -> float:
        """Seconds of a list of (m, n, k) products."""
        return sum(self.time(m, n, k) for m, n, k in gemms)

    def to_dict(self) -> dict:
        """The sizes timed so far, [m, n, k, seconds] rows (``GemmRate(times=...)``)."""
        return {"times": [[*key, value] for key, value in sorted(self._times.items())]}
