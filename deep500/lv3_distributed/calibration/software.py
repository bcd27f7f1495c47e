"""The ``software`` part of ``deep500 calibrate``: what Deep500's own code costs per
call, which no α-β-γ term holds (see ``deep500.utils.machine``).

* **Per-call overhead o of each allreduce algorithm** (LogP's o: D. Culler et al.,
  "LogP: Towards a Realistic Model of Parallel Computation", PPoPP 1993): for every
  name of ``collectives.allreduce_names()``, ``CommunicationNetwork.allreduce`` of one
  float32 (4 bytes) on every rank, two warm-up calls, then calls each timed after a
  ``Barrier`` outside the clock; a call's time is the slower rank's (a collective is
  done when every rank is), as ``benchmarks/lv3_models.py`` times it. o = the median
  call minus ``predict_allreduce(name, 4, p, machine)`` of the machine just
  calibrated, clamped at 0: the Python work per call (checks, chunk bookkeeping,
  traffic records, ufunc dispatch) that the ping-pong's per-message α does not hold.
  Its CI: the median's nonparametric CI minus the same prediction.
* **Fusion copy** (``FusedBuffer.pack``, the copy of every gradient into one buffer
  before the allreduce, as Horovod's fusion buffer): pack timed for 1, 16 and 128
  float32 tensors of 4 KB and 4 MB in all; t = per_tensor_s·k + s_per_byte·n fitted
  by non-negative least squares on relative error, CIs from a bootstrap over the
  configurations.
* **Allreduce in context** (``allreduce_in_context``): a collective inside a training
  step does not run as it does back to back: the compute before it has evicted the
  library's buffers and the peer's from the caches, and the ranks arrive at different
  times. Between calls every rank runs a compute burst of about
  ``CONTEXT_BURST_S`` (GEMMs and a sweep over a buffer larger than a core's cache,
  then the copy of the message into its buffer, as the fusion pack does), with no
  barrier. Each rank times its own call; the call's time is the smallest over the
  ranks, the time seen by the last rank to arrive (the others' extra is waiting for
  it, which the simulator prices apart as the wait for the slowest rank). Measured
  for every algorithm at ``CONTEXT_SIZES``; the file keeps the medians and their
  ratio to ``predict_allreduce_call`` (model + o), which the simulator applies to
  the model (log-interpolated in size, flat beyond the ends).
"""
from __future__ import annotations

import gc
import time

import numpy as np

from deep500.lv3_distributed.calibration.progress import progress_bar
from deep500.lv3_distributed.calibration.samples import read_sample_records
from deep500.lv3_distributed.collective_models import (predict_allreduce,
                                                       predict_allreduce_call)
from deep500.lv3_distributed.collectives.registry import allreduce_names
from deep500.lv3_distributed.communication import CommunicationNetwork
from deep500.lv3_distributed.distributed_optimizer import FusedBuffer
from deep500.utils.machine import machine_from_dict, machine_to_dict
from deep500.utils.statistics import median_ci

#: Message of the per-call overhead: one float32.
OVERHEAD_BYTES = 4
FUSION_TENSORS = (1, 16, 128)
FUSION_BYTES = (4 << 10, 4 << 20)
BOOTSTRAP_RESAMPLES = 200
#: Message sizes of the in-context allreduce calibration.
CONTEXT_SIZES = (4, 1 << 12, 1 << 16, 1 << 18, 1 << 20, 1 << 22)
#: Compute between two in-context calls (seconds, about).
CONTEXT_BURST_S = 5e-4
#: Bytes the burst sweeps: above a core's L2, as a layer's activations are.
CONTEXT_SWEEP_BYTES = 4 << 20


def measure_allreduce_calls(comm, budget_s: float, min_repeats: int, max_repeats: int,
                            log=None, progress: bool = True) -> dict | None:
    """Time a 4-byte allreduce of every algorithm on every rank of ``comm`` (the rule in
    the module docstring); rank 0 returns ``{algorithm: seconds samples}`` (each the
    slower rank's time of one call) and writes one samples line per algorithm, the
    other ranks return None."""
    from mpi4py import MPI
    net = CommunicationNetwork(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    buffer = np.zeros(OVERHEAD_BYTES // 4, dtype=np.float32)  # 0 + 0 stays 0
    results = {}
    bar = progress_bar(len(allreduce_names()), "allreduce call overhead",
                    progress and rank == 0)
    clock = time.perf_counter
    try:
        for name in allreduce_names():
            for _ in range(2):
                comm.Barrier()
                net.allreduce(buffer, out=buffer, algorithm=name)
            comm.Barrier()
            start = clock()
            net.allreduce(buffer, out=buffer, algorithm=name)
            estimate = comm.allreduce(clock() - start, op=MPI.MAX)
            repeats = int(min(max_repeats, max(min_repeats, budget_s / max(estimate, 1e-7))))
            spent = np.empty(repeats)
            gc.disable()  # a collection inside one call is not the call's cost
            try:
                for i in range(repeats):
                    comm.Barrier()
                    start = clock()
                    net.allreduce(buffer, out=buffer, algorithm=name)
                    spent[i] = clock() - start
            finally:
                gc.enable()
            slowest = np.empty_like(spent)
            comm.Allreduce(spent, slowest, op=MPI.MAX)
            if rank == 0:
                results[name] = slowest.tolist()
                if log is not None:
                    log.write({"phase": "allreduce_call", "algorithm": name, "ranks": size,
                               "nbytes": OVERHEAD_BYTES, "seconds": results[name]})
            bar.update(1)
    finally:
        bar.close()
        net.close()
    return results if rank == 0 else None


class ComputeBurst:
    """About ``seconds`` of NumPy work, as a training step's compute between two
    collectives: 64×64 float32 GEMMs and an in-place add over ``CONTEXT_SWEEP_BYTES``.
    The number of GEMMs is set once, from a timed trial, so that the whole lasts
    ``seconds``."""

    def __init__(self, seconds: float = CONTEXT_BURST_S, gemms: int | None = None):
        self.a = np.full((64, 64), 0.5, dtype=np.float32)
        self.c = np.empty_like(self.a)
        self.sweep = np.zeros(CONTEXT_SWEEP_BYTES // 4, dtype=np.float32)
        if gemms is None:
            self.gemms = 1
            self()
            start = time.perf_counter()
            self()
            sweep_s = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(64):
                np.matmul(self.a, self.a, out=self.c)
            per_gemm = (time.perf_counter() - start) / 64
            gemms = int(max(0.0, seconds - sweep_s) / max(per_gemm, 1e-9))
        self.gemms = max(0, int(gemms))

    def __call__(self) -> None:
        for _ in range(self.gemms):
            np.matmul(self.a, self.a, out=self.c)
        np.add(self.sweep, 1.0, out=self.sweep)


def measure_allreduce_in_context(comm, repeats: int, sizes=CONTEXT_SIZES,
                                 burst_s: float = CONTEXT_BURST_S, log=None,
                                 progress: bool = True) -> dict | None:
    """Time every algorithm's allreduce between compute bursts, without barriers (the
    rule in the module docstring). Rank 0 returns ``{algorithm: {nbytes: seconds
    samples}}`` (each sample the smallest time over the ranks of one call) and writes
    one samples line per (algorithm, size); the other ranks return None."""
    from mpi4py import MPI
    net = CommunicationNetwork(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    # Every rank runs the same burst: rank 0's trial sets its length for all.
    burst = ComputeBurst(burst_s, gemms=comm.bcast(ComputeBurst(burst_s).gemms
                                                   if rank == 0 else None))
    configurations = [(name, max(1, int(nbytes) // 4)) for name in allreduce_names()
                      for nbytes in sizes]
    sources = {count: np.zeros(count, dtype=np.float32) for _, count in configurations}
    buffers = {count: np.empty_like(source) for count, source in sources.items()}
    spent = np.empty((int(repeats), len(configurations)))
    last_arrival = np.empty_like(spent)
    bar = progress_bar(int(repeats), "allreduce in context", progress and rank == 0)
    clock = time.perf_counter
    try:
        comm.Barrier()
        # Round robin over the configurations: a disturbance lasting seconds (another
        # process, memory reclaim) touches every configuration a little rather than
        # one configuration wholly. Two warm-up rounds.
        for i in range(-2, int(repeats)):
            for j, (name, count) in enumerate(configurations):
                burst()
                np.copyto(buffers[count], sources[count])   # 0 + 0 stays 0
                start = clock()
                net.allreduce(buffers[count], out=buffers[count], algorithm=name)
                if i >= 0:
                    spent[i, j] = clock() - start
            if i >= 0:
                # Each round's samples reach the file at once (outside the timed
                # calls), so a calibration killed halfway keeps the rounds it finished.
                comm.Allreduce(spent[i], last_arrival[i], op=MPI.MIN)
                if rank == 0 and log is not None:
                    log.write({"phase": "allreduce_in_context_round", "round": i,
                               "ranks": size, "burst_s": burst_s,
                               "configurations": [[n, c * 4] for n, c in configurations],
                               "seconds": last_arrival[i].tolist()})
                bar.update(1)
    finally:
        bar.close()
        net.close()
    results = {}
    if rank == 0:
        for j, (name, count) in enumerate(configurations):
            seconds = last_arrival[:, j].tolist()
            results.setdefault(name, {})[count * 4] = seconds
            if log is not None:
                log.write({"phase": "allreduce_in_context", "algorithm": name,
                           "ranks": size, "nbytes": count * 4, "burst_s": burst_s,
                           "seconds": seconds})
    return results if rank == 0 else None


def read_in_context_samples(path: str) -> dict:
    """``{algorithm: {nbytes: samples}}`` from the ``allreduce_in_context`` lines of a
    samples file; from its per-round lines where a killed calibration wrote no summary
    lines."""
    samples = {}
    for record in read_sample_records(path, "allreduce_in_context"):
        samples.setdefault(record["algorithm"], {})[int(record["nbytes"])] = \
            record["seconds"]
    if samples:
        return samples
    for record in read_sample_records(path, "allreduce_in_context_round"):
        for (name, nbytes), seconds in zip(record["configurations"], record["seconds"]):
            samples.setdefault(name, {}).setdefault(int(nbytes), []).append(seconds)
    return samples


def in_context_table(samples: dict, ranks: int, machine) -> dict:
    """``{algorithm: [{nbytes, measured_median_s, ci, predicted_s, ratio, n}]}``: the
    in-context medians and their ratio to ``predict_allreduce_call`` (model + o) on
    ``machine``; names no registered algorithm has (an older samples file) are left
    out."""
    table = {}
    for name, by_size in samples.items():
        if name not in allreduce_names():
            continue
        rows = []
        for nbytes in sorted(by_size, key=int):
            seconds = by_size[nbytes]
            predicted = predict_allreduce_call(name, int(nbytes), ranks, machine)
            low, high, _ = median_ci(seconds)
            median = float(np.median(seconds))
            rows.append({"nbytes": int(nbytes), "measured_median_s": median,
                         "ci": [float(low), float(high)], "predicted_s": predicted,
                         "ratio": median / predicted if predicted > 0 else 1.0,
                         "n": len(seconds)})
        table[name] = rows
    return table


def read_allreduce_samples(path: str) -> tuple[dict, int | None]:
    """``({algorithm: samples}, ranks)`` from the ``allreduce_call`` lines of a samples
    file (ranks None when there are none)."""
    samples, ranks = {}, None
    for record in read_sample_records(path, "allreduce_call"):
        samples[record["algorithm"]] = record["seconds"]
        ranks = int(record["ranks"])
    return samples, ranks


def allreduce_overheads(samples: dict, ranks: int, machine) -> dict:
    """``{algorithm: {value, ci, measured_median_s, predicted_s, n}}``: o per algorithm
    (module docstring); names no registered algorithm has (an older samples file) are
    left out."""
    table = {}
    for name, seconds in samples.items():
        if name not in allreduce_names():
            continue
        predicted = predict_allreduce(name, OVERHEAD_BYTES, ranks, machine)
        low, high, _ = median_ci(seconds)
        median = float(np.median(seconds))
        table[name] = {"value": max(0.0, median - predicted),
                       "ci": [max(0.0, low - predicted), max(0.0, high - predicted)],
                       "measured_median_s": median, "predicted_s": predicted,
                       "n": len(seconds)}
    return table


def measure_fusion_copy(repeats: int, log=None) -> dict:
    """``FusedBuffer.pack`` timed per (tensors, bytes) configuration (module docstring);
    returns ``{per_tensor_s, s_per_byte}`` entries with value and CI, and the medians."""
    from scipy.optimize import nnls
    rows = []
    for tensors in FUSION_TENSORS:
        for nbytes in FUSION_BYTES:
            count = max(1, nbytes // 4 // tensors)
            arrays = {f"t{i}": np.ones(count, dtype=np.float32) for i in range(tensors)}
            fused = FusedBuffer(arrays)
            inner = max(1, int(2e6 // (tensors * count * 4)))  # small copies: many at once
            def run():
                for _ in range(inner):
                    fused.pack(arrays)
            fused.pack(arrays)
            samples = []
            for _ in range(repeats):
                start = time.perf_counter()
                run()
                samples.append((time.perf_counter() - start) / inner)
            if log is not None:
                log.write({"phase": "fusion_copy", "tensors": tensors,
                           "nbytes": tensors * count * 4, "seconds": samples})
            rows.append((tensors, tensors * count * 4, float(np.median(samples))))
    data = np.asarray(rows, dtype=np.float64)

    def fit(part):
        scale = 1.0 / part[:, 2]
        design = np.stack([part[:, 0] * scale, part[:, 1] * scale], axis=1)
        column = np.array([1.0, 1.0 / part[:, 1].max()])  # condition the byte column
        solution, _ = nnls(design / column, np.ones(len(part)))
        return solution / column

    value = fit(data)
    rng = np.random.default_rng(0)
    boot = np.asarray([fit(data[rng.integers(0, len(data), len(data))])
                       for _ in range(BOOTSTRAP_RESAMPLES)])
    return {"method": "FusedBuffer.pack of k float32 tensors, n bytes in all: "
                      "t = per_tensor_s*k + s_per_byte*n (NNLS on relative error)",
            **{key: {"value": float(value[i]),
                     "ci": [float(np.percentile(boot[:, i], 2.5)),
                            float(np.percentile(boot[:, i], 97.5))]}
               for i, key in enumerate(("per_tensor_s", "s_per_byte"))},
            "measurements": [{"tensors": int(k), "nbytes": int(n), "median_s": t}
                             for k, n, t in rows]}


def software_section(allreduce_samples: dict | None, ranks: int | None, machine,
                     fusion: dict | None, in_context_samples: dict | None = None) -> dict:
    """The machine file's ``software`` section."""
    section = {}
    if allreduce_samples:
        section["allreduce_call_overhead_s"] = allreduce_overheads(allreduce_samples,
                                                                   ranks, machine)
        section["allreduce_call_method"] = (
            f"CommunicationNetwork.allreduce of {OVERHEAD_BYTES} bytes (float32) on "
            f"{ranks} ranks, median over calls of the slower rank, minus "
            f"predict_allreduce of this machine, clamped at 0 (LogP's o)")
    if in_context_samples and ranks:
        # Ratios to the model with o: price it on the machine with this section's o.
        with_o = machine_from_dict({**machine_to_dict(machine), "software": {
            "allreduce_call_overhead_s": {k: v["value"] for k, v in
                                          section.get("allreduce_call_overhead_s",
                                                      {}).items()}}})
        section["allreduce_in_context"] = {
            "method": (f"CommunicationNetwork.allreduce between compute bursts of about "
                       f"{CONTEXT_BURST_S * 1e3:g} ms (64x64 GEMMs and an add over "
                       f"{CONTEXT_SWEEP_BYTES >> 20} MB), no barrier, on {ranks} ranks; a "
                       f"call's time is the last-arriving rank's (the minimum over ranks); "
                       f"ratio = median / (alpha-beta-gamma model + o)"),
            "ranks": int(ranks),
            "algorithms": in_context_table(in_context_samples, ranks, with_o)}
    if fusion:
        section["fusion_copy"] = fusion
    return section
