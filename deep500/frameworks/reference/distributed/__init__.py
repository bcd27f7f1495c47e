"""Reference distributed schemes (Level 3): each wraps any three-step optimizer
(``d5.DistributedOptimizer``) and communicates through ``d5.CommunicationNetwork``, so
bytes are counted and phases timed the same way for every scheme."""
from deep500.frameworks.reference.distributed.consistent_decentralized import (
    ConsistentDecentralized)
from deep500.frameworks.reference.distributed.consistent_neighbors import (
    ConsistentNeighbors)
from deep500.frameworks.reference.distributed.consistent_parameter_server import (
    ConsistentParameterServer)
from deep500.frameworks.reference.distributed.cpp_allreduce import (
    CppConsistentDecentralized, SparseTopKDecentralized)
from deep500.frameworks.reference.distributed.inconsistent_parameter_server import (
    InconsistentParameterServer)
from deep500.frameworks.reference.distributed.model_average_decentralized import (
    ModelAverageDecentralized)
from deep500.frameworks.reference.distributed.nearest_neighbor import (
    NearestNeighborTraining)
from deep500.frameworks.reference.distributed.stale_synchronous import StaleSynchronous

SCHEMES = {cls.__name__: cls for cls in (
    ConsistentDecentralized, ConsistentParameterServer, ModelAverageDecentralized,
    ConsistentNeighbors, InconsistentParameterServer, StaleSynchronous,
    CppConsistentDecentralized, SparseTopKDecentralized, NearestNeighborTraining)}
"""Class name → reference distributed scheme."""

__all__ = ["ConsistentDecentralized", "ConsistentNeighbors", "ConsistentParameterServer",
           "ModelAverageDecentralized", "InconsistentParameterServer", "StaleSynchronous",
           "CppConsistentDecentralized", "SparseTopKDecentralized",
           "NearestNeighborTraining", "SCHEMES"]
