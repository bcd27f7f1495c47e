"""``allreduce_sizes``: a distributed configuration also times its scheme's allreduce
at each message size, before it trains, so that one record holds both what the
collective costs per message and what it costs in a training step (Catalán's thesis,
Figs. 5.11–5.15: the gain of choosing the collective per message size and in a
step).

Method (as ``deep500 calibrate`` times its calls, ``calibration/software.py``): per
size, a float32 buffer of ``bytes / 4`` elements, the scheme's algorithm through
``CommunicationNetwork.allreduce`` (``"mpi"``: ``MPI_Allreduce``, whose algorithm
MPICH took from ``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` at start-up), summed in place
(zeros, so the values never grow); one call, then one timed call that estimates the
cost (the slowest rank's) and fixes, the same on every rank, the warm-up calls for
about ``WARMUP_S`` (at least one: TCP connections of a fresh MPI job on the emulated
cluster need a few round trips to open their congestion window, and a configuration
that runs first in its part must not pay for that alone) and the repeats for about
``BUDGET_S`` (at least ``MIN_REPEATS``, enough for a 95% CI of the median, at most
``MAX_REPEATS``); every call is timed on its own after a ``Barrier`` outside the clock,
the garbage collector off, and a call's time is the slowest rank's (a collective is
done when every rank is). Rank 0 keeps every sample and their median with its
nonparametric 95% CI (Hoefler & Belli, SC'15).
"""
from __future__ import annotations

import gc
import time

import numpy as np

from deep500.recipe.problems import describe
from deep500.utils.errors import RecipeError
from deep500.utils.statistics import summarize

BUDGET_S = 0.25
WARMUP_S = 0.05
MIN_REPEATS = 11
MAX_REPEATS = 100
MAX_BYTES = 1 << 30


def parse_allreduce_sizes(value, where, recipe_dir=None) -> tuple:
    """A non-empty list of message sizes in bytes (multiples of 4, float32 buffers),
    as a sorted tuple without repeats."""
    if not isinstance(value, list) or not value:
        raise RecipeError(f"{where}: expected a list of message sizes in bytes (e.g. "
                          f"[8, 1024, 1048576]), got {describe(value)}")
    for index, size in enumerate(value):
        if (not isinstance(size, int) or isinstance(size, bool)
                or not 4 <= size <= MAX_BYTES or size % 4):
            raise RecipeError(f"{where}[{index}]: a message size is a multiple of 4 bytes "
                              f"(float32 elements) from 4 to {MAX_BYTES}, got "
                              f"{describe(size)}")
    return tuple(sorted(set(value)))


def time_allreduce_sizes(comm, sizes, algorithm, segment_bytes=None) -> dict | None:
    """Time ``algorithm`` on the ranks of ``comm`` (an ``MPI.Comm``) at each of
    ``sizes`` bytes (module docstring). Collective; rank 0 returns ``{"algorithm",
    "mpich_allreduce", "ranks", "method", "sizes": [{"bytes", "repeats", "samples",
    **summarize(samples)}]}``, the other ranks None."""
    from mpi4py import MPI
    from deep500.lv3_distributed.collectives import allreduce_algorithm
    from deep500.lv3_distributed.communication import CommunicationNetwork
    net = CommunicationNetwork(comm)
    rank, clock, rows = comm.Get_rank(), time.perf_counter, []
    try:
        for nbytes in sizes:
            buffer = np.zeros(nbytes // 4, dtype=np.float32)

            def call():
                net.allreduce(buffer, out=buffer, algorithm=algorithm,
                              segment_bytes=segment_bytes)

            comm.Barrier()
            call()
            comm.Barrier()
            start = clock()
            call()
            estimate = max(comm.allreduce(clock() - start, op=MPI.MAX), 1e-7)
            for _ in range(int(min(MAX_REPEATS, max(1, WARMUP_S / estimate)))):
                comm.Barrier()
                call()
            repeats = int(min(MAX_REPEATS, max(MIN_REPEATS, BUDGET_S / estimate)))
            spent = np.empty(repeats)
            gc.disable()
            try:
                for i in range(repeats):
                    comm.Barrier()
                    start = clock()
                    call()
                    spent[i] = clock() - start
            finally:
                gc.enable()
            slowest = np.empty_like(spent)
            comm.Allreduce(spent, slowest, op=MPI.MAX)
            rows.append({"bytes": nbytes, "repeats": repeats, "samples": slowest.tolist(),
                         **summarize(slowest)})
    finally:
        net.close()
    if rank != 0:
        return None
    return {"algorithm": allreduce_algorithm(algorithm).name,
            "mpich_allreduce": net.mpi_allreduce_algorithm, "ranks": comm.Get_size(),
            "method": "per call after a Barrier, the slowest rank's time; median with "
                      "its nonparametric 95% CI", "sizes": rows}
