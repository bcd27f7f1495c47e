"""``deep500 calibrate``: measure this machine and write a machine file
(``deep500.utils.machine``).

Phases, each written to a JSON-lines samples file as it is measured (so that a
calibration stopped halfway leaves what it measured on disk), the YAML at the end:

* **ping-pong** between ranks 0 and 1 (``MPI_Send``/``MPI_Recv`` of 1 B … 64 MB, powers
  of two): one-way time = round trip / 2, median per size with its nonparametric CI
  (``deep500.utils.statistics``), then Hockney's t(n) = α + β·n fitted by least squares
  on relative error (non-negative α, β). One line is kept while its largest relative
  residual is at most ``SPLIT_TOLERANCE``; otherwise the sizes are split in two where
  the total squared relative error of the two lines is least (each side at least
  ``MIN_SEGMENT_POINTS`` sizes), recursively, up to ``MAX_SEGMENTS`` segments. A
  segment starts at its smallest measured size. This finds MPICH's switch from the
  eager to the rendezvous protocol, and shared memory's switch between copy paths.
  CIs of α and β: 2.5 and 97.5 percentiles of a bootstrap over the segment's sizes.
* **exchange**: both ranks ``Sendrecv`` n bytes to each other at once, fitted the same
  way (``exchange_segments``). The textbook costs assume a full-duplex link, where an
  exchange costs what a one-way message does; between two processes on one host both
  directions are copies by the same CPUs and memory, and an exchange is slower. The
  models price ``Sendrecv`` steps with this fit.
* **coherence** (``deep500.lv3_distributed.calibration_coherence``): δ_sum and δ_receive, what
  summing or receiving into a buffer costs more per byte when the peer's receive has
  just read it (its lines are then held by two cores), at 64 KB … 64 MB.
* **γ**: ``numpy.add(a, b, out=a)`` on float32 buffers of 64 KB (cache-resident),
  256 KB, 1, 4, 16 and 64 MB (memory-resident); seconds per byte of ``a``; the model
  interpolates in log(size) between them.
* **memory bandwidth**: a STREAM-like triad ``a = b + s·c`` on float64 arrays
  (J. D. McCalpin, "Memory Bandwidth and Machine Balance in Current High Performance
  Computers", IEEE TCCA Newsletter, 1995), counted as STREAM counts it, 3 arrays × 8
  bytes per element. NumPy executes it in two passes (``multiply`` into ``a``, then
  ``add``), so the value is the bandwidth NumPy code gets, below STREAM's C figure.
* **peak FLOP/s** per thread count 1 … usable CPUs (``set_thread_counts``): GEMM as
  NumPy's BLAS ``matmul`` of large square float32 matrices (2n³ FLOPs), convolution as
  PyTorch's ``conv2d`` (2·N·K·C·R·S·P·Q FLOPs) or, without PyTorch, im2col + GEMM.
* **software** (``deep500.lv3_distributed.calibration_software``): with two ranks or more, the
  per-call overhead o of every allreduce algorithm (a 4-byte allreduce minus its
  α-β-γ prediction on the machine just fitted), measured under the same ``mpirun`` as
  the ping-pong; every algorithm's allreduce *in context* (between compute bursts, no
  barrier) and its ratio to that model; and the cost of the fusion copy
  (``FusedBuffer.pack``).
"""
from __future__ import annotations

import datetime
import json
import math
import os
import socket
import sys
import time
from dataclasses import dataclass

import numpy as np

from deep500.utils.errors import Deep500Error
from deep500.utils.statistics import median_ci

SPLIT_TOLERANCE = 0.10
MIN_SEGMENT_POINTS = 3
MAX_SEGMENTS = 5
BOOTSTRAP_RESAMPLES = 200


@dataclass
class Plan:
    """Sizes, repeats and time budgets of one calibration (``quick`` for tests)."""
    pingpong_sizes: list
    pingpong_budget_s: float     # per size
    pingpong_min_repeats: int
    pingpong_max_repeats: int
    gamma_sizes: list            # buffer sizes of γ, cache-resident first, memory-resident last
    triad_elements: int
    gemm_n: int
    conv_shape: tuple            # (N, C, H, W, K), 3x3 kernel, padding 1
    repeats: int
    max_threads: int
    allreduce_budget_s: float = 0.25   # per algorithm, 4-byte allreduce calls
    allreduce_min_repeats: int = 50
    allreduce_max_repeats: int = 5000
    context_repeats: int = 100         # per algorithm and size, allreduce in context
    coherence_sizes: tuple = ()        # buffer sizes of δ_sum and δ_receive

    @classmethod
    def make(cls, quick: bool = False) -> "Plan":
        from deep500.lv3_distributed.calibration_coherence import (COHERENCE_SIZES,
                                                         COHERENCE_SIZES_QUICK)
        cpus = usable_cpus()
        if quick:
            return cls([4 ** k for k in range(0, 11)], 0.02, 5, 50, [64 << 10, 1 << 20, 4 << 20],
                       1 << 18, 192, (2, 16, 16, 16, 16), 5, min(cpus, 2),
                       0.02, 20, 500, 30, COHERENCE_SIZES_QUICK)
        return cls([2 ** k for k in range(0, 27)], 0.25, 10, 1000,
                   [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20],
                   1 << 23, 1024, (8, 64, 32, 32, 64), 10, cpus,
                   coherence_sizes=COHERENCE_SIZES)


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class SampleLog:
    """Appends one JSON line per measurement and flushes it at once."""

    def __init__(self, path: str | None):
        self.path = path
        self._file = open(path, "a") if path else None

    def write(self, record: dict) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _progress(total, desc, enabled):
    from tqdm import tqdm
    return tqdm(total=total, desc=f"calibrate: {desc}", disable=not enabled, leave=False,
                file=sys.stderr)


def _summary(samples) -> dict:
    low, high, _ = median_ci(samples)
    return {"value": float(np.median(samples)), "ci": [low, high], "n": len(samples)}


# --- ping-pong and the Hockney fit --------------------------------------------------

def pingpong(comm, sizes, plan: Plan, log: SampleLog | None = None,
             progress: bool = True, exchange: bool = False) -> dict | None:
    """Ping-pong between ranks 0 and 1 of ``comm``; on rank 0 returns
    {nbytes: one-way seconds samples}, elsewhere None (ranks above 1 only wait).

    ``exchange``: instead, both ranks ``Sendrecv`` n bytes to each other at once (the
    step of the ring, recursive doubling and Rabenseifner); a sample is the time of
    one ``Sendrecv`` on rank 0.

    Each rank sends from one buffer and receives into another (as OSU's
    ``osu_latency`` does): a message's source is data its rank wrote, as a gradient is.
    Bouncing back the buffer just received measures something else: on some hosts
    (this project's 2-vCPU AMD EPYC VM, 2026-11) sending lines that the peer's copy
    just wrote is 5x slower (1 MB: 445 us against 84 us)."""
    from mpi4py import MPI
    rank = comm.Get_rank()
    pair = comm.Split(0 if rank < 2 else MPI.UNDEFINED, rank)
    if pair == MPI.COMM_NULL:
        comm.Barrier()
        return None
    results = {}
    phase = "exchange" if exchange else "pingpong"
    bar = _progress(len(sizes), "exchange (Sendrecv)" if exchange else "ping-pong",
                    progress and rank == 0)
    for size in sizes:
        # A buffer of its own per size, as an application has: slices of one large
        # buffer sit on its (transparent huge) pages, which shared-memory MPI maps
        # faster than small buffers' pages. Written, not np.zeros: untouched pages all
        # map the kernel's one zero page, and sending from it measures the cache.
        view = np.ones(size, dtype=np.uint8)
        other = np.ones(size, dtype=np.uint8)
        if exchange:
            peer = 1 - rank
            for _ in range(2):
                pair.Sendrecv(view, peer, 3, other, peer, 3)
            pair.Barrier()
            start = time.perf_counter()
            pair.Sendrecv(view, peer, 3, other, peer, 3)
            estimate = pair.bcast(time.perf_counter() - start, root=0)
            repeats = int(min(plan.pingpong_max_repeats,
                              max(plan.pingpong_min_repeats, plan.pingpong_budget_s / estimate)))
            samples = []
            for _ in range(repeats):
                start = time.perf_counter()
                pair.Sendrecv(view, peer, 3, other, peer, 3)
                samples.append(time.perf_counter() - start)
            if rank == 0:
                results[size] = samples
                if log is not None:
                    log.write({"phase": phase, "nbytes": size, "seconds": samples})
            bar.update(1)
            continue
        repeats = None
        if rank == 0:
            start = time.perf_counter()
            for _ in range(2):  # warm-up, and the first estimate of a round trip
                pair.Send(view, 1, 1)
                pair.Recv(other, 1, 1)
            trip = (time.perf_counter() - start) / 2
            repeats = int(min(plan.pingpong_max_repeats,
                              max(plan.pingpong_min_repeats, plan.pingpong_budget_s / trip)))
            pair.send(repeats, 1, 2)
        else:
            for _ in range(2):
                pair.Recv(other, 0, 1)
                pair.Send(view, 0, 1)
            repeats = pair.recv(source=0, tag=2)
        samples = []
        for _ in range(repeats):
            if rank == 0:
                start = time.perf_counter()
                pair.Send(view, 1, 1)
                pair.Recv(other, 1, 1)
                samples.append((time.perf_counter() - start) / 2)
            else:
                pair.Recv(other, 0, 1)
                pair.Send(view, 0, 1)
        if rank == 0:
            results[size] = samples
            if log is not None:
                log.write({"phase": phase, "nbytes": size, "seconds": samples})
        bar.update(1)
    bar.close()
    pair.Free()
    comm.Barrier()
    return results if rank == 0 else None


def _fit_line(sizes, times):
    """Non-negative (α, β) minimising Σ((α + β n - t) / t)²; returns (α, β, residuals)."""
    from scipy.optimize import nnls
    sizes = np.asarray(sizes, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64)
    scale = 1.0 / times
    design = np.stack([scale, sizes * scale], axis=1)
    # β is tiny next to α: solve in scaled units so nnls is well conditioned
    column = np.array([1.0, 1.0 / max(sizes.max(), 1.0)])
    solution, _ = nnls(design / column, np.ones_like(times))
    alpha, beta = solution / column
    residuals = (alpha + beta * sizes - times) / times
    return float(alpha), float(beta), residuals


def _split(sizes, times, segments_left):
    alpha, beta, residuals = _fit_line(sizes, times)
    if (segments_left <= 1 or np.max(np.abs(residuals)) <= SPLIT_TOLERANCE
            or len(sizes) < 2 * MIN_SEGMENT_POINTS):
        return [(0, len(sizes))]
    best, best_k = None, None
    for k in range(MIN_SEGMENT_POINTS, len(sizes) - MIN_SEGMENT_POINTS + 1):
        error = (np.sum(_fit_line(sizes[:k], times[:k])[2] ** 2)
                 + np.sum(_fit_line(sizes[k:], times[k:])[2] ** 2))
        if best is None or error < best:
            best, best_k = error, k
    if best >= np.sum(residuals ** 2):
        return [(0, len(sizes))]
    # the remaining segment budget goes to the worse-fitting side first
    left = _split(sizes[:best_k], times[:best_k], segments_left - 1)
    right = _split(sizes[best_k:], times[best_k:], segments_left - len(left))
    return left + [(a + best_k, b + best_k) for a, b in right]


def fit_hockney(sizes, medians, seed: int = 0) -> list[dict]:
    """Piecewise Hockney fit (rule in the module docstring): one dict per segment with
    min_bytes, max_bytes (None for the last), alpha_s, beta_s_per_byte, their bootstrap
    CIs, the largest relative residual and the sizes it was fitted on."""
    order = np.argsort(sizes)
    sizes = np.asarray(sizes, dtype=np.float64)[order]
    medians = np.asarray(medians, dtype=np.float64)[order]
    if len(sizes) < 2:
        raise Deep500Error("the Hockney fit needs ping-pong times at two or more message "
                           "sizes")
    rng = np.random.default_rng(seed)
    segments = []
    bounds = _split(sizes, medians, MAX_SEGMENTS)
    for i, (a, b) in enumerate(bounds):
        s, t = sizes[a:b], medians[a:b]
        alpha, beta, residuals = _fit_line(s, t)
        boot = []
        for _ in range(BOOTSTRAP_RESAMPLES):
            pick = rng.integers(0, len(s), len(s))
            if len(np.unique(s[pick])) < 2:
                continue
            boot.append(_fit_line(s[pick], t[pick])[:2])
        boot = np.asarray(boot) if boot else np.full((1, 2), np.nan)
        segments.append({
            "min_bytes": 0 if i == 0 else int(s[0]),
            "max_bytes": None if i == len(bounds) - 1 else int(sizes[b]),
            "alpha_s": alpha, "beta_s_per_byte": beta,
            "ci_alpha": [float(np.percentile(boot[:, 0], 2.5)), float(np.percentile(boot[:, 0], 97.5))],
            "ci_beta": [float(np.percentile(boot[:, 1], 2.5)), float(np.percentile(boot[:, 1], 97.5))],
            "max_relative_residual": float(np.max(np.abs(residuals))),
            "fitted_sizes": [int(x) for x in s],
        })
    return segments


def _measurements(samples):
    return [{"nbytes": int(n), "median_s": float(np.median(samples[n])),
             "ci_s": list(median_ci(samples[n])[:2]), "n": len(samples[n])}
            for n in sorted(samples)]


def network_section(pingpong_samples: dict, exchange_samples: dict | None = None) -> dict:
    """The machine file's ``network``: Hockney segments fitted to the ping-pong medians
    and, if measured, ``exchange_segments`` fitted to the ``Sendrecv`` medians."""
    sizes = sorted(pingpong_samples)
    segments = fit_hockney(sizes, [float(np.median(pingpong_samples[n])) for n in sizes])
    section = {
        "method": "MPI ping-pong between ranks 0 and 1, one-way = round trip / 2; "
                  "exchange: both ranks Sendrecv at once",
        "alpha_s": {"value": segments[0]["alpha_s"], "ci": segments[0]["ci_alpha"]},
        "segments": segments,
        "measurements": _measurements(pingpong_samples),
    }
    if exchange_samples:
        sizes = sorted(exchange_samples)
        section["exchange_segments"] = fit_hockney(
            sizes, [float(np.median(exchange_samples[n])) for n in sizes])
        section["exchange_measurements"] = _measurements(exchange_samples)
    return section


def reduction_section(curve: list, method: str) -> dict:
    """The machine file's ``reduction``: γ at the smallest (cache-resident) and largest
    (memory-resident) buffer, and the whole curve."""
    return {"method": method,
            "gamma_cache_s_per_byte": curve[0], "gamma_memory_s_per_byte": curve[-1],
            "gamma_curve": curve}


# --- γ, triad, peak FLOP/s -------------------------------------------------------------

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


# --- the whole calibration -------------------------------------------------------------

def samples_path_for(out: str) -> str:
    base = out[:-5] if out.endswith(".yaml") else out[:-4] if out.endswith(".yml") else out
    return base + ".samples.jsonl"


def calibrate(out: str, comm=None, network: bool = True, quick: bool = False,
              progress: bool = True, pingpong_samples: dict | None = None,
              exchange_samples: dict | None = None, allreduce_samples: dict | None = None,
              allreduce_ranks: int | None = None,
              in_context_samples: dict | None = None,
              coherence_samples: dict | None = None) -> dict | None:
    """Measure every phase and write the machine file ``out`` (rank 0; returns its
    content). ``comm``: a communicator of two or more ranks for the ping-pong and the
    allreduce calls, or ``pingpong_samples``, ``exchange_samples`` and
    ``allreduce_samples`` (on ``allreduce_ranks`` ranks) and ``coherence_samples``
    measured elsewhere;
    ``network=False`` skips the network part (the file then says so, and network
    predictions refuse to use it) and the allreduce overheads."""
    from deep500.lv3_distributed import calibration_coherence as coherence
    from deep500.lv3_distributed import calibration_software as software
    from deep500.utils.machine import machine_from_dict, save_machine
    from deep500.utils.threads import set_thread_counts
    plan = Plan.make(quick)
    rank = comm.Get_rank() if comm is not None else 0
    samples_path = samples_path_for(out)
    log = SampleLog(samples_path if rank == 0 else None)
    if rank == 0 and os.path.exists(samples_path) and pingpong_samples is None:
        open(samples_path, "w").close()  # a new calibration starts a new samples file
    try:
        if network and pingpong_samples is None and comm is not None:
            pingpong_samples = pingpong(comm, plan.pingpong_sizes, plan, log, progress)
            exchange_samples = pingpong(comm, plan.pingpong_sizes, plan, log, progress,
                                        exchange=True)
            coherence_samples = coherence.measure_shared_write(
                comm, plan.coherence_sizes, log=log, progress=progress)
            allreduce_samples = software.measure_allreduce_calls(
                comm, plan.allreduce_budget_s, plan.allreduce_min_repeats,
                plan.allreduce_max_repeats, log, progress)
            allreduce_ranks = comm.Get_size()
            in_context_samples = software.measure_allreduce_in_context(
                comm, plan.context_repeats, log=log, progress=progress)
        if rank != 0:
            return None
        data = {
            "name": socket.gethostname(),
            "source": (f"calibrated on host {socket.gethostname()} at "
                       f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}"
                       f" by deep500 calibrate{' --quick' if quick else ''}"),
            "samples_file": os.path.basename(samples_path),
        }
        if network:
            data["network"] = network_section(pingpong_samples, exchange_samples)
            if coherence_samples and coherence_samples.get("sum"):
                data["network"]["coherence"] = coherence.coherence_section(coherence_samples)
        else:
            data["network"] = {"skipped": "calibrated with --no-network: no ping-pong; "
                                          "re-run 'deep500 calibrate --np 2' to measure it"}
        bar = _progress(len(plan.gamma_sizes), "gamma (numpy add)", progress)
        curve = []
        for nbytes in plan.gamma_sizes:
            samples = measure_gamma(nbytes, plan.repeats * 2)
            log.write({"phase": "gamma", "nbytes": nbytes, "s_per_byte": samples})
            curve.append({"buffer_bytes": nbytes, **_summary(samples)})
            bar.update(1)
        bar.close()
        data["reduction"] = reduction_section(curve, "numpy.add(a, b, out=a), float32")
        bar = _progress(1, "memory (triad)", progress)
        samples = measure_triad(plan.triad_elements, plan.repeats)
        log.write({"phase": "triad", "elements": plan.triad_elements,
                   "bytes_per_s": samples})
        bar.close()
        data["memory"] = {"method": "STREAM-like triad a = b + s*c in NumPy, float64, "
                                    "24 bytes per element (McCalpin 1995)",
                          "bandwidth_bytes_per_s": {**_summary(samples),
                                                    "array_bytes": plan.triad_elements * 8}}
        peak = {"gemm": {}, "conv": {}}
        threads = list(range(1, plan.max_threads + 1))
        bar = _progress(2 * len(threads), "peak FLOP/s", progress)
        conv_method = None
        try:
            for t in threads:
                set_thread_counts(t)
                samples = measure_gemm(plan.gemm_n, plan.repeats)
                log.write({"phase": "gemm", "threads": t, "n": plan.gemm_n, "flops_per_s": samples})
                peak["gemm"][t] = _summary(samples)
                bar.update(1)
                samples, conv_method = measure_conv(plan.conv_shape, plan.repeats)
                log.write({"phase": "conv", "threads": t, "shape": list(plan.conv_shape),
                           "method": conv_method, "flops_per_s": samples})
                peak["conv"][t] = _summary(samples)
                bar.update(1)
        finally:
            set_thread_counts(usable_cpus())
        bar.close()
        data["compute"] = {"method": {"gemm": f"numpy.matmul float32 {plan.gemm_n}^2",
                                      "conv": f"{conv_method}, NCHW+K {list(plan.conv_shape)}, 3x3"},
                           "peak_flops_per_s": peak}
        bar = _progress(1, "fusion copy", progress)
        fusion = software.measure_fusion_copy(plan.repeats, log)
        bar.close()
        section = software.software_section(
            allreduce_samples if network else None, allreduce_ranks,
            machine_from_dict(data, path=out), fusion,
            in_context_samples if network else None)
        if section:
            data["software"] = section
        machine_from_dict(data, path=out)  # the file written must load
        save_machine(data, out)
        return data
    finally:
        log.close()


def _pingpong_main(argv) -> int:
    """``python -m deep500.lv3_distributed.calibration pingpong SAMPLES.jsonl [--quick]`` under
    mpirun: the network phases alone (ping-pong, exchange, 4-byte allreduce calls),
    their samples appended to the file."""
    from mpi4py import MPI
    quick = "--quick" in argv
    path = argv[1]
    comm = MPI.COMM_WORLD
    log = SampleLog(path if comm.Get_rank() == 0 else None)
    plan = Plan.make(quick)
    try:
        for exchange in (False, True):
            pingpong(comm, plan.pingpong_sizes, plan, log,
                     progress="--quiet" not in argv, exchange=exchange)
        from deep500.lv3_distributed.calibration_coherence import measure_shared_write
        measure_shared_write(comm, plan.coherence_sizes, log=log,
                             progress="--quiet" not in argv)
        from deep500.lv3_distributed.calibration_software import (measure_allreduce_calls,
                                                         measure_allreduce_in_context)
        measure_allreduce_calls(comm, plan.allreduce_budget_s, plan.allreduce_min_repeats,
                                plan.allreduce_max_repeats, log,
                                progress="--quiet" not in argv)
        measure_allreduce_in_context(comm, plan.context_repeats, log=log,
                                     progress="--quiet" not in argv)
    finally:
        log.close()
    return 0


def read_sample_records(path: str, phase: str):
    """The records of ``phase`` in a samples file, in order (a line cut by a kill is
    passed over)."""
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("phase") == phase:
                yield record


def read_pingpong_samples(path: str, phase: str = "pingpong") -> dict:
    """{nbytes: samples} from the lines of ``phase`` ("pingpong" or "exchange") of a
    samples file."""
    return {int(r["nbytes"]): r["seconds"] for r in read_sample_records(path, phase)}


def run_calibration(out: str, np_ranks: int | None = None, network: bool = True,
                    quick: bool = False, progress: bool = True) -> dict | None:
    """What ``deep500 calibrate`` does: the ping-pong in this MPI world (two ranks or
    more), or under ``mpirun -np N`` started for it (``np_ranks``), then the rest here."""
    from deep500.lv3_distributed.mpi_launch import in_mpi_world, mpirun_executable
    comm = None
    if in_mpi_world():
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        if np_ranks is not None and np_ranks != comm.Get_size():
            raise Deep500Error(f"--np {np_ranks}, but mpirun started {comm.Get_size()} "
                               f"rank(s); give one of the two")
    if network:
        if comm is not None and comm.Get_size() < 2 or comm is None and (np_ranks or 1) < 2:
            raise Deep500Error(
                "calibrate measures the network by a ping-pong between two ranks, but it "
                "runs on one: use 'deep500 calibrate --np 2 --out FILE' (or mpirun -np 2 "
                "deep500 calibrate ...), or skip the network with --no-network")
        if comm is None:
            import subprocess
            samples_path = samples_path_for(out)
            os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
            open(samples_path, "w").close()
            command = [mpirun_executable(), "-np", str(int(np_ranks)), sys.executable, "-m",
                       "deep500.lv3_distributed.calibration", "pingpong", samples_path]
            command += ["--quick"] if quick else []
            command += [] if progress else ["--quiet"]
            process = subprocess.Popen(command)
            try:
                status = process.wait()
            except KeyboardInterrupt as stop:  # let mpirun stop its ranks, as mpi_fork does
                import signal
                from deep500.lv3_distributed.mpi_launch import _stop_mpirun
                _stop_mpirun(process, getattr(stop, "signum", signal.SIGINT))
                raise
            if status != 0:
                raise Deep500Error(f"the ping-pong under mpirun failed (exit status {status}); "
                                   f"its samples so far are in {samples_path}")
            from deep500.lv3_distributed.calibration_coherence import read_coherence_samples
            from deep500.lv3_distributed.calibration_software import (read_allreduce_samples,
                                                             read_in_context_samples)
            allreduce_samples, allreduce_ranks = read_allreduce_samples(samples_path)
            return calibrate(out, network=True, quick=quick, progress=progress,
                             pingpong_samples=read_pingpong_samples(samples_path),
                             exchange_samples=read_pingpong_samples(samples_path, "exchange"),
                             allreduce_samples=allreduce_samples,
                             allreduce_ranks=allreduce_ranks,
                             in_context_samples=read_in_context_samples(samples_path),
                             coherence_samples=read_coherence_samples(samples_path))
    return calibrate(out, comm=comm, network=network, quick=quick, progress=progress)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "pingpong":
        sys.exit(_pingpong_main(sys.argv[1:]))
    sys.exit("usage: python -m deep500.lv3_distributed.calibration pingpong SAMPLES.jsonl [--quick]")
