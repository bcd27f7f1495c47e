"""The phases of a calibration that need two ranks or more, run in one MPI world: the
ping-pong and the exchange (``point_to_point``), δ (``coherence``), every allreduce
algorithm's 4-byte calls and calls in context (``software``), and the non-blocking
allreduces beside compute (``overlap``). Rank 0 keeps what they
measured; every sample is also in the samples file, from which ``read_network_samples``
reads them back (``deep500 calibrate --np N`` measures them under an ``mpirun`` of its
own and builds the machine file from that file).
"""
from __future__ import annotations

from dataclasses import dataclass

from deep500.lv3_distributed.calibration import coherence, overlap, software
from deep500.lv3_distributed.calibration.plan import Plan
from deep500.lv3_distributed.calibration.point_to_point import pingpong
from deep500.lv3_distributed.calibration.samples import SampleLog, read_pingpong_samples


@dataclass
class NetworkSamples:
    """The samples of the network phases (rank 0's; ``None`` where not measured)."""
    pingpong: dict | None
    exchange: dict | None = None
    coherence: dict | None = None
    allreduce: dict | None = None        # {algorithm: seconds} of 4-byte calls
    allreduce_ranks: int | None = None   # the ranks they ran on
    in_context: dict | None = None       # {algorithm: {nbytes: seconds}}
    overlap: dict | None = None          # {algorithm: {compute_stretch, communication_stretch}}


def measure_network(comm, plan: Plan, log: SampleLog | None,
                    progress: bool = True) -> NetworkSamples:
    """Every network phase on ``comm`` (two ranks or more), in order, each logged as
    measured."""
    return NetworkSamples(
        pingpong=pingpong(comm, plan.pingpong_sizes, plan, log, progress),
        exchange=pingpong(comm, plan.pingpong_sizes, plan, log, progress, exchange=True),
        coherence=coherence.measure_shared_write(comm, plan.coherence_sizes, log=log,
                                                 progress=progress),
        allreduce=software.measure_allreduce_calls(
            comm, plan.allreduce_budget_s, plan.allreduce_min_repeats,
            plan.allreduce_max_repeats, log, progress),
        allreduce_ranks=comm.Get_size(),
        in_context=software.measure_allreduce_in_context(comm, plan.context_repeats,
                                                         log=log, progress=progress),
        overlap=overlap.measure_overlap(comm, plan.overlap_repeats, log, progress))


def read_network_samples(path: str) -> NetworkSamples:
    """The network phases' samples from a samples file."""
    allreduce, ranks = software.read_allreduce_samples(path)
    return NetworkSamples(pingpong=read_pingpong_samples(path),
                          exchange=read_pingpong_samples(path, "exchange"),
                          coherence=coherence.read_coherence_samples(path),
                          allreduce=allreduce, allreduce_ranks=ranks,
                          in_context=software.read_in_context_samples(path),
                          overlap=overlap.read_overlap_samples(path))
