"""Default versus best collective (``recipes/allreduce_choice.yaml``): which
configurations of a distributed recipe MPICH's algorithm choice (``mpich_allreduce``,
:mod:`deep500.recipe.launch_environment`) can change, and the checks that keep such a
recipe meaningful.

``mpich_allreduce`` chooses the algorithm of ``MPI_Allreduce``. A scheme whose
allreduce is Deep500's own (``ConsistentDecentralized(algorithm="ring")`` and the other
names of ``allreduce_names()`` but ``"mpi"``) sends point-to-point messages and never
calls it, so the recipe's cross product of schemes and MPICH choices measures such a
scheme once, in the part where ``mpich_allreduce`` is ``auto`` (MPICH's default, what
every other recipe runs under), and records it as skipped in the other parts, with the
reason. Schemes with ``algorithm: mpi``, and those without an allreduce of their own
(parameter servers, framework baselines), run in every part.
"""
from __future__ import annotations

import inspect

from deep500.recipe.launch_environment import MPICH_ALLREDUCE

# The value of mpich_allreduce under which Deep500's own algorithms are measured.
MEASURED_UNDER = "auto"


def scheme_algorithm(scheme, schemes: dict) -> str | None:
    """The allreduce algorithm a reference scheme runs (its ``algorithm`` option, else
    its constructor's default), or None: a scheme without one, or a framework's
    baseline. ``schemes``: the reference schemes by class name."""
    if scheme.framework != "reference" or scheme.scheme not in schemes:
        return None
    if "algorithm" in scheme.options:
        return scheme.options["algorithm"]
    parameter = inspect.signature(schemes[scheme.scheme]).parameters.get("algorithm")
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return None
    return parameter.default


def skip_reason(configuration: dict, schemes: dict) -> str | None:
    """Why ``configuration`` is not measured (module docstring), or None."""
    chosen = configuration.get(MPICH_ALLREDUCE)
    algorithm = scheme_algorithm(configuration["scheme"], schemes)
    if chosen in (None, MEASURED_UNDER) or algorithm in (None, "mpi"):
        return None
    return (f"Deep500's {algorithm} allreduce sends point-to-point messages and never "
            f"calls MPI_Allreduce, so {MPICH_ALLREDUCE}: {chosen} cannot change it; it is "
            f"measured in the part with {MPICH_ALLREDUCE}: {MEASURED_UNDER}")


def check(recipe, problems, schemes: dict) -> None:
    """``mpich_allreduce`` needs ``ranks`` (it is set in the environment of the mpirun
    jobs the grid launches) and, beside schemes with Deep500's own allreduce, the value
    ``auto`` (where those are measured); ``allreduce_sizes`` needs schemes with an
    allreduce to time."""
    chosen = [(path, value) for path, value in recipe.located(MPICH_ALLREDUCE)
              if value is not None]
    if chosen and recipe.rank_counts() is None:
        problems.add(chosen[0][0], f"{MPICH_ALLREDUCE} is set in the environment of the "
                                   f"mpirun jobs 'deep500 run' launches, one per value: "
                                   f"give ranks too (e.g. fixed: {{ranks: 2}})")
    own = [(path, scheme) for path, scheme in recipe.located("scheme")
           if scheme_algorithm(scheme, schemes) not in (None, "mpi")]
    if chosen and own and MEASURED_UNDER not in {value for _, value in chosen}:
        problems.add(chosen[0][0], f"scheme {own[0][1].label} ({own[0][0]}) uses "
                                   f"Deep500's own allreduce, which MPICH's choice does "
                                   f"not reach: it is measured under {MPICH_ALLREDUCE}: "
                                   f"{MEASURED_UNDER} only; add {MEASURED_UNDER} to "
                                   f"{MPICH_ALLREDUCE}")
    if any(value is not None for value in recipe.alternatives("allreduce_sizes")):
        for path, scheme in recipe.located("scheme"):
            if scheme_algorithm(scheme, schemes) is None:
                problems.add(path, f"allreduce_sizes times the scheme's allreduce, but "
                                   f"{scheme.label} has none; give schemes with an "
                                   f"'algorithm' (ConsistentDecentralized) or remove "
                                   f"allreduce_sizes")
