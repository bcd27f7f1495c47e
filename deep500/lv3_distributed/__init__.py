"""Level 3: distributed training over MPI. So far: finding ``mpirun`` and the world."""
from deep500.lv3_distributed.mpi_launch import (launched_by_mpirun, mpirun_executable,
                                                world_communicator)

__all__ = ["launched_by_mpirun", "mpirun_executable", "world_communicator"]
