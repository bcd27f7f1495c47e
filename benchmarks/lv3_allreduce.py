"""Allreduce bandwidth: Deep500's ``CommunicationNetwork.allreduce`` against raw mpi4py
``Allreduce`` on the same buffers, and against ``torch.distributed`` with gloo.

Target: Deep500's default allreduce (``CommunicationNetwork().allreduce_algorithm``)
within 5% of raw mpi4py at 1 MB and above (median per-round ratio <= 1.05).

Under ``mpirun -np 2`` (started by ``mpi_fork`` when run as a plain script), for float32
sums of 1 KB .. 64 MB (powers of 4), each rank holding its own seeded input ``x`` and an
output ``out`` allocated once:

* ``mpi4py``: ``comm.Allreduce(x, out)``: the baseline, MPICH's own algorithm choice.
* ``d5 ring``: ``net.allreduce(x, out=out, algorithm="ring")``: Deep500's ring
  (Patarasuk & Yuan 2009), ``Sendrecv`` on chunks and a NumPy reduction, bytes counted.
* ``d5 mpi``: ``net.allreduce(x, out=out, algorithm="mpi")``: the library call behind
  Deep500's checks and (modelled) counting.
* ``d5 linear``, ``d5 binomial``, ``d5 recursive_doubling``, ``d5 rabenseifner``,
  ``d5 segmented_ring``: Deep500's other algorithms (``--algorithms`` picks; all of
  ``allreduce_names()`` by default), same call with ``algorithm=<name>``.
* ``gloo``: ``torch.distributed.all_reduce`` of ``torch.from_numpy(out)`` in place
  (gloo has no out-of-place allreduce; the values grow each call, which costs nothing
  in IEEE arithmetic), process group from MPI's rank and size with a ``TCPStore`` on
  localhost. Skipped with the reason printed if it cannot start. Measured after the
  MPI variants, in a table of its own paired with mpi4py again: gloo's threads share
  the two cores with the ranks, and interleaved with the MPI variants they slowed
  every one of them (mpi4py at 1 KB went from 6 to 19 us).

Correctness first: every variant's result equals NumPy's sum of all ranks' inputs
(float32 tolerance) before anything is timed.

Method: warm-up calls, then ``--rounds`` rounds of ``reps`` repetitions (``reps`` fixed
per size so that a round lasts about ``--round-ms``). Each repetition calls every
variant once, each call timed on its own after a ``Barrier`` outside the clock, so a
slow moment of the shared machine hits all variants alike; the order is drawn afresh
every repetition (the same on every rank), so no variant always follows another. A
variant's time in a round is its mean per call on the slower rank (a collective is done
when every rank is done). The table shows per variant the median over rounds, the
median and interquartile range of the per-round ratios to mpi4py, the algorithm
bandwidth n/t and the bus bandwidth 2(p-1)/p * n/t (the bytes each rank must move in
a bandwidth-optimal allreduce, per second). One thread per rank
(``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``); the garbage collector is off in
timed rounds.

Also printed: the cost of recording one call in ``CommunicationVolume`` as a fraction
of the 1 MB allreduce (target < 1%).

Run:  python benchmarks/lv3_allreduce.py [--np 2] [--rounds 15] [--round-ms 100]
        [--max-size 64M] [--no-gloo] [--smoke]
      (or: mpirun -np 2 python benchmarks/lv3_allreduce.py ...)
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import socket
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from deep500.lv3_distributed import (CommunicationNetwork,  # noqa: E402
                                     CommunicationVolume, allreduce_names, guarded_main,
                                     mpi_fork)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchmark_targets import TARGETS, add_check_option, expected_run_time  # noqa: E402

TARGET = 1.05
TARGET_FROM = 1 << 20
KB = 1 << 10


def _size(text: str) -> int:
    units = {"K": KB, "M": KB * KB, "G": KB * KB * KB}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(
        text)


def _label(nbytes: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} us" if seconds < 1e-2 else f"{seconds * 1e3:,.2f} ms"


def say(comm, *args) -> None:
    if comm.Get_rank() == 0:
        print(*args, flush=True)


# -- gloo ---------------------------------------------------------------------------------
def start_gloo(comm):
    """A gloo process group over MPI's ranks; (torch.distributed, None) or (None, reason)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        return None, f"torch is not installed ({exc})"
    reason = None
    port = 0
    if comm.Get_rank() == 0:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    port = comm.bcast(port, root=0)
    try:
        from datetime import timedelta
        torch.set_num_threads(1)
        store = dist.TCPStore("127.0.0.1", port, comm.Get_size(), comm.Get_rank() == 0,
                              timeout=timedelta(seconds=30))
        dist.init_process_group("gloo", store=store, rank=comm.Get_rank(),
                                world_size=comm.Get_size())
    except Exception as exc:  # any failure to start: report it and go on without gloo
        reason = f"{type(exc).__name__}: {exc}"
    reasons = comm.allgather(reason)
    failed = [f"rank {r}: {why}" for r, why in enumerate(reasons) if why]
    if failed:
        if dist.is_initialized():
            dist.destroy_process_group()
        return None, "; ".join(failed)
    return dist, None


# -- measuring ------------------------------------------------------------------------------
def per_call_times(comm, calls: dict, reps: int, seed: int) -> dict[str, float]:
    """Seconds per call of each variant over ``reps`` repetitions, on the slower rank.

    Every repetition calls each variant once, in an order drawn afresh (the same on
    every rank), so no variant always follows another (the one after a slow variant
    would absorb the ranks' skew); a ``Barrier``, outside the clock, lines the ranks up
    before every call.
    """
    names = list(calls)
    orders = np.random.default_rng(seed).permuted(
        np.tile(np.arange(len(names)), (reps, 1)), axis=1)
    spent = np.zeros(len(names))
    clock, barrier = time.perf_counter, comm.Barrier
    gc.disable()
    try:
        for order in orders.tolist():
            for i in order:
                call = calls[names[i]]
                barrier()
                start = clock()
                call()
                spent[i] += clock() - start
    finally:
        gc.enable()
    slowest = np.empty_like(spent)
    from mpi4py import MPI   # imported by the time anything is measured
    comm.Allreduce(spent / reps, slowest, op=MPI.MAX)
    return dict(zip(names, slowest.tolist()))


def buffers(comm, nbytes: int):
    """This rank's seeded float32 input, an output buffer, and NumPy's sum over ranks."""
    p, rank = comm.Get_size(), comm.Get_rank()
    count = nbytes // 4
    x = np.random.default_rng([7, rank]).random(count, dtype=np.float32)
    expected = sum(np.random.default_rng([7, r]).random(count, dtype=np.float32)
                   .astype(np.float64) for r in range(p))
    return x, np.empty_like(x), expected


def measure(comm, variants: dict, x, out, expected, nbytes: int,
            args) -> dict[str, list[float]]:
    """Check every variant's result, warm up, then time ``--rounds`` rounds."""
    for name, call in variants.items():  # correctness first
        out[...] = x  # (gloo reduces in place)
        call()
        if not np.allclose(out, expected, rtol=1e-5, atol=1e-5):
            raise AssertionError(f"rank {comm.Get_rank()}: {name} allreduce of "
                                 f"{_label(nbytes)} differs from NumPy by "
                                 f"{np.abs(out - expected).max()}")
    per_call_times(comm, variants, args.warmup, 0)  # warm-up
    estimate = per_call_times(comm, variants, 2, 1)
    # A round should last about --round-ms; every rank must agree on reps.
    reps = max(1, min(args.max_reps, int(args.round_ms / 1e3 / sum(estimate.values()))))
    reps = comm.bcast(reps, root=0)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(args.rounds):
        for name, seconds in per_call_times(comm, variants, reps, 100 + round_).items():
            times[name].append(seconds)
    times["_reps"] = [reps]
    return times


def measure_mpi(comm, net, nbytes: int, args) -> dict[str, list[float]]:
    x, out, expected = buffers(comm, nbytes)
    variants = {"mpi4py": lambda: comm.Allreduce(x, out)}
    for name in args.algorithms:
        variants[f"d5 {name}"] = (lambda name: lambda: net.allreduce(
            x, out=out, algorithm=name))(name)
    return measure(comm, variants, x, out, expected, nbytes, args)


def measure_gloo(comm, dist, nbytes: int, args) -> dict[str, list[float]]:
    import torch
    x, out, expected = buffers(comm, nbytes)
    tensor = torch.from_numpy(out)
    return measure(comm, {
        "mpi4py": lambda: comm.Allreduce(x, out),
        "gloo": lambda: dist.all_reduce(tensor),
    }, x, out, expected, nbytes, args)


def counting_cost() -> float:
    """Seconds per ``CommunicationVolume.record`` call (what every call adds)."""
    volume = CommunicationVolume()
    record = volume.record
    calls = 200_000
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            record("allreduce", "ring", "exact", 1, 1, 2, 2)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def report(comm, results, p: int, default: str) -> list[tuple[int, float]]:
    say(comm, f"{'size':>7} {'variant':<21} {'median/call':>12} {'ratio':>7} "
        f"{'IQR of rounds':>16} {'algbw GB/s':>10} {'busbw GB/s':>10} {'reps':>5}")
    default_ratios = []
    for nbytes, times in results.items():
        baseline = times["mpi4py"]
        reps = times["_reps"][0]
        for name, samples in times.items():
            if name == "_reps":
                continue
            ratios = [ours / base for ours, base in zip(samples, baseline)]
            median = statistics.median(samples)
            ratio = statistics.median(ratios)
            low, high = np.percentile(ratios, [25, 75])
            algbw = nbytes / median / 1e9
            busbw = 2 * (p - 1) / p * algbw
            iqr = "-" if name == "mpi4py" else f"[{low:.3f}, {high:.3f}]"
            shown = "1" if name == "mpi4py" else f"{ratio:.3f}"
            say(comm, f"{_label(nbytes):>7} {name:<21} {_us(median):>12} {shown:>7} "
                f"{iqr:>16} {algbw:>10.2f} {busbw:>10.2f} {reps:>5}")
            if name == f"d5 {default}" and nbytes >= TARGET_FROM:
                default_ratios.append((nbytes, ratio))
    return default_ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=2, help="ranks when started without "
                        "mpirun (mpi_fork)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--round-ms", type=float, default=100.0)
    parser.add_argument("--max-reps", type=int, default=2000)
    parser.add_argument("--min-size", type=_size, default=KB)
    parser.add_argument("--max-size", type=_size, default=64 * KB * KB)
    parser.add_argument("--no-gloo", action="store_true")
    parser.add_argument("--algorithms", default=",".join(allreduce_names()),
                        help="Deep500 allreduce algorithms to time, comma-separated "
                             f"(default: all, {','.join(allreduce_names())})")
    parser.add_argument("--smoke", action="store_true", help="3 sizes, 3 rounds")
    add_check_option(parser)
    args = parser.parse_args()
    args.algorithms = [a for a in args.algorithms.split(",") if a]
    unknown = sorted(set(args.algorithms) - set(allreduce_names()))
    if unknown:
        parser.error(f"--algorithms: unknown {unknown}; known: "
                     f"{', '.join(allreduce_names())}")
    if "ring" not in args.algorithms:   # the target line is about the default
        args.algorithms.insert(0, "ring")
    if args.smoke:
        args.rounds, args.warmup, args.round_ms = 3, 1, 10.0
        args.min_size, args.max_size = min(args.min_size, KB), min(args.max_size, KB * KB)
    mpi_fork(args.np)

    global _MPI
    from mpi4py import MPI
    _MPI = MPI
    comm = MPI.COMM_WORLD
    with guarded_main(comm):
        net = CommunicationNetwork(comm)
        p = comm.Get_size()
        sizes = [s for s in (KB << (2 * i) for i in range(11))
                 if args.min_size <= s <= args.max_size]
        if args.smoke:
            sizes = [s for s in sizes if s in (KB, 64 * KB, KB * KB)]
        say(comm, f"# {platform.platform()}, {os.cpu_count()} cores, {p} ranks, "
            f"{MPI.Get_library_version().splitlines()[0].strip()}, mpi4py "
            f"{__import__('mpi4py').__version__}, float32 sum, "
            f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
        if comm.Get_rank() == 0:
            passes = 1 if args.no_gloo else 2
            expected_run_time(passes * len(sizes) * args.rounds * args.round_ms / 1e3,
                              f"{len(sizes)} sizes x {args.rounds} rounds of about "
                              f"{args.round_ms:g} ms, every variant in each round, "
                              f"{'MPI' if args.no_gloo else 'MPI and gloo'}; longer where "
                              f"one call of every variant exceeds --round-ms (the large "
                              f"sizes), plus checks and warm-up")
        say(comm, f"\n== Allreduce, {p} ranks: ratio = variant / raw mpi4py Allreduce "
            f"(paired per round), medians over {args.rounds} rounds ==")
        results = {nbytes: measure_mpi(comm, net, nbytes, args) for nbytes in sizes}
        default = net.allreduce_algorithm
        ratios = report(comm, results, p, default)

        # gloo last: its process group's threads share the cores with the ranks and
        # slowed every MPI variant when they ran interleaved
        dist, reason = (None, "--no-gloo") if args.no_gloo else start_gloo(comm)
        if dist is None:
            say(comm, f"\n# gloo skipped: {reason}")
        else:
            import torch
            say(comm, f"\n== torch.distributed gloo (torch {torch.__version__}, TCPStore "
                f"on 127.0.0.1), {p} ranks: ratio = gloo / raw mpi4py Allreduce ==")
            report(comm, {nbytes: measure_gloo(comm, dist, nbytes, args)
                          for nbytes in sizes}, p, default)
            dist.destroy_process_group()

        say(comm, "\n== Targets ==")
        for nbytes, ratio in ratios:
            verdict = TARGETS.judge(f"default allreduce / mpi4py at {_label(nbytes)}",
                                    ratio <= TARGET)
            say(comm, f"default allreduce (d5 {default}) / mpi4py at {_label(nbytes)}: "
                f"{ratio:.3f} (target <= {TARGET})  {verdict}")
        if not ratios:
            say(comm, f"(no size >= {_label(TARGET_FROM)} measured; target not evaluated)")
        cost = counting_cost()
        reference = results.get(TARGET_FROM, results[max(results)])
        allreduce_time = statistics.median(reference[f"d5 {default}"])
        nbytes = TARGET_FROM if TARGET_FROM in results else max(results)
        fraction = cost / allreduce_time
        say(comm, f"counting cost: {cost * 1e6:.2f} us per recorded call = "
            f"{100 * fraction:.3f}% of a {_label(nbytes)} allreduce "
            f"({_us(allreduce_time)}) (target < 1%)  "
            f"{TARGETS.judge('counting cost', fraction < 0.01)}")
        net.close()
    return TARGETS.exit_status(args.check) if comm.Get_rank() == 0 else 0


_MPI = None

if __name__ == "__main__":
    sys.exit(main())
