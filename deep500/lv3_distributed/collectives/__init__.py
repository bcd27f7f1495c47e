"""Collective algorithms, one object each: how an allreduce runs, what it sends, and
what it costs.

The package is named for what the objects are, collective operations' algorithms (as
ASTRA-sim's ``collective/`` folder and Horovod's collective operations are): today every
one of them is an allreduce (``AllreduceAlgorithm``), one file per algorithm (``ring``,
``segmented_ring``, ``linear``, ``binomial``, ``recursive_doubling``, ``rabenseifner``,
and MPI's own, ``mpi``), with the pieces several share beside them (the counted
point-to-point steps, the fold of non-power-of-two p, the α-β-γ-δ steps of their
costs). ``registry`` turns a name into its object; nothing else keeps a list of names.
"""
from deep500.lv3_distributed.collectives.base import AllreduceAlgorithm, Reduction
from deep500.lv3_distributed.collectives.registry import (UnknownAlgorithmError,
                                                          allreduce_algorithm,
                                                          allreduce_names)

__all__ = ["AllreduceAlgorithm", "Reduction", "UnknownAlgorithmError",
           "allreduce_algorithm", "allreduce_names"]
