"""The options that go with an allreduce algorithm, checked together before a scheme
runs: the algorithm's name, the wire dtype, and the options only some algorithms take
(``segment_bytes``, ``mpi_algorithm``; ``AllreduceAlgorithm.options``).
"""
from __future__ import annotations

import os

from deep500.lv3_distributed.collectives.base import AllreduceAlgorithm
from deep500.lv3_distributed.collectives.mpich import (MPICH_ALLREDUCE_CVAR,
                                                       check_mpich_allreduce_algorithm,
                                                       mpich_allreduce_algorithm)
from deep500.lv3_distributed.collectives.registry import (allreduce_algorithm,
                                                          allreduce_names)
from deep500.lv3_distributed.collectives.segmented_ring import check_segment_bytes
from deep500.lv3_distributed.wire_dtype import check_comm_dtype
from deep500.utils.errors import Deep500Error


def check_wire(owner: str, chosen: AllreduceAlgorithm, comm_dtype: str) -> None:
    """Raise ``Deep500Error`` if ``comm_dtype`` is not one of ``wire_dtype.COMM_DTYPES``,
    or is narrower than float32 with an algorithm that cannot carry it (one that does
    not ``narrows_on_wire``)."""
    check_comm_dtype(comm_dtype, f"{owner}: comm_dtype")
    if comm_dtype != "float32" and not chosen.narrows_on_wire:
        able = allreduce_names(narrows_on_wire=True)
        raise Deep500Error(f"{owner}: comm_dtype={comm_dtype!r} needs an allreduce that "
                           f"reduces at float32 what travels in 16 bits: algorithm "
                           f"{' or '.join(map(repr, able))}, not {chosen.name!r}; change "
                           f"the algorithm or use comm_dtype='float32'")


def _check_mpi_algorithm(owner: str, mpi_algorithm: str, environ) -> None:
    check_mpich_allreduce_algorithm(mpi_algorithm, f"{owner}: mpi_algorithm")
    in_effect = mpich_allreduce_algorithm(os.environ if environ is None else environ)
    if mpi_algorithm != in_effect:
        raise Deep500Error(
            f"{owner}: mpi_algorithm={mpi_algorithm!r}, but MPICH starts with "
            f"{MPICH_ALLREDUCE_CVAR}={in_effect!r} (read once, at MPI_Init). Set it in the "
            f"environment before MPI starts, e.g. '{MPICH_ALLREDUCE_CVAR}={mpi_algorithm} "
            f"deep500 run --np N recipe.yaml'; mpi_algorithm then checks that it is in "
            f"effect")


def check_allreduce_options(owner: str, algorithm, segment_bytes=None,
                            mpi_algorithm=None, environ=None,
                            comm_dtype: str = "float32") -> AllreduceAlgorithm:
    """The algorithm's object (``collectives.allreduce_algorithm``, which names the
    known ones if ``algorithm`` is not one of them), after raising ``Deep500Error``
    naming the option if ``comm_dtype`` does not suit it (``check_wire``), if
    ``segment_bytes`` or ``mpi_algorithm`` is given to an algorithm that does not take
    it (``AllreduceAlgorithm.options``), if ``segment_bytes`` is not a positive integer,
    or if ``mpi_algorithm`` is not an MPICH algorithm, or not the one MPICH will start
    with (``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` in ``environ``, default
    ``os.environ``, which ``mpirun`` passes to the ranks)."""
    chosen = allreduce_algorithm(algorithm, f"{owner}: algorithm")
    check_wire(owner, chosen, comm_dtype)
    for option, value in (("segment_bytes", segment_bytes),
                          ("mpi_algorithm", mpi_algorithm)):
        if value is not None and option not in chosen.options:
            takers = [f"{name!r}" for name in allreduce_names()
                      if option in allreduce_algorithm(name).options]
            raise Deep500Error(f"{owner}: {option}={value!r} applies to "
                               f"algorithm={' or '.join(takers)} only (algorithm is "
                               f"{chosen.name!r}); remove it or change the algorithm")
    if segment_bytes is not None:
        check_segment_bytes(segment_bytes, f"{owner}: segment_bytes")
    if mpi_algorithm is not None:
        _check_mpi_algorithm(owner, mpi_algorithm, environ)
    return chosen
