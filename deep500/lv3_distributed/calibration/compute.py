"""The compute half of a calibration: γ (the in-place sum), the memory bandwidth and the
peak FLOP/s per thread count, each measured, logged and summarised as its machine-file
section (``reduction``, ``memory``, ``compute``).

* **γ**: ``numpy.add(a, b, out=a)`` on float32 buffers of 64 KB (cache-resident),
  256 KB, 1, 4, 16 and 64 MB (memory-resident); seconds per byte of ``a``; the model
  interpolates in log(size) between them.
* **memory bandwidth**: a STREAM-like triad ``a = b + s·c`` on float64 arrays
  (J. D. McCalpin, "Memory Bandwidth and Machine Balance in Current High Performance
  Computers", IEEE TCCA Newsletter, 1995), counted as STREAM counts it, 3 arrays × 8
  bytes per element. NumPy executes it in two passes (``multiply`` into ``a``, then
  ``add``), so the value is the bandwidth NumPy code gets, below STREAM's C figure.
* **peak FLOP/s** per thread count 1 … usable CPUs (each in ``thread_counts``, which
  puts the previous counts back): GEMM as NumPy's BLAS ``matmul`` of large square
  float32 matrices (2n³ FLOPs), convolution as PyTorch's ``conv2d`` (2·N·K·C·R·S·P·Q
  FLOPs) or, without PyTorch, im2col + GEMM.
"""
from __future__ import annotations

import time

import numpy as np

from deep500.lv3_distributed.calibration.plan import Plan
from deep500.lv3_distributed.calibration.progress import progress_bar
from deep500.lv3_distributed.calibration.samples import SampleLog, summarize
from deep500.utils.threads import thread_counts


def _time(function, repeats: int, warmup: int = 1) -> list:
    for _ in range(warmup):
        function()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return samples


def measure_gamma(nbytes: int, repeats: int) -> list:
    """Seconds per byte of ``numpy.add(a, b, out=a)`` on float32 buffers of ``nbytes``."""
    count = max(1, nbytes // 4)
    a = np.ones(count, dtype=np.float32)
    b = np.ones(count, dtype=np.float32)
    inner = max(1, int(4e6 // nbytes))  # small buffers: time many calls at once
    def run():
        for _ in range(inner):
            np.add(a, b, out=a)
    return [t / inner / (count * 4) for t in _time(run, repeats)]


def measure_triad(elements: int, repeats: int) -> list:
    """Bytes/s of ``a = b + s·c`` on float64 arrays, counted as STREAM counts it (24 bytes
    per element)."""
    a, b, c = (np.full(elements, v, dtype=np.float64) for v in (0.0, 1.0, 2.0))
    scalar = 3.0
    def run():
        np.multiply(c, scalar, out=a)
        np.add(a, b, out=a)
    return [24.0 * elements / t for t in _time(run, repeats)]


def measure_gemm(n: int, repeats: int) -> list:
    """FLOP/s of a float32 n×n matmul (2n³ FLOPs) with NumPy's BLAS."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n), dtype=np.float32)
    y = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    return [2.0 * n ** 3 / t for t in _time(lambda: np.matmul(x, y, out=out), repeats)]


def measure_conv(shape, repeats: int) -> tuple[list, str]:
    """FLOP/s of a 3×3, padding-1 convolution of N×C×H×W by K filters
    (2·N·K·C·9·H·W FLOPs): PyTorch's conv2d, else im2col + NumPy GEMM."""
    n, c, h, w, k = shape
    flops = 2.0 * n * k * c * 9 * h * w
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        x = torch.randn(n, c, h, w)
        weight = torch.randn(k, c, 3, 3)
        with torch.no_grad():
            samples = _time(lambda: torch.nn.functional.conv2d(x, weight, padding=1), repeats)
        return [flops / t for t in samples], "torch.nn.functional.conv2d"
    from numpy.lib.stride_tricks import sliding_window_view
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    weight = rng.standard_normal((k, c * 9), dtype=np.float32)
    def run():
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        cols = sliding_window_view(padded, (3, 3), axis=(2, 3))  # n c h w 3 3
        cols = cols.transpose(1, 4, 5, 0, 2, 3).reshape(c * 9, n * h * w)
        return weight @ cols
    return [flops / t for t in _time(run, repeats)], "im2col + numpy.matmul"


def reduction_section(curve: list, method: str) -> dict:
    """The machine file's ``reduction``: γ at the smallest (cache-resident) and largest
    (memory-resident) buffer, and the whole curve."""
    return {"method": method,
            "gamma_cache_s_per_byte": curve[0], "gamma_memory_s_per_byte": curve[-1],
            "gamma_curve": curve}


def reduction_phase(plan: Plan, log: SampleLog, progress: bool) -> dict:
    """γ at every buffer size of ``plan``: the machine file's ``reduction``."""
    bar = progress_bar(len(plan.gamma_sizes), "gamma (numpy add)", progress)
    curve = []
    for nbytes in plan.gamma_sizes:
        samples = measure_gamma(nbytes, plan.repeats * 2)
        log.write({"phase": "gamma", "nbytes": nbytes, "s_per_byte": samples})
        curve.append({"buffer_bytes": nbytes, **summarize(samples)})
        bar.update(1)
    bar.close()
    return reduction_section(curve, "numpy.add(a, b, out=a), float32")


def memory_phase(plan: Plan, log: SampleLog, progress: bool) -> dict:
    """The triad's bandwidth: the machine file's ``memory``."""
    bar = progress_bar(1, "memory (triad)", progress)
    samples = measure_triad(plan.triad_elements, plan.repeats)
    log.write({"phase": "triad", "elements": plan.triad_elements, "bytes_per_s": samples})
    bar.close()
    return {"method": "STREAM-like triad a = b + s*c in NumPy, float64, "
                      "24 bytes per element (McCalpin 1995)",
            "bandwidth_bytes_per_s": {**summarize(samples),
                                      "array_bytes": plan.triad_elements * 8}}


def compute_phase(plan: Plan, log: SampleLog, progress: bool) -> dict:
    """Peak GEMM and convolution FLOP/s at 1 … ``plan.max_threads`` threads: the
    machine file's ``compute``."""
    peak = {"gemm": {}, "conv": {}}
    threads = list(range(1, plan.max_threads + 1))
    bar = progress_bar(2 * len(threads), "peak FLOP/s", progress)
    conv_method = None
    for t in threads:
        with thread_counts(t):
            samples = measure_gemm(plan.gemm_n, plan.repeats)
            log.write({"phase": "gemm", "threads": t, "n": plan.gemm_n,
                       "flops_per_s": samples})
            peak["gemm"][t] = summarize(samples)
            bar.update(1)
            samples, conv_method = measure_conv(plan.conv_shape, plan.repeats)
            log.write({"phase": "conv", "threads": t, "shape": list(plan.conv_shape),
                       "method": conv_method, "flops_per_s": samples})
            peak["conv"][t] = summarize(samples)
            bar.update(1)
    bar.close()
    return {"method": {"gemm": f"numpy.matmul float32 {plan.gemm_n}^2",
                       "conv": f"{conv_method}, NCHW+K {list(plan.conv_shape)}, 3x3"},
            "peak_flops_per_s": peak}
