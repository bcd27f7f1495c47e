"""MPI's own allreduce, ``MPI_Allreduce``: the library picks the algorithm, so Deep500
cannot count its messages. Its traffic is modelled as the algorithm MPICH was told to use
where Deep500 has the same one (``collectives.mpich``), else as the ring, whose volume is
the lower bound of any allreduce; the entry it records says which. Its time is modelled
as MPICH's default choice (R. Thakur, R. Rabenseifner, W. Gropp, IJHPCA 2005, section
4.4): recursive doubling below ``MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE`` (2048 B),
Rabenseifner from it. An MPI library with another selection (MPICH's JSON tuning files,
Open MPI's ``tuned`` decision) is priced the same way but may pick otherwise.

It narrows the wire with a user-defined commutative operation that widens both operands,
reduces them and narrows the result (``compressed_allreduce``; MPI-4.0 section 6.9.5),
and it has a non-blocking form (``MPI_Iallreduce``) that can overlap backpropagation.
"""
from __future__ import annotations

import numpy as np

from deep500.lv3_distributed.collectives.base import AllreduceAlgorithm
from deep500.lv3_distributed.collectives.mpich import (MPICH_ALLREDUCE_CVAR,
                                                       MPICH_ALLREDUCE_SHORT_MSG_BYTES)
from deep500.lv3_distributed.collectives.rabenseifner import RABENSEIFNER
from deep500.lv3_distributed.collectives.recursive_doubling import RECURSIVE_DOUBLING
from deep500.lv3_distributed.collectives.ring import RING
from deep500.lv3_distributed.compressed_allreduce import finish_mpi, narrowed_for_mpi
from deep500.lv3_distributed.volume import Traffic, modelled

# The MPICH choices whose algorithm Deep500 also runs, so moves the same bytes.
_SAME_AS_MPICH = {"recursive_doubling": RECURSIVE_DOUBLING,
                  "reduce_scatter_allgather": RABENSEIFNER, "ring": RING}


def modelled_by(mpich_algorithm: str) -> AllreduceAlgorithm:
    """Deep500's algorithm whose traffic stands for MPICH's ``mpich_algorithm``: the same
    one where Deep500 has it, else the ring (also for ``auto``, whose choice depends on
    the size and on tuning files)."""
    return _SAME_AS_MPICH.get(mpich_algorithm, RING)


class Mpi(AllreduceAlgorithm):
    """``MPI_Allreduce`` (module docstring)."""
    name = "mpi"
    options = ("mpi_algorithm",)
    counted_exactly = False
    narrows_on_wire = True
    non_blocking = True

    def run(self, net, array, out, reduction, **options) -> Traffic:
        MPI = net._MPI
        if out is array:
            net.comm.Allreduce(MPI.IN_PLACE, out, reduction.mpi_op)
        else:
            net.comm.Allreduce(array, out, reduction.mpi_op)
        if reduction.average:
            np.true_divide(out, net.size, out=out)
        return self.traffic(array.size, array.itemsize, net.size, net.rank,
                            mpi_algorithm=net.mpi_allreduce_algorithm)

    def run_narrowed(self, net, array, out, reduction, wire) -> Traffic:
        MPI = net._MPI
        narrowed, buffer, operation = narrowed_for_mpi(MPI, array, wire, reduction.ufunc)
        net.comm.Allreduce(MPI.IN_PLACE, buffer, operation)
        finish_mpi(narrowed, out, wire, reduction.average, net.size)
        return self.traffic(array.size, wire.itemsize, net.size, net.rank,
                            mpi_algorithm=net.mpi_allreduce_algorithm)

    def counted(self, net) -> str:
        choice = net.mpi_allreduce_algorithm
        if choice == "auto":
            return modelled("ring")
        return modelled(f"{modelled_by(choice).name.replace('_', ' ')}; MPICH "
                        f"{MPICH_ALLREDUCE_CVAR}={choice}")

    def _traffic(self, count, itemsize, size, rank, mpi_algorithm="auto") -> Traffic:
        """The traffic of ``modelled_by(mpi_algorithm)``."""
        return modelled_by(mpi_algorithm).traffic(count, itemsize, size, rank)

    def message_sizes(self, count, itemsize, size, rank, mpi_algorithm="auto", **options):
        """The messages of ``modelled_by(mpi_algorithm)`` where it states them (the
        ring's chunks), else ``None`` (recorded as unsized)."""
        return modelled_by(mpi_algorithm).message_sizes(count, itemsize, size, rank)

    def _cost(self, m, n, p) -> float:
        """MPICH's default choice: recursive doubling below 2048 B, Rabenseifner from
        it."""
        chosen = (RECURSIVE_DOUBLING if n < MPICH_ALLREDUCE_SHORT_MSG_BYTES
                  else RABENSEIFNER)
        return chosen._cost(m, n, p)


MPI_ALLREDUCE = Mpi()
