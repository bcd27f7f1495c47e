"""Which algorithm MPICH's ``MPI_Allreduce`` was told to use, read as MPICH reads it.

MPICH chooses ``MPI_Allreduce``'s algorithm by the control variable
``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` (also spelled ``MPICH_ALLREDUCE_INTRA_ALGORITHM``
and ``MPIR_PARAM_ALLREDUCE_INTRA_ALGORITHM``), read once, at ``MPI_Init``, from the
environment; the values are those MPICH 5.0 documents for it (the CVAR's description in
libmpi; ``auto`` is MPICH's own selection). Left to itself MPICH picks recursive doubling
below ``MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE`` and Rabenseifner's algorithm from it (R.
Thakur, R. Rabenseifner, W. Gropp, IJHPCA 2005, section 4.4).
"""
from __future__ import annotations

import os

from deep500.utils.errors import Deep500Error

MPICH_ALLREDUCE_CVAR = "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"
MPICH_ALLREDUCE_ALGORITHMS = ("auto", "nb", "smp", "recursive_doubling",
                              "recursive_multiplying", "reduce_scatter_allgather", "tree",
                              "recexch", "ring", "k_reduce_scatter_allgather", "ccl")
_MPICH_CVAR_NAMES = (MPICH_ALLREDUCE_CVAR, "MPICH_ALLREDUCE_INTRA_ALGORITHM",
                     "MPIR_PARAM_ALLREDUCE_INTRA_ALGORITHM")
#: MPICH's ``MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE`` default (bytes).
MPICH_ALLREDUCE_SHORT_MSG_BYTES = 2048


def mpich_allreduce_algorithm(environ=None) -> str:
    """The ``MPI_Allreduce`` algorithm MPICH was told to use: the value of
    ``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` (or its two aliases) in ``environ``
    (default ``os.environ``), ``"auto"`` if unset. MPICH reads it once, at
    ``MPI_Init``; it must be in the environment of every rank before MPI starts (set
    it in the shell before ``mpirun`` / ``deep500 run --np N``, which pass the
    environment on). An unknown value raises ``Deep500Error``."""
    environ = os.environ if environ is None else environ
    for name in _MPICH_CVAR_NAMES:
        value = environ.get(name)
        if value:
            return check_mpich_allreduce_algorithm(value.strip().lower(), name)
    return "auto"


def check_mpich_allreduce_algorithm(value, where: str = "mpi_algorithm") -> str:
    """``value`` if it is one of ``MPICH_ALLREDUCE_ALGORITHMS``, else a ``Deep500Error``
    naming ``where``."""
    if value not in MPICH_ALLREDUCE_ALGORITHMS:
        raise Deep500Error(f"{where}={value!r} is not an MPICH allreduce algorithm; "
                           f"choose one of {', '.join(MPICH_ALLREDUCE_ALGORITHMS)} "
                           f"(MPICH's {MPICH_ALLREDUCE_CVAR})")
    return value
