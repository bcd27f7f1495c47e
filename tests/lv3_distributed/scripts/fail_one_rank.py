"""Run under ``mpirun -np N``: every rank writes a result, then the last rank raises
while the others wait for it in an allreduce that can never finish. ``guarded_main``
must stop them all and show the failing rank's error."""
import os
import sys

import numpy as np

from deep500.lv3_distributed import CommunicationNetwork, guarded_main

with guarded_main():
    net = CommunicationNetwork()
    with open(os.path.join(sys.argv[1], f"measured{net.rank}.txt"), "w") as handle:
        handle.write("measured before the failure\n")
    net.barrier()
    if net.rank == net.size - 1:
        raise ValueError(f"deliberate failure on rank {net.rank}")
    net.allreduce(np.ones(10))
    print(f"rank {net.rank} finished an allreduce without the failed rank", flush=True)
