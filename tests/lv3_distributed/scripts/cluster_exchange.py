"""Under ``deep500 cluster exec``: every rank says its node (host name) and its
namespace's address, allreduces ``BYTES`` bytes (argv[1]) and checks the sum, then exits
with status argv[2] on rank 0 (to check that the launcher passes it on)."""
import socket
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
count = int(sys.argv[1]) // 8
data = np.full(count, comm.rank + 1.0)
total = np.empty_like(data)
comm.Allreduce(data, total)
expected = comm.size * (comm.size + 1) / 2
assert np.all(total == expected), (total[:4], expected)
print(f"rank {comm.rank} on {MPI.Get_processor_name()} host {socket.gethostname()} "
      f"sum ok", flush=True)
comm.Barrier()
sys.exit(int(sys.argv[2]) if comm.rank == 0 else 0)
