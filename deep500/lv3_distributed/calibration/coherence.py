"""δ for ``deep500 calibrate``: what writing a buffer costs more after a peer received it.

Between two ranks on one host, MPICH sends a large message with a single copy
(``MPIR_CVAR_CH4_CMA_ENABLE``, from ``MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD`` = 8 KB on):
the receiver's kernel reads the sender's pages (``process_vm_readv``). Those cache
lines are then held by two cores. When the sender next writes them (it sums into the
buffer it just sent, as recursive doubling does, or receives into it, as every
allgather step does), each store must first invalidate the copy in the other core.
Such a write is paid per line, and at a rate set by how far apart the two cores are,
which no byte count of the message shows: on this project's 2-vCPU AMD EPYC VM a
write of 512 KB just sent took 32 µs where a private one took 9 µs, and in some host
states 231 µs. D. Molka, D. Hackenberg, R. Schöne, M. S. Müller, "Memory performance
and cache coherency effects on an Intel Nehalem multiprocessor system", PACT 2009,
measure the same dependence of bandwidth on the coherence state of the lines.

Two costs are measured, for each buffer size m, on ranks 0 and 1 at once (as in an
allreduce both ranks write at once), each as the difference of one operation timed
twice in a row, right after the peer's receive read the buffer and again at once
(the lines are then this core's alone):

* δ_sum, summing into a buffer the peer read: ``Sendrecv`` of A each way into R,
  ``Barrier``, ``numpy.add(A, R, out=A)`` timed, ``Barrier``, the same sum timed again
  (recursive doubling's step; the reduce-scatter of a buffer allreduced before);
* δ_receive, receiving into a buffer the peer read: ``Sendrecv`` of A each way into R,
  ``Barrier``, ``Sendrecv`` of R each way into A timed, ``Barrier``, the same again
  (the allgather of the ring and of Rabenseifner, receiving into the chunks they sent).

A sample is the slower rank's difference; δ(m) = median difference / m (s/byte; 0
where a buffer's being read costs nothing, as over a network, where the NIC reads
the sender's pages). Only A and R are touched, 2m bytes per rank, as recursive
doubling touches its buffer and scratch: whether the peer still holds A's lines when
they are written depends on what else passed through its caches, so more buffers
would change what is measured.
"""
from __future__ import annotations

import time

import numpy as np

from deep500.lv3_distributed.calibration.progress import progress_bar
from deep500.lv3_distributed.calibration.samples import read_sample_records, summarize

#: Buffer sizes of δ: from MPICH's single-copy threshold to memory-resident.
COHERENCE_SIZES = (64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20)
COHERENCE_SIZES_QUICK = (64 << 10, 1 << 20)
#: Samples per size (fewer for large buffers, see ``_repeats``).
COHERENCE_REPEATS = 60
METHOD = ("after a Sendrecv of buffer A each way: sum: numpy.add into A; receive: a "
          "Sendrecv into A; each minus the same repeated at once; slower rank of 0 "
          "and 1; per byte of A")


def _repeats(nbytes: int, repeats: int) -> int:
    # About 40 ms of stores per size at 10 GB/s, within [5, repeats].
    return int(min(repeats, max(5, 4e8 // max(nbytes, 1))))


def measure_shared_write(comm, sizes=COHERENCE_SIZES, repeats: int = COHERENCE_REPEATS,
                         log=None, progress: bool = True) -> dict | None:
    """δ samples (s/byte) per buffer size, by the rule in the module docstring. Rank 0
    returns ``{"sum": {nbytes: samples}, "receive": {nbytes: samples}}`` and writes
    one samples line per size (so a calibration killed halfway keeps the sizes done);
    the other ranks return None (ranks above 1 only wait)."""
    from mpi4py import MPI
    rank = comm.Get_rank()
    pair = comm.Split(0 if rank < 2 else MPI.UNDEFINED, rank)
    if pair == MPI.COMM_NULL:
        comm.Barrier()
        return None
    peer, results = 1 - rank, {"sum": {}, "receive": {}}
    bar = progress_bar(len(sizes), "coherence (write after send)", progress and rank == 0)
    clock = time.perf_counter

    def twice(operation):
        pair.Barrier()
        start = clock()
        operation()
        shared = clock() - start
        pair.Barrier()
        start = clock()
        operation()
        return shared - (clock() - start)

    try:
        for nbytes in sizes:
            count = max(1, int(nbytes) // 4)
            # Written (not np.zeros, whose untouched pages map one zero page); zeros,
            # so that the sums stay 0.
            a, r = (np.full(count, 0.0, dtype=np.float32) for _ in range(2))
            reps = _repeats(nbytes, repeats)
            extra = np.empty((2, reps))
            for i in range(-2, reps):
                pair.Sendrecv(a, peer, 4, r, peer, 4)
                summed = twice(lambda: np.add(a, r, out=a))
                pair.Sendrecv(a, peer, 4, r, peer, 4)
                received = twice(lambda: pair.Sendrecv(r, peer, 5, a, peer, 5))
                if i >= 0:
                    extra[:, i] = summed, received
            slower = np.empty_like(extra)
            pair.Allreduce(extra, slower, op=MPI.MAX)
            if rank == 0:
                for kind, row in zip(("sum", "receive"), slower):
                    samples = (row / (count * 4)).tolist()
                    results[kind][int(nbytes)] = samples
                    if log is not None:
                        log.write({"phase": "coherence", "kind": kind,
                                   "nbytes": int(nbytes), "s_per_byte": samples})
            bar.update(1)
    finally:
        bar.close()
        pair.Free()
    comm.Barrier()
    return results if rank == 0 else None


def _curve(samples: dict) -> list:
    curve = []
    for nbytes in sorted(samples):
        point = summarize(samples[nbytes])
        curve.append({"buffer_bytes": int(nbytes), **point,
                      "value": max(0.0, point["value"])})
    return curve


def coherence_section(samples: dict) -> dict:
    """The machine file's ``network.coherence``: δ_sum and δ_receive per buffer size
    (median clamped at 0, its CI), with the method."""
    return {"method": METHOD, "sum_curve": _curve(samples["sum"]),
            "receive_curve": _curve(samples["receive"])}


def read_coherence_samples(path: str) -> dict:
    """``{"sum": {nbytes: samples}, "receive": {...}}`` from the ``coherence`` lines of
    a samples file (empty dicts where there are none)."""
    samples = {"sum": {}, "receive": {}}
    for record in read_sample_records(path, "coherence"):
        samples[record["kind"]][int(record["nbytes"])] = record["s_per_byte"]
    return samples


#: Buffer size of the coherence-state probe: cache-resident, above the single-copy
#: threshold, where the two states of a host differ most.
PROBE_BYTES = 256 << 10
#: δ_sum values below this (s/byte; 13 ns per 64-byte line) count as one state.
PROBE_FLOOR = 2e-10
#: Probe values within this factor of each other are one state: this project's VM
#: has, besides its fast state (0.0-0.2 ns/B), two slow ones around 0.42 and 0.73 ns/B.
PROBE_FACTOR = 1.4


def coherence_probe(comm, nbytes: int = PROBE_BYTES, repeats: int = 15) -> float:
    """δ_sum (s/byte) at ``nbytes`` measured now, the same value on every rank: the
    signature of the host's coherence state. Some hosts switch between states for
    seconds at a time (this project's 2-vCPU VM: δ_sum at 256 KB 0.0-0.2 ns/B in one,
    about 0.42 or 0.6-0.75 ns/B in the others, with the exchanges about 1.8x slower
    there), and a model calibrated in one state predicts the others badly."""
    samples = measure_shared_write(comm, (nbytes,), repeats=repeats, progress=False)
    value = float(np.median(samples["sum"][int(nbytes)])) if samples is not None else None
    return comm.bcast(value, root=0)


def same_coherence_state(a: float, b: float) -> bool:
    """Whether two probe values (s/byte) are one state: within ``PROBE_FACTOR`` of each
    other, values below ``PROBE_FLOOR`` counted as the floor."""
    a, b = max(a, PROBE_FLOOR), max(b, PROBE_FLOOR)
    return max(a, b) <= PROBE_FACTOR * min(a, b)
