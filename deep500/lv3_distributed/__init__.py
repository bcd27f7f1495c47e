"""Level 3: distributed training over MPI: finding ``mpirun`` and the world, launching
(``mpi_fork``, ``guarded_main``), measured communication (``CommunicationNetwork``,
``CommunicationVolume``), the allreduce algorithms (``collectives``: one object each,
found by name with ``allreduce_algorithm``), distributed samplers and the
``DistributedOptimizer`` that the schemes of ``d5ref`` (and of the framework bridges)
derive from."""
from deep500.lv3_distributed.collectives import (AllreduceAlgorithm, allreduce_algorithm,
                                                 allreduce_names)
from deep500.lv3_distributed.communication import (CommunicationNetwork, Request,
                                                   torus_shape, wait_all)
from deep500.lv3_distributed.distributed_optimizer import (DistributedOptimizer,
                                                           FusedBuffer)
from deep500.lv3_distributed.distributed_sampler import (DistributedBucketSampler,
                                                         DistributedSampler,
                                                         PartitionedDistributedSampler,
                                                         partition_bounds, rank_and_size)
from deep500.lv3_distributed.measured_scheme import MeasuredScheme
from deep500.lv3_distributed.message_sizes import MessageSizeHistogram
from deep500.lv3_distributed.mpi_profiling import MPIProfiling
from deep500.lv3_distributed.mpi_launch import (guarded_main, in_mpi_world,
                                                launched_by_mpirun, mpi_fork,
                                                mpirun_executable, world_communicator)
from deep500.lv3_distributed.volume import (CommunicationVolume, CommunicationVolumeMetric,
                                            Traffic, VolumeEntry)

__all__ = ["launched_by_mpirun", "in_mpi_world", "mpirun_executable", "world_communicator",
           "mpi_fork",
           "guarded_main", "CommunicationNetwork", "Request", "wait_all", "torus_shape",
           "AllreduceAlgorithm", "allreduce_algorithm", "allreduce_names",
           "CommunicationVolume", "CommunicationVolumeMetric",
           "Traffic", "VolumeEntry", "DistributedOptimizer", "FusedBuffer",
           "DistributedSampler", "PartitionedDistributedSampler", "partition_bounds",
           "DistributedBucketSampler",
           "rank_and_size", "MeasuredScheme", "MessageSizeHistogram", "MPIProfiling"]
