"""``microbatch: auto`` in network recipes: a micro-batch size per convolution, chosen
for ``memory_budget`` (bytes, or ``64MiB``) under ``memory_policy`` (``division``: the
convolutions' workspaces summed, µ-cuDNN's WD, an exact 0-1 ILP; ``reuse``: the largest
one, WR), to minimise the convolutions' total time (Oyama et al., IEEE CLUSTER 2018;
``deep500.lv1_network.transformations.microbatch_choice``).

Each convolution is measured at the batch and every power of two below it, on the
configuration's executor, device and threads (``microbatch_profile``); the table is
kept for the run, so configurations that differ only in budget or policy measure
once. The record's ``result.details.microbatch`` keeps the choice, the table, and what
every fixed size would cost by the same table (modelled), for the report to set the
choice against the fixed-size rows.
"""
from __future__ import annotations

from deep500.lv1_network.transformations.microbatch_choice import (POLICIES,
                                                                   choose_microbatches,
                                                                   workspace_of)
from deep500.recipe.experiments import base
from deep500.recipe.problems import describe
from deep500.utils.byte_sizes import parse_bytes
from deep500.utils.errors import Deep500Error, RecipeError

AUTO = "auto"
PROFILE_RERUNS = 5   # timed runs per convolution and size (after one warm-up)


def parse_microbatch(value, where, recipe_dir=None):
    """None (whole batches), a positive number of samples, or ``auto``."""
    if value is None or value == AUTO:
        return value
    if isinstance(value, str):
        raise RecipeError(f"{where}: a micro-batch is a positive number of samples, "
                          f"null or 'auto', got {describe(value)}")
    return base.positive_int(value, where)


def parse_memory_budget(value, where, recipe_dir=None):
    if value is None:
        return None
    try:
        return parse_bytes(value, where)
    except Deep500Error as exc:
        raise RecipeError(str(exc)) from None


memory_policy = base.one_of(POLICIES)


# frameworks whose executors report peak memory in-process on the CPU (what measuring
# every convolution at every size needs; a fresh process per option would take minutes)
IN_PROCESS_MEMORY = ("reference", "pytorch")


def not_applicable(configuration: dict) -> str | None:
    """Why ``microbatch: auto`` cannot run on this configuration's executor, if so."""
    from deep500.frameworks.registry import framework_of
    framework = framework_of(configuration["executor"]).name
    if configuration.get("microbatch") != AUTO or framework in IN_PROCESS_MEMORY or \
            str(configuration.get("device", "cpu")).startswith("gpu"):
        return None
    return (f"microbatch: auto measures each convolution's peak memory in-process, "
            f"which the {framework} executor does not report on the CPU")


def check_budgets(recipe, problems) -> None:
    """``microbatch: auto`` needs a ``memory_budget``."""
    if AUTO in recipe.alternatives("microbatch") and \
            None in recipe.alternatives("memory_budget"):
        with problems.check("fixed.memory_budget"):
            raise RecipeError("fixed.memory_budget: microbatch: auto chooses micro-batch "
                              "sizes for a memory budget; give one, e.g. memory_budget: "
                              "64MiB")


def choose_sizes(configuration: dict, model, make_executor, state: dict) -> tuple:
    """``({convolution: size}, details)`` for ``configuration`` (module docstring);
    convolutions that keep the whole batch are left out of the sizes."""
    from deep500.lv1_network.transformations.microbatch_profile import (candidate_sizes,
                                                                        profile_convolutions)
    batch = configuration["batch_size"]
    key = ("microbatch_profile", configuration["executor"], configuration["device"],
           configuration.get("threads"))
    if key not in state:
        state[key] = profile_convolutions(model, batch, make_executor,
                                          reruns=PROFILE_RERUNS,
                                          seed=configuration["seed"])
    table = state[key]
    policy = configuration["memory_policy"]
    choice = choose_microbatches(table, configuration["memory_budget"], policy)
    fixed = []
    for size in candidate_sizes(batch):
        at_size = [next(o for o in options if o.size == size) for options in table.values()]
        workspace = workspace_of(policy, [o.workspace_bytes for o in at_size])
        fixed.append({"size": size, "seconds": sum(o.seconds for o in at_size),
                      "workspace_bytes": workspace,
                      "fits": workspace <= configuration["memory_budget"]})
    details = {**choice.to_dict(), "fixed": fixed,
               "profile": {name: [[o.size, o.seconds, o.workspace_bytes] for o in options]
                           for name, options in table.items()},
               "method": f"each convolution alone at each size, median of "
                         f"{PROFILE_RERUNS} runs; workspace: peak memory less the "
                         f"output's bytes"}
    return {k: s for k, s in choice.sizes.items() if s < batch}, details
