"""Level 3: distributed training over MPI. So far: finding ``mpirun`` and the world,
launching (``mpi_fork``, ``guarded_main``), and measured communication
(``CommunicationNetwork``, ``CommunicationVolume``)."""
from deep500.lv3_distributed.communication import (ALLREDUCE_ALGORITHMS,
                                                   CommunicationNetwork, Request,
                                                   torus_shape, wait_all)
from deep500.lv3_distributed.mpi_launch import (guarded_main, launched_by_mpirun, mpi_fork,
                                                mpirun_executable, world_communicator)
from deep500.lv3_distributed.volume import (CommunicationVolume, CommunicationVolumeMetric,
                                            Traffic, VolumeEntry)

__all__ = ["launched_by_mpirun", "mpirun_executable", "world_communicator", "mpi_fork",
           "guarded_main", "CommunicationNetwork", "Request", "wait_all", "torus_shape",
           "ALLREDUCE_ALGORITHMS", "CommunicationVolume", "CommunicationVolumeMetric",
           "Traffic", "VolumeEntry"]
