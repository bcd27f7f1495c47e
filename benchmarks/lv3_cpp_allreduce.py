"""Gradient exchange per step: Deep500's Python ring allreduce against the C++ MPI
operators of ``CppConsistentDecentralized`` and ``SparseTopKDecentralized``.

Under ``mpirun -np 2`` (started by ``mpi_fork`` when run as a plain script), for float32
gradient buffers of 1 KB .. 16 MB (powers of 4), each rank holding its own seeded
buffer ``x`` and outputs allocated once, the communication phase of one step of each
scheme:

* ``d5 ring``: ``net.allreduce(x, op="average", out=out)``, the Python
  ``CommunicationNetwork`` ring of ``ConsistentDecentralized``: the baseline (ratio 1);
* ``d5 mpi``: the same through mpi4py's ``MPI_Allreduce`` (``algorithm="mpi"``), to
  separate the C++ call from the MPI library;
* ``cpp mpi``: the ``mpi_allreduce`` C++ operator (``MPI_Allreduce`` on the buffer,
  then the division by p), called as the scheme calls it (``run_forward`` on raw
  pointers, no per-call checks or allocation);
* ``cpp topk``: the ``sparse_topk_allreduce`` operator at ``--density`` (default 0.01):
  adding the residual, top-k selection, one ``MPI_Allgather`` of k (int64, float32)
  records per rank and the local dense sum, as ``SparseTopKDecentralized``'s step.

Correctness first: the dense results equal NumPy's mean of every rank's buffer, the
sparse one the mean of every rank's top-k entries (float32 tolerance). The operators
are built once per size (``$DEEP500_CACHE`` or ``~/.cache/deep500``; the build times
are printed, a cache hit costs milliseconds).

Method (as ``benchmarks/lv3_allreduce.py``): warm-up, then ``--rounds`` rounds of
``reps`` repetitions, a round lasting about ``--round-ms``. Each repetition calls every
variant once in an order drawn afresh (the same on every rank), each call timed on its
own after a ``Barrier`` outside the clock; a variant's time in a round is its mean per
call on the slower rank. The table shows the median over rounds, the median and
interquartile range of the per-round ratios to ``d5 ring``, and the bytes each rank
sends per call by the recorded model (ring allreduce 2(p-1)/p * n; ring allgather
(p-1) * k * 12). One thread per rank; the garbage collector is off in timed rounds.
Timings on a shared machine are noisy: read the ratios, and rerun before trusting a
small difference.

Run:  python benchmarks/lv3_cpp_allreduce.py [--np 2] [--rounds 11] [--round-ms 100]
        [--max-size 16M] [--density 0.01] [--smoke]
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from deep500.frameworks.reference.distributed.cpp_allreduce import (  # noqa: E402
    INDEX_BYTES, allreduce_operator, sparse_topk_operator)
from deep500.lv3_distributed import CommunicationNetwork, guarded_main, mpi_fork  # noqa: E402
from benchmark_targets import expected_run_time  # noqa: E402
from run_time_estimates import lv3_cpp_allreduce  # noqa: E402
from lv3_allreduce import (KB, _label, _size, _us, per_call_times,  # noqa: E402
                           say)  # the same pairing, clock and formatting

BASELINE = "d5 ring"


def rank_buffer(rank: int, count: int) -> np.ndarray:
    return np.random.default_rng([7, rank]).standard_normal(count).astype(np.float32)


def sparse_reference(p: int, count: int, k: int) -> np.ndarray:
    """The mean over ranks of each rank's k largest-magnitude entries (ties to the
    lower index, as the kernel)."""
    total = np.zeros(count, np.float64)
    for r in range(p):
        x = rank_buffer(r, count)
        top = np.lexsort((np.arange(count), -np.abs(x)))[:k]
        total[top] += x[top]
    return total / p


def variants(comm, net, nbytes: int, density: float, built: list):
    """The calls to time (each checked against NumPy first), the modelled bytes each
    rank sends per call, k, and the arrays the raw pointers point into (keep them)."""
    p, rank = comm.Get_size(), comm.Get_rank()
    count = nbytes // 4
    k = max(1, min(count, math.ceil(round(density * count, 9))))
    x = rank_buffer(rank, count)
    mean = np.mean([rank_buffer(r, count).astype(np.float64) for r in range(p)], axis=0)
    started = time.perf_counter()
    dense_op = allreduce_operator(count, np.float32, average=True)
    sparse_op = sparse_topk_operator(count, np.float32, average=True)
    built.append(time.perf_counter() - started)
    handle = np.array([comm.py2f()], np.int64)
    k_array = np.array([k], np.int64)
    out = np.empty_like(x)
    accumulated, residual, y = np.empty_like(x), np.zeros_like(x), np.empty_like(x)
    dense_pointers = [x.ctypes.data, handle.ctypes.data, out.ctypes.data]
    sparse_pointers = [accumulated.ctypes.data, handle.ctypes.data, k_array.ctypes.data,
                       y.ctypes.data, residual.ctypes.data]

    def sparse_step():  # as the scheme's step: the gradient (x) plus the residual
        np.add(x, residual, out=accumulated)
        sparse_op.run_forward(sparse_pointers)

    calls = {
        BASELINE: lambda: net.allreduce(x, op="average", out=out, algorithm="ring"),
        "d5 mpi": lambda: net.allreduce(x, op="average", out=out, algorithm="mpi"),
        "cpp mpi": lambda: dense_op.run_forward(dense_pointers),
        "cpp topk": sparse_step,
    }
    for name in (BASELINE, "d5 mpi", "cpp mpi"):
        out.fill(np.nan)
        calls[name]()
        if not np.allclose(out, mean, rtol=1e-5, atol=1e-6):
            raise AssertionError(f"rank {rank}: {name} mean of {_label(nbytes)} differs "
                                 f"from NumPy by {np.nanmax(np.abs(out - mean))}")
    sparse_step()  # the first step, residual zero
    expected = sparse_reference(p, count, k)
    if not np.allclose(y, expected, rtol=1e-5, atol=1e-6):
        raise AssertionError(f"rank {rank}: cpp topk of {_label(nbytes)} differs from "
                             f"NumPy by {np.abs(y - expected).max()}")
    modelled = {BASELINE: 2 * (p - 1) * nbytes // p, "d5 mpi": 2 * (p - 1) * nbytes // p,
                "cpp mpi": 2 * (p - 1) * nbytes // p,
                "cpp topk": (p - 1) * k * (INDEX_BYTES + 4)}
    arrays = (x, out, handle, k_array, accumulated, residual, y)
    return calls, modelled, k, arrays


def measure(comm, calls: dict, args) -> dict[str, list[float]]:
    per_call_times(comm, calls, args.warmup, 0)
    estimate = per_call_times(comm, calls, 2, 1)
    reps = max(1, min(args.max_reps, int(args.round_ms / 1e3 / sum(estimate.values()))))
    reps = comm.bcast(reps, root=0)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for round_ in range(args.rounds):
        for name, seconds in per_call_times(comm, calls, reps, 100 + round_).items():
            times[name].append(seconds)
    times["_reps"] = [reps]
    return times


def report(comm, nbytes: int, times: dict, modelled: dict, k: int) -> dict[str, float]:
    baseline = times[BASELINE]
    reps = times["_reps"][0]
    ratios_by_variant = {}
    for name, samples in times.items():
        if name == "_reps":
            continue
        ratios = [ours / base for ours, base in zip(samples, baseline)]
        ratio = statistics.median(ratios)
        ratios_by_variant[name] = ratio
        low, high = np.percentile(ratios, [25, 75])
        shown = "1" if name == BASELINE else f"{ratio:.3f}"
        iqr = "-" if name == BASELINE else f"[{low:.3f}, {high:.3f}]"
        extra = f"  k={k}" if name == "cpp topk" else ""
        say(comm, f"{_label(nbytes):>7} {name:<9} {_us(statistics.median(samples)):>12} "
            f"{shown:>7} {iqr:>16} {modelled[name]:>12,} {reps:>5}{extra}")
    return ratios_by_variant


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=2, help="ranks when started without "
                        "mpirun (mpi_fork)")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--round-ms", type=float, default=100.0)
    parser.add_argument("--max-reps", type=int, default=2000)
    parser.add_argument("--min-size", type=_size, default=KB)
    parser.add_argument("--max-size", type=_size, default=16 * KB * KB)
    parser.add_argument("--density", type=float, default=0.01)
    parser.add_argument("--smoke", action="store_true", help="3 sizes up to 1 MB, 3 rounds")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.warmup, args.round_ms = 3, 1, 10.0
        args.max_size = min(args.max_size, KB * KB)
    mpi_fork(args.np)

    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    with guarded_main(comm):
        net = CommunicationNetwork(comm)
        p = comm.Get_size()
        sizes = [s for s in (KB << (2 * i) for i in range(8))
                 if args.min_size <= s <= args.max_size]
        if args.smoke:
            sizes = [s for s in sizes if s in (KB, 64 * KB, KB * KB)]
        say(comm, f"# {platform.platform()}, {os.cpu_count()} cores, {p} ranks, "
            f"{MPI.Get_library_version().splitlines()[0].strip()}, float32 gradients, "
            f"top-k density {args.density}, OMP_NUM_THREADS="
            f"{os.environ.get('OMP_NUM_THREADS')}")
        if comm.Get_rank() == 0:
            expected_run_time(*lv3_cpp_allreduce(len(sizes), args.rounds, args.round_ms))
        say(comm, f"\n== Gradient exchange per step, {p} ranks: ratio = variant / "
            f"{BASELINE} (Python CommunicationNetwork ring), paired per round, medians "
            f"over {args.rounds} rounds ==")
        say(comm, f"{'size':>7} {'variant':<9} {'median/call':>12} {'ratio':>7} "
              f"{'IQR of rounds':>16} {'B sent/rank':>12} {'reps':>5}")
        built: list[float] = []
        summary = []
        for nbytes in sizes:
            calls, modelled, k, _arrays = variants(comm, net, nbytes, args.density, built)
            ratios = report(comm, nbytes, measure(comm, calls, args), modelled, k)
            summary.append((nbytes, ratios))
        say(comm, "\n== Summary: ratio to d5 ring (below 1 is faster) ==")
        for nbytes, ratios in summary:
            say(comm, f"{_label(nbytes):>7}: cpp mpi {ratios['cpp mpi']:.3f}, "
                f"cpp topk {ratios['cpp topk']:.3f}, d5 mpi {ratios['d5 mpi']:.3f}")
        say(comm, f"operator builds or cache lookups: {sum(built):.1f} s for "
            f"{2 * len(sizes)} operators (rank 0)")
        net.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
