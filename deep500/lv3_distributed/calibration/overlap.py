"""Overlap on busy cores (``software.overlap`` of a machine file): what a bucketed
non-blocking allreduce running beside backprop costs the compute, and what the compute
costs it, on ranks whose cores do both.

The simulator's overlapped step lets a bucket's allreduce run at its own speed beside
the backward pass (PyDTNN's and Horovod's model). On a host whose cores all compute,
the communication's own CPU work (MPICH's progress engine, the kernel's TCP stack, the
non-blocking ring's reductions and casts, the progress thread's wake-ups and its turns
at Python's GIL) runs on the cores the backward pass runs on: the compute stretches,
and the allreduce runs slower than back to back. On the 2-vCPU VM a ResNet-20 step
overlapped on a 250 Mbit/s link had 10–25 ms more compute than the same step blocking,
for 38 ms of communication (docs/cluster_emulation.md).

Measured the way ``GradientBuckets`` runs an overlapped step: ``OVERLAP_BYTES`` of
float32 gradients in ``OVERLAP_PARAMETERS`` parameters, reported one per compute
chunk (a ``ComputeBurst``: 64×64 GEMMs and a sweep over a buffer larger than a core's
cache, as the reference executor's kernels and Python between them), buckets of
``OVERLAP_BUCKET_BYTES``, ``progress="thread"``, after each chunk the backward hook's
progress call. Per repeat and rank, in this order, each after a ``Barrier``:

* ``compute``: the chunks alone (c);
* ``communication``: the buckets alone, reported back to back (m: start of the first
  bucket to the end of the last);
* ``overlapped``: chunks and buckets together; the compute's end (oc), the first
  bucket's start (s) and the first chunk end at which every bucket had finished (e,
  the compute's end if they had not).

The compute lasts ``COMPUTE_OVER_COMMUNICATION`` times the communication (set from a
trial on rank 0), so the buckets finish during it. Per repeat and rank:

* compute stretch κ = (oc − c) / (e − s): seconds of compute lost per second of
  communication in flight beside it;
* communication stretch η = (e − s) / m: the allreduce's time beside compute over its
  time alone (chunk-granular, so an upper bound by up to one chunk).

The file keeps, per non-blocking algorithm, the median of each over repeats and ranks
with its CI. The simulator stretches a backward node by (1 + κ) while a bucket is in
flight and a bucket's allreduce by η while the backward pass runs
(``d5.simulate_training``).
"""
from __future__ import annotations

import time

import numpy as np

from deep500.lv3_distributed.calibration.progress import progress_bar
from deep500.lv3_distributed.calibration.samples import read_sample_records, summarize
from deep500.lv3_distributed.calibration.software import ComputeBurst
from deep500.lv3_distributed.communication import CommunicationNetwork
from deep500.lv3_distributed.gradient_buckets import GradientBuckets

OVERLAP_BYTES = 1 << 20
OVERLAP_PARAMETERS = 32
OVERLAP_BUCKET_BYTES = 1 << 18
COMPUTE_OVER_COMMUNICATION = 3.0
OVERLAP_ALGORITHMS = ("ring", "mpi")
_clock = time.perf_counter


class _Step:
    """The three timed parts of one repeat on one rank (module docstring)."""

    def __init__(self, comm, algorithm: str):
        per = OVERLAP_BYTES // 4 // OVERLAP_PARAMETERS
        self.names = [f"p{i}" for i in range(OVERLAP_PARAMETERS)]
        self.like = {name: np.zeros(per, np.float32) for name in self.names}
        self.gradients = {name: np.ones(per, np.float32) for name in self.names}
        self.comm = comm
        self.buckets = GradientBuckets(CommunicationNetwork(comm), self.like,
                                       bucket_bytes=OVERLAP_BUCKET_BYTES,
                                       wire_options={"algorithm": algorithm},
                                       progress="thread")

    def close(self) -> None:
        self.buckets.close()
        self.buckets.comm.close()

    def compute(self, burst, chunks: int) -> float:
        self.comm.Barrier()
        start = _clock()
        for _ in range(chunks):
            burst()
        return _clock() - start

    def communication(self) -> float:
        self.comm.Barrier()
        buckets = self.buckets
        buckets.start_step()
        start = _clock()
        for name in reversed(self.names):
            buckets.gradient_ready(name, self.gradients[name])
        buckets.finish(self.gradients)
        return _clock() - start

    def overlapped(self, burst, chunks: int) -> tuple:
        """(compute seconds, communication in flight during it, first bucket start to
        all done) of one overlapped pass."""
        self.comm.Barrier()
        buckets = self.buckets
        names = list(reversed(self.names))
        per_chunk = len(names) / chunks
        buckets.start_step()
        start = _clock()
        first = done = None
        reported = 0
        for i in range(chunks):
            burst()
            while reported < min(len(names), round((i + 1) * per_chunk)):
                buckets.gradient_ready(names[reported], self.gradients[names[reported]])
                reported += 1
            buckets.backward_progress()
            now = _clock()
            if first is None and buckets.started_buckets:
                first = now
            if first is not None and done is None and buckets.buckets_in_flight == 0 \
                    and reported == len(names):
                done = now
        compute_end = _clock()
        buckets.finish(self.gradients)
        first = compute_end if first is None else first
        done = compute_end if done is None else done
        return compute_end - start, max(done - first, 0.0)


def measure_overlap(comm, repeats: int, log=None, progress: bool = True) -> dict | None:
    """κ and η samples of every non-blocking algorithm on ``comm`` (two ranks or more;
    module docstring). Rank 0 returns ``{algorithm: {"compute_stretch": [...],
    "communication_stretch": [...]}}`` (samples over repeats and ranks) and writes one
    samples line per algorithm; the other ranks return None."""
    rank = comm.Get_rank()
    results = {}
    bar = progress_bar(len(OVERLAP_ALGORITHMS) * int(repeats), "overlap on busy cores",
                       progress and rank == 0)
    try:
        for algorithm in OVERLAP_ALGORITHMS:
            step = _Step(comm, algorithm)
            try:
                burst, chunks = _sized_burst(comm, step)
                samples = []
                for i in range(-1, int(repeats)):
                    alone = step.compute(burst, chunks)
                    communication = step.communication()
                    compute, in_flight = step.overlapped(burst, chunks)
                    if i >= 0:
                        samples.append((alone, communication, compute, in_flight))
                        bar.update(1)
            finally:
                step.close()
            gathered = comm.gather(samples)
            if rank == 0:
                rows = [row for per_rank in gathered for row in per_rank]
                results[algorithm] = stretches(rows)
                if log is not None:
                    log.write({"phase": "overlap", "algorithm": algorithm,
                               "ranks": comm.Get_size(), "nbytes": OVERLAP_BYTES,
                               "bucket_bytes": OVERLAP_BUCKET_BYTES, "chunks": chunks,
                               "rows": rows, **results[algorithm]})
    finally:
        bar.close()
    return results if rank == 0 else None


def _sized_burst(comm, step) -> tuple:
    """A burst and a chunk count whose compute lasts ``COMPUTE_OVER_COMMUNICATION``
    times the buckets' communication alone (rank 0's trial, for every rank)."""
    burst = ComputeBurst()
    step.communication()
    communication = min(step.communication() for _ in range(3))
    start = _clock()
    for _ in range(8):
        burst()
    per_burst = (_clock() - start) / 8
    chunks = int(np.clip(round(COMPUTE_OVER_COMMUNICATION * communication / per_burst),
                         OVERLAP_PARAMETERS // 4, 4096))
    gemms, chunks = comm.bcast((burst.gemms, chunks) if comm.Get_rank() == 0 else None)
    return ComputeBurst(gemms=gemms), chunks


def stretches(rows) -> dict:
    """``{compute_stretch, communication_stretch}`` samples from rows of (compute alone,
    communication alone, compute overlapped, communication in flight during it); rows
    whose communication was not in flight are left out."""
    kappa, eta = [], []
    for alone, communication, compute, in_flight in rows:
        if in_flight > 0 and communication > 0:
            kappa.append(max(0.0, (compute - alone) / in_flight))
            eta.append(max(1.0, in_flight / communication))
    return {"compute_stretch": kappa, "communication_stretch": eta}


def read_overlap_samples(path: str) -> dict:
    """``{algorithm: {compute_stretch, communication_stretch}}`` from a samples file."""
    return {r["algorithm"]: {"compute_stretch": r["compute_stretch"],
                             "communication_stretch": r["communication_stretch"]}
            for r in read_sample_records(path, "overlap")}


def overlap_section(samples: dict, ranks: int) -> dict | None:
    """The machine file's ``software.overlap`` from ``measure_overlap``'s samples."""
    algorithms = {name: {key: summarize(values) for key, values in entry.items()}
                  for name, entry in samples.items()
                  if entry["compute_stretch"] and entry["communication_stretch"]}
    if not algorithms:
        return None
    return {"method": (f"GradientBuckets with progress='thread': {OVERLAP_BYTES >> 10} KiB "
                       f"of float32 gradients in {OVERLAP_PARAMETERS} parameters, buckets "
                       f"of {OVERLAP_BUCKET_BYTES >> 10} KiB, beside ComputeBurst chunks "
                       f"lasting {COMPUTE_OVER_COMMUNICATION:g}x the communication alone, "
                       f"on {ranks} ranks; compute_stretch = (overlapped compute - compute "
                       f"alone) / communication in flight; communication_stretch = "
                       f"communication in flight / communication alone; medians over "
                       f"repeats and ranks"),
            "ranks": int(ranks), "algorithms": algorithms}
