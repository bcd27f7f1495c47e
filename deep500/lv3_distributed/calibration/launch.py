"""What ``deep500 calibrate`` does: the network phases in this MPI world (two ranks or
more), or under an ``mpirun -np N`` started for them (``python -m
deep500.lv3_distributed.calibration pingpong SAMPLES.jsonl``), then the rest here."""
from __future__ import annotations

import os
import sys

from deep500.lv3_distributed.calibration.machine_file import calibrate
from deep500.lv3_distributed.calibration.network_phases import (measure_network,
                                                                read_network_samples)
from deep500.lv3_distributed.calibration.plan import Plan
from deep500.lv3_distributed.calibration.samples import SampleLog, samples_path_for
from deep500.lv3_distributed.mpi_launch import in_mpi_world, run_under_mpirun
from deep500.utils.errors import Deep500Error
from deep500.utils.output_paths import check_output_file

_ONE_RANK = ("calibrate measures the network by a ping-pong between two ranks, but it runs "
             "on one: use 'deep500 calibrate --np 2 --out FILE' (or mpirun -np 2 deep500 "
             "calibrate ...), or skip the network with --no-network")


def _world(np_ranks: int | None):
    """``MPI.COMM_WORLD`` when running under mpirun (checked against ``--np``), else
    None."""
    if not in_mpi_world():
        return None
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    if np_ranks is not None and np_ranks != comm.Get_size():
        raise Deep500Error(f"--np {np_ranks}, but mpirun started {comm.Get_size()} "
                           f"rank(s); give one of the two")
    return comm


def _network_under_mpirun(out: str, np_ranks: int, quick: bool, progress: bool):
    """The network phases on ``np_ranks`` ranks of an mpirun of their own, their
    samples in the samples file beside ``out`` (read back)."""
    samples_path = samples_path_for(out)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    open(samples_path, "w").close()
    program = ["-m", "deep500.lv3_distributed.calibration", "pingpong", samples_path]
    program += ["--quick"] if quick else []
    program += [] if progress else ["--quiet"]
    status = run_under_mpirun(int(np_ranks), program)
    if status != 0:
        raise Deep500Error(f"the ping-pong under mpirun failed (exit status {status}); "
                           f"its samples so far are in {samples_path}")
    return read_network_samples(samples_path)


def run_calibration(out: str, np_ranks: int | None = None, network: bool = True,
                    quick: bool = False, progress: bool = True) -> dict | None:
    """Calibrate into the machine file ``out``: under mpirun with the ranks it started,
    else the network phases under ``mpirun -np np_ranks`` and the rest here. Where
    ``out`` and its samples file go is checked first, before anything is measured."""
    check_output_file(out, "--out")
    check_output_file(samples_path_for(out), "--out (its samples file)")
    comm = _world(np_ranks)
    if network:
        ranks = comm.Get_size() if comm is not None else (np_ranks or 1)
        if ranks < 2:
            raise Deep500Error(_ONE_RANK)
        if comm is None:
            measured = _network_under_mpirun(out, np_ranks, quick, progress)
            return calibrate(out, network=True, quick=quick, progress=progress,
                             measured=measured)
    return calibrate(out, comm=comm, network=network, quick=quick, progress=progress)


def network_phases_main(argv) -> int:
    """``python -m deep500.lv3_distributed.calibration pingpong SAMPLES.jsonl [--quick]
    [--quiet]`` under mpirun: the network phases alone, their samples appended to the
    file."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    log = SampleLog(argv[1] if comm.Get_rank() == 0 else None)
    try:
        measure_network(comm, Plan.make("--quick" in argv), log,
                        progress="--quiet" not in argv)
    finally:
        log.close()
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) >= 2 and argv[0] == "pingpong":
        return network_phases_main(argv)
    sys.exit("usage: python -m deep500.lv3_distributed.calibration pingpong SAMPLES.jsonl "
             "[--quick] [--quiet]")
