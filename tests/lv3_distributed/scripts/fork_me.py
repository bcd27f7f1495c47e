"""Run as a plain script: ``mpi_fork(2)`` re-runs it under mpirun with the same
arguments; each rank prints one JSON line. ``--exit-code K`` makes every rank exit with
status K, which the parent must return."""
import json
import sys

from deep500.lv3_distributed import mpi_fork

mpi_fork(2)

from deep500.lv3_distributed import CommunicationNetwork  # noqa: E402 - after the fork

net = CommunicationNetwork()
print(json.dumps({"rank": net.rank, "size": net.size, "argv": sys.argv[1:]}), flush=True)
if "--exit-code" in sys.argv:
    sys.exit(int(sys.argv[sys.argv.index("--exit-code") + 1]))
