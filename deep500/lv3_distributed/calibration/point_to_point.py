"""Ping-pong and exchange between ranks 0 and 1: the one-way time of a message (the
Hockney fit's data) and of a ``Sendrecv`` both ways at once (the step of the ring,
recursive doubling and Rabenseifner), per message size.

Each rank sends from one buffer and receives into another (as OSU's ``osu_latency``
does): a message's source is data its rank wrote, as a gradient is. Bouncing back the
buffer just received measures something else: on some hosts (this project's 2-vCPU AMD
EPYC VM, 2026-11) sending lines that the peer's copy just wrote is 5x slower (1 MB:
445 us against 84 us).
"""
from __future__ import annotations

import time

import numpy as np

from deep500.lv3_distributed.calibration.plan import Plan
from deep500.lv3_distributed.calibration.progress import progress_bar
from deep500.lv3_distributed.calibration.samples import SampleLog

_TAG_DATA, _TAG_REPEATS, _TAG_EXCHANGE = 1, 2, 3


def _exchange_samples(pair, rank: int, view, other, plan: Plan) -> list:
    """Seconds of one ``Sendrecv`` of ``view`` each way, timed on each rank."""
    peer = 1 - rank
    for _ in range(2):
        pair.Sendrecv(view, peer, _TAG_EXCHANGE, other, peer, _TAG_EXCHANGE)
    pair.Barrier()
    start = time.perf_counter()
    pair.Sendrecv(view, peer, _TAG_EXCHANGE, other, peer, _TAG_EXCHANGE)
    estimate = pair.bcast(time.perf_counter() - start, root=0)
    samples = []
    for _ in range(plan.repeats_for(estimate)):
        start = time.perf_counter()
        pair.Sendrecv(view, peer, _TAG_EXCHANGE, other, peer, _TAG_EXCHANGE)
        samples.append(time.perf_counter() - start)
    return samples


def _agree_on_repeats(pair, rank: int, view, other, plan: Plan) -> int:
    """Two warm-up round trips; rank 0 times them, picks the repeats and tells rank 1."""
    if rank == 0:
        start = time.perf_counter()
        for _ in range(2):  # warm-up, and the first estimate of a round trip
            pair.Send(view, 1, _TAG_DATA)
            pair.Recv(other, 1, _TAG_DATA)
        repeats = plan.repeats_for((time.perf_counter() - start) / 2)
        pair.send(repeats, 1, _TAG_REPEATS)
        return repeats
    for _ in range(2):
        pair.Recv(other, 0, _TAG_DATA)
        pair.Send(view, 0, _TAG_DATA)
    return pair.recv(source=0, tag=_TAG_REPEATS)


def _pingpong_samples(pair, rank: int, view, other, plan: Plan) -> list:
    """One-way seconds (round trip / 2) of messages of ``view``'s size, on rank 0."""
    samples = []
    for _ in range(_agree_on_repeats(pair, rank, view, other, plan)):
        if rank == 0:
            start = time.perf_counter()
            pair.Send(view, 1, _TAG_DATA)
            pair.Recv(other, 1, _TAG_DATA)
            samples.append((time.perf_counter() - start) / 2)
        else:
            pair.Recv(other, 0, _TAG_DATA)
            pair.Send(view, 0, _TAG_DATA)
    return samples


def pingpong(comm, sizes, plan: Plan, log: SampleLog | None = None,
             progress: bool = True, exchange: bool = False) -> dict | None:
    """Ping-pong between ranks 0 and 1 of ``comm``; on rank 0 returns
    {nbytes: one-way seconds samples}, elsewhere None (ranks above 1 only wait).

    ``exchange``: instead, both ranks ``Sendrecv`` n bytes to each other at once; a
    sample is the time of one ``Sendrecv`` on rank 0. Each size's samples are written
    to ``log`` as measured."""
    from mpi4py import MPI
    rank = comm.Get_rank()
    pair = comm.Split(0 if rank < 2 else MPI.UNDEFINED, rank)
    if pair == MPI.COMM_NULL:
        comm.Barrier()
        return None
    results = {}
    phase = "exchange" if exchange else "pingpong"
    measure = _exchange_samples if exchange else _pingpong_samples
    bar = progress_bar(len(sizes), "exchange (Sendrecv)" if exchange else "ping-pong",
                       progress and rank == 0)
    for size in sizes:
        # A buffer of its own per size, as an application has: slices of one large
        # buffer sit on its (transparent huge) pages, which shared-memory MPI maps
        # faster than small buffers' pages. Written, not np.zeros: untouched pages all
        # map the kernel's one zero page, and sending from it measures the cache.
        view = np.ones(size, dtype=np.uint8)
        other = np.ones(size, dtype=np.uint8)
        samples = measure(pair, rank, view, other, plan)
        if rank == 0:
            results[size] = samples
            if log is not None:
                log.write({"phase": phase, "nbytes": size, "seconds": samples})
        bar.update(1)
    bar.close()
    pair.Free()
    comm.Barrier()
    return results if rank == 0 else None
