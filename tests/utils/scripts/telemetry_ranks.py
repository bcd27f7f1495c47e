"""Under mpirun -np 2: each rank spins on one core for 0.6 s with the telemetry
sampler on (mpi_job=True) and prints, from rank 0, both ranks' summaries as JSON."""
import json
import time

from mpi4py import MPI

from deep500.utils.telemetry import TelemetrySampler

comm = MPI.COMM_WORLD
comm.Barrier()
with TelemetrySampler(interval_s=0.02, threads=1, mpi_job=True) as sampler:
    end = time.perf_counter() + 0.6
    while time.perf_counter() < end:
        pass
    comm.Barrier()  # the windows end together
summaries = comm.gather(sampler.summary(), root=0)
if comm.Get_rank() == 0:
    print("SUMMARIES " + json.dumps(summaries), flush=True)
