"""Predicted training steps of a rank grid (``recipes/scaling.yaml``), beside the ones
its parts measured: with a machine file (the recipe's ``machine:``, or ``deep500 run
--machine``), the grid's launcher predicts every configuration's step with
``d5.simulate_training`` once its parts have run, so that the report draws the
measured and the predicted scaling curves on one plot (the Deep500 paper's Fig. 12;
PyDTNN's Fig. 3).

* **Compute**: profiled here, in the launcher, on one rank with nothing else running
  (the parts have ended): ``deep500.recipe.predict.step_profile`` of each distinct
  model, data, optimizer and thread count, at the smallest and the largest batch per
  rank the grid uses, combined into per-node lines in the batch size
  (``StepProfile.combine``), as ``deep500 predict`` does.
* **Communication**: the machine file's α-β-γ model of the scheme's allreduce,
  blocking, float32 on the wire. ``ConsistentDecentralized``: its ``algorithm``.
  ``ConsistentParameterServer``: priced as the ``linear`` allreduce, which sends the
  same messages (every worker its gradient to the root, the root the result back to
  each; the root's link carries (p − 1) n each way) and adds at the root as the server
  averages; the server's update, run on the root only while the workers wait, costs
  what an update on every rank in parallel costs. Other schemes are not modelled and
  are listed with the reason.

The result, in the manifest under ``rank_grid.predicted``: the machine, how the
compute was profiled, and per configuration index its rank count, batch per rank,
algorithm and the ``SimulatedStep``.
"""
from __future__ import annotations

import sys

from deep500.recipe.batch_scaling import batch_per_rank
from deep500.recipe.collective_choice import scheme_algorithm
from deep500.utils.threads import resolve_threads

# Reference schemes the simulator prices, by the allreduce whose messages they send.
PRICED_AS = {"ConsistentParameterServer": "linear"}


def modelled_algorithm(scheme, schemes: dict) -> tuple[str | None, str]:
    """``(allreduce algorithm the step is priced with, how)``; ``(None, why not)``
    for a scheme the simulator does not model."""
    if scheme.framework == "reference" and scheme.scheme in PRICED_AS:
        algorithm = PRICED_AS[scheme.scheme]
        return algorithm, (f"{scheme.scheme} priced as the {algorithm} allreduce (the "
                           f"same messages: gradients to the root, parameters back)")
    algorithm = scheme_algorithm(scheme, schemes)
    if scheme.framework != "reference" or scheme.scheme != "ConsistentDecentralized":
        return None, (f"{scheme.label}: d5.simulate_training models the steps of "
                      f"ConsistentDecentralized (and the parameter server) only")
    if scheme.options.get("overlap") or scheme.options.get("comm_dtype",
                                                            "float32") != "float32":
        return None, f"{scheme.label}: predicted for blocking float32 steps only"
    return algorithm, f"{scheme.scheme} with the {algorithm} allreduce"


def predict_grid(recipe, configurations: list[dict], first_index: int,
                 progress: bool = False) -> dict:
    """The predictions of the module docstring for ``configurations`` (the recipe's
    plan, whose positions count from ``first_index``)."""
    import deep500 as d5
    from deep500.recipe.experiments.distributed import reference_schemes
    machine = recipe.machine
    schemes = reference_schemes()
    planned, groups = [], {}
    for position, configuration in enumerate(configurations):
        ranks = configuration.get("ranks") or 1
        algorithm, how = modelled_algorithm(configuration["scheme"], schemes)
        entry = {"index": first_index + position, "ranks": ranks, "modelled_as": how}
        planned.append((entry, configuration, algorithm))
        if algorithm is None:
            continue
        entry.update(batch_per_rank=batch_per_rank(configuration, ranks),
                     threads=resolve_threads(configuration.get("threads"), ranks),
                     algorithm=algorithm)
        groups.setdefault(_profile_key(configuration, entry["threads"]),
                          (configuration, entry["threads"], set()))[2].add(
            entry["batch_per_rank"])
    if progress and groups:
        sys.stderr.write(f"deep500: {recipe.name}: profiling {len(groups)} model(s) for "
                         f"the predicted steps on machine '{machine.name}'\n")
    profiles = {key: _profile(configuration, threads, batches, machine)
                for key, (configuration, threads, batches) in groups.items()}
    for entry, configuration, algorithm in planned:
        if algorithm is None:
            continue
        profile = profiles[_profile_key(configuration, entry["threads"])]
        step = d5.simulate_training(profile, machine, entry["ranks"],
                                    batch_per_rank=entry["batch_per_rank"],
                                    threads=entry["threads"], algorithm=algorithm)
        entry["predicted"] = step.to_dict()
    return {"machine": {"name": machine.name, "source": machine.source,
                        "path": recipe.machine_path,
                        "given_by": recipe.machine_given_by or "recipe"},
            "compute": "profiled by the grid's launcher on one rank after the parts ran "
                       "(deep500.recipe.predict.step_profile, measured), per-node lines "
                       "in the batch size",
            "communication": "blocking, float32, the machine file's alpha-beta-gamma "
                             "model of each scheme's allreduce",
            "configurations": [entry for entry, _, _ in planned]}


def _profile_key(configuration: dict, threads: int) -> tuple:
    return (repr(configuration["network"]), repr(configuration["dataset"]),
            configuration.get("loss"), configuration.get("seed", 0),
            repr(sorted(configuration["optimizer"].items())), threads)


def _profile(configuration: dict, threads: int, batches: set, machine):
    from deep500.recipe.predict import step_profile
    from deep500.recipe.scaling_curves import Workload
    smallest, largest = min(batches), max(batches)
    network = configuration["network"]
    workload = Workload(f"{getattr(network, 'label', network)}, {threads} thread(s)",
                        configuration["network"], dict(configuration["dataset"]),
                        configuration.get("loss", "softmax_cross_entropy"),
                        int(configuration.get("seed", 0)), dict(configuration["optimizer"]),
                        smallest, threads, "ring", None)
    return step_profile(workload, "measured", machine,
                        largest_batch=largest if largest != smallest else None)
