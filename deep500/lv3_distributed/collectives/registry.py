"""The one registry of allreduce algorithms: name -> the algorithm's object.

Every layer that takes an algorithm by name (``CommunicationNetwork.allreduce``, the
schemes of ``d5ref``, the time models, the simulator, calibration, recipes) turns it
into an object here, once; the order below is the order names are listed in, the
default (``ring``) first.
"""
from __future__ import annotations

from deep500.lv3_distributed.collectives.base import AllreduceAlgorithm
from deep500.lv3_distributed.collectives.binomial import BINOMIAL
from deep500.lv3_distributed.collectives.linear import LINEAR
from deep500.lv3_distributed.collectives.mpi import MPI_ALLREDUCE
from deep500.lv3_distributed.collectives.rabenseifner import RABENSEIFNER
from deep500.lv3_distributed.collectives.recursive_doubling import RECURSIVE_DOUBLING
from deep500.lv3_distributed.collectives.ring import RING
from deep500.lv3_distributed.collectives.segmented_ring import SEGMENTED_RING
from deep500.utils.errors import Deep500Error

_ALGORITHMS = {algorithm.name: algorithm
               for algorithm in (RING, LINEAR, BINOMIAL, RECURSIVE_DOUBLING, RABENSEIFNER,
                                 SEGMENTED_RING, MPI_ALLREDUCE)}


class UnknownAlgorithmError(Deep500Error, ValueError):
    """An algorithm name that a collective does not have (also a ``ValueError``, as
    before this error had a class of its own)."""


def allreduce_algorithm(algorithm, where: str = "allreduce") -> AllreduceAlgorithm:
    """The algorithm named ``algorithm`` (an ``AllreduceAlgorithm`` is returned as it
    is). An unknown name raises ``UnknownAlgorithmError`` that starts with ``where``
    and lists the known names."""
    if isinstance(algorithm, AllreduceAlgorithm):
        return algorithm
    found = _ALGORITHMS.get(algorithm) if isinstance(algorithm, str) else None
    if found is None:
        raise UnknownAlgorithmError(
            f"{where}: unknown allreduce algorithm {algorithm!r}; choose one of "
            f"{', '.join(_ALGORITHMS)} (a new one is one file in "
            f"deep500/lv3_distributed/collectives/, see docs/distributed.md)")
    return found


def allreduce_names(**capabilities) -> tuple[str, ...]:
    """The names of the registered algorithms, the default first; with keywords, those
    whose attributes equal them (``allreduce_names(narrows_on_wire=True)``)."""
    return tuple(name for name, algorithm in _ALGORITHMS.items()
                 if all(getattr(algorithm, key) == value
                        for key, value in capabilities.items()))
