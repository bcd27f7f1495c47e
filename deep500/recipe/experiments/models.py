"""Level-3 performance models checked against measurement (``experiment: models``):
**calibrate → predict → measure → compare**.

Once per run, the **machine**: the recipe's ``machine:`` (or ``deep500 run --machine
FILE``) when given, else a quick calibration on the ranks of the run
(``deep500.lv3_distributed.calibration.calibrate(quick=True)``: ping-pong and 4-byte allreduce
calls between ranks 0 and 1, γ, memory bandwidth, peak FLOP/s), written into the run
folder as ``machine.yaml`` with its raw samples (``machine.samples.jsonl``). On one
rank the calibration has no network part, and only 1-rank predictions are made.

Per configuration (a network, a batch size per rank, an allreduce algorithm of
``d5ref.ConsistentDecentralized``), on every rank at once (so that the ranks load the
machine the same way in every phase):

1. **profile**: ``d5.measure_step_profile`` of the base optimizer on one minibatch of
   the training set, at the batch per rank (for the predictions) and at the global
   batch (so strong-scaling batches are interpolated, ``StepProfile.combine``), with
   whole steps of the scheme over ``MPI_COMM_SELF`` for its software overhead;
2. **predict**: ``d5.simulate_training(profile of rank 0, machine, ranks)`` for 1 rank
   and for the world's size, blocking communication, fp32 on the wire (the scheme as it
   runs): compute, exposed communication, wait for the slowest rank, update;
3. **measure**: ``warmup`` then ``steps`` timed steps of training on the digits (or the
   dataset given) with ``d5ref.ConsistentDecentralized(base optimizer, comm,
   algorithm=...)``, first on ``MPI_COMM_SELF`` (1 rank: every rank alone,
   concurrently, nothing communicated; the scheme still packs its gradients, as the
   simulator prices it), then on the world. A step's time is ``optimizer.step``; a
   synchronous step's, the slowest rank's (``synchronous_step_times``); the
   configuration's, the median over its steps (at 1 rank: rank 0's, the rank whose
   profile predicts);
4. **compare**: predicted / measured and |predicted / measured − 1| per rank count
   (metric ``StepTimePrediction``, which acceptance thresholds judge), and the
   predicted scaling curves (ranks 1, 2, 4, … ``scaling_ranks``; weak scaling at the
   batch per rank, strong scaling at the global batch of the world) on this machine's
   model and on each machine file shipped with Deep500 (``deep500/data/machines``).

Rank 0's result holds everything in ``details["models"]``; every rank's record carries
the same metric. The report's section "Predicted vs measured"
(``deep500.report.predictions``) shows it.
"""
from __future__ import annotations

import math
import os
import time

import numpy as np

from deep500.frameworks import registry
from deep500.recipe.experiments import base
from deep500.recipe.experiments.distributed import parse_base_optimizer
from deep500.recipe.experiments.networks import executor_factory, parse_network
from deep500.recipe.experiments.training import (REFERENCE_OPTIMIZERS, OptimizerSpec,
                                                 _optimizer_class, build_network,
                                                 cached_datasets, check_datasets,
                                                 make_optimizer, parse_dataset)
from deep500.recipe.problems import describe
from deep500.utils.errors import Deep500Error, RecipeError
from deep500.utils.threads import resolve_threads, thread_counts

#: Executors whose per-node forward and backward times ``measure_step_profile`` reads.
PROFILED_EXECUTORS = tuple(registry.names(backward_times=True))


def _algorithm(value, where, recipe_dir=None):
    """An allreduce algorithm (``components.allreduce_algorithm_name``: every
    registered one runs in ConsistentDecentralized and has a time model)."""
    from deep500.recipe.components import allreduce_algorithm_name
    return allreduce_algorithm_name(value, where)


def _scaling_ranks(value, where, recipe_dir=None):
    base.positive_int(value, where)
    if value & (value - 1):
        raise RecipeError(f"{where}: the scaling curves double the ranks from 1; give a "
                          f"power of two (e.g. 1024), got {value}")
    return value


def _machines(value, where, recipe_dir=None):
    """Machine files for the what-if curves: a list of shipped names or paths."""
    from deep500.utils.machine import load_machine
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RecipeError(f"{where}: a list of machine files (shipped names such as "
                          f"infiniband-hdr, or paths), got {describe(value)}")
    paths = []
    for name in value:
        path = name if os.path.isabs(name) or recipe_dir is None or \
            not os.path.isfile(os.path.join(recipe_dir, name)) \
            else os.path.join(recipe_dir, name)
        try:
            load_machine(path)
        except Deep500Error as exc:
            raise RecipeError(f"{where}: {exc}") from None
        paths.append(path)
    return tuple(paths)


class ModelsExperiment(base.Experiment):
    name = "models"
    level = 3
    collective = True   # the ranks measure each configuration together
    components = {
        "network": (parse_network, base.REQUIRED),
        "optimizer": (parse_base_optimizer, base.REQUIRED),
        "dataset": (parse_dataset, (("name", "digits"),)),
        "executor": (base.one_of(PROFILED_EXECUTORS), "reference"),
        "algorithm": (_algorithm, "ring"),
        "batch_size": (base.positive_int, 16),         # per rank
        "steps": (base.positive_int, 60),              # timed training steps
        "warmup": (base.non_negative_int, 10),         # untimed steps before them
        "reruns": (base.positive_int, 30),             # profiled steps
        "scaling_ranks": (_scaling_ranks, 1024),       # the curves' largest rank count
        "what_if_machines": (_machines, None),         # default: every shipped machine
        "loss": (base.one_of(("softmax_cross_entropy", "cross_entropy")),
                 "softmax_cross_entropy"),
        "threads": (base.positive_int, None),
        "seed": (base.non_negative_int, 0),
    }
    input_components = ("dataset", "network", "seed", "loss")
    metric_names = ("StepTimePrediction",)
    default_metrics = ("StepTimePrediction",)

    def check(self, recipe, problems):
        for epath, name in recipe.located("executor"):
            with problems.check(epath, name):
                executor_factory(name)
        for opath, spec in recipe.located("optimizer"):
            with problems.check(opath, spec.label):
                _optimizer_class(REFERENCE_OPTIMIZERS, spec.type, f"{opath}: optimizer")
        check_datasets(recipe, problems)

    def measure(self, recipe, configuration, tag, output_dir, state):
        from deep500.lv3_distributed.mpi_launch import world_communicator
        from deep500.utils.validation_result import TestResult
        world = world_communicator()   # None on one rank: MPI is not started
        rank, size = (world.Get_rank(), world.Get_size()) if world else (0, 1)
        # the runner resolved them already; run alone, the same default applies
        threads = resolve_threads(configuration["threads"], size)
        if "machine" not in state:
            state["machine"] = _run_machine(recipe, output_dir, world, size, threads)
        machine, machine_record = state["machine"]

        train, _ = cached_datasets(configuration, state)
        model = build_network(configuration, train)
        batch = configuration["batch_size"]
        profiles = _profiles(configuration, model, train, threads, size,
                             sync=world.Barrier if world else None)
        from mpi4py import MPI   # ConsistentDecentralized runs on MPI, also on one rank
        alone = _train(configuration, model, train, MPI.COMM_SELF)
        together = _train(configuration, model, train, world) if world else None

        gathered = _gather(world, {"alone": alone, "together": together,
                                   "profile_step_s": float(np.median(
                                       profiles[batch].step_samples))})
        rows = details = problem = None
        if rank == 0:
            try:
                details = _compare(configuration, profiles, machine, machine_record, size,
                                   gathered)
                rows = [{"ranks": c["ranks"], "predicted_s": c["predicted"]["step_s"],
                         "measured_s": c["measured"]["step_s"]}
                        for c in details["comparisons"]]
            except Deep500Error as exc:   # the other ranks wait for rows: tell them
                problem = str(exc)
        if world is not None:
            rows, problem = world.bcast((rows, problem), root=0)
        if problem:
            raise Deep500Error(f"the prediction failed on rank 0: {problem}")
        metrics = [m.compare(rows) for m in recipe.build_metrics(output_dir, tag)]
        subject = (f"{configuration['network'].label}, batch {batch}/rank, "
                   f"{configuration['algorithm']}")
        result = TestResult("models", subject, {"ranks": size, "threads": threads},
                            metrics)
        if rank == 0:
            result.details["models"] = details
        return result

    def describe(self, configuration):
        return {**configuration, "network": configuration["network"].to_dict(),
                "dataset": dict(configuration["dataset"]),
                "optimizer": {**configuration["optimizer"],
                              "label": configuration["optimizer"].label},
                "what_if_machines": list(configuration["what_if_machines"] or [])
                or None}


# --- 1. the machine ----------------------------------------------------------------------

def _run_machine(recipe, output_dir, world, size, threads):
    """(MachineModel, record) of the run: the recipe's machine file, else a quick
    calibration into the run folder (rank 0 writes; every rank loads the same)."""
    given = recipe.machine   # the recipe's machine:, or deep500 run --machine
    if given is not None:
        return given, {"given_by": recipe.machine_given_by or "recipe",
                       "path": recipe.machine_path, "name": given.name,
                       "source": given.source, "network": _has_network(given)}
    from deep500.lv3_distributed.calibration import calibrate
    from deep500.utils.machine import machine_from_dict
    out = os.path.join(output_dir, "machine.yaml")
    started = time.perf_counter()
    data = problem = None
    try:
        # a scope of its own: whatever counts the calibration sets, the
        # configuration's are back after it
        with thread_counts(threads):
            data = calibrate(out, comm=world, network=size > 1, quick=True,
                             progress=False)
    except Exception as exc:  # noqa: BLE001 - every rank must learn of it, then raise
        problem = f"{type(exc).__name__}: {exc}"
    if world is not None:
        problems = world.allgather(problem)
        data = world.bcast(data, root=0)
        problem = "; ".join(f"rank {r}: {p}" for r, p in enumerate(problems) if p) or None
    if problem:
        raise Deep500Error(f"the quick calibration of this machine failed ({problem}); "
                           f"give a machine file with 'machine:' in the recipe or "
                           f"'deep500 run --machine FILE'")
    machine = machine_from_dict(data, path=out)
    return machine, {"given_by": "calibrated", "path": os.path.abspath(out),
                     "name": machine.name, "source": machine.source, "network": size > 1,
                     "calibration_s": time.perf_counter() - started}


# --- 2. the profile -----------------------------------------------------------------------

def _optimizer(configuration, model, comm=None):
    """A fresh executor and the base optimizer, or with ``comm`` (an mpi4py
    communicator) ConsistentDecentralized around it over ``comm``."""
    executor = executor_factory(configuration["executor"])(model, "cpu")
    optimizer = make_optimizer(OptimizerSpec({**configuration["optimizer"],
                                              "implementation": "reference"}),
                               "reference", executor)
    if comm is not None:
        from deep500.frameworks.reference.distributed import SCHEMES
        from deep500.lv3_distributed import CommunicationNetwork
        optimizer = SCHEMES["ConsistentDecentralized"](
            optimizer, CommunicationNetwork(comm), algorithm=configuration["algorithm"])
    return executor, optimizer


def _whole_step(configuration, optimizer):
    """One step as training runs it: ConsistentDecentralized around ``optimizer`` over
    ``MPI_COMM_SELF`` (nothing communicated), the loss fetched as the trainer does."""
    import numpy as np
    from mpi4py import MPI
    from deep500.frameworks.reference.distributed import SCHEMES
    from deep500.lv3_distributed import CommunicationNetwork
    scheme = SCHEMES["ConsistentDecentralized"](
        optimizer, CommunicationNetwork(MPI.COMM_SELF), algorithm=configuration["algorithm"])

    def step(minibatch):
        return float(np.asarray(scheme.step(minibatch)[scheme.loss]))
    return step


def _profiles(configuration, model, train, threads, size, sync=None) -> dict:
    """{batch: StepProfile} at the batch per rank (``reruns`` steps) and at the global
    batch (twice the batch per rank on one rank; a third of the steps: it only shapes
    the strong-scaling curves), and under ``"lines"`` the two combined. ``sync``: the
    world's barrier where several ranks profile at once, so that their timed steps run
    in lockstep as synchronous training runs them (as ``benchmarks/lv3_simulator.py``)."""
    import deep500 as d5
    batch = configuration["batch_size"]
    other = batch * size if size > 1 else 2 * batch
    profiles = {}
    for b, reruns in ((batch, configuration["reruns"]),
                      (other, max(10, configuration["reruns"] // 3))):
        executor, optimizer = _optimizer(configuration, model)
        sampler = d5.ShuffleSampler(train, b, seed=configuration["seed"])
        inputs = next(iter(sampler))
        profiles[b] = d5.measure_step_profile(
            model, executor, optimizer, inputs, reruns=reruns,
            warmup=max(3, min(configuration["warmup"], 10)), batch=b, threads=threads,
            name=configuration["network"].label, executor_name=configuration["executor"],
            step=_whole_step(configuration, optimizer), sync=sync)
    profiles["lines"] = d5.StepProfile.combine([profiles[batch], profiles[other]])
    return profiles


# --- 3. measured training -------------------------------------------------------------

def _train(configuration, model, train, comm) -> dict:
    """``warmup`` + ``steps`` steps of ConsistentDecentralized over ``comm`` (an mpi4py
    communicator; ``MPI.COMM_SELF``: every rank alone, nothing communicated). Returns
    this rank's step seconds and its mean seconds per step of each phase (compute,
    communication, update)."""
    import deep500 as d5
    batch, seed = configuration["batch_size"], configuration["seed"]
    _, optimizer = _optimizer(configuration, model, comm)
    try:
        sampler = d5.DistributedSampler(train, batch, optimizer.comm, seed=seed)

        def minibatches():
            while True:
                yield from sampler

        clock, times = time.perf_counter, []
        warmup, steps = configuration["warmup"], configuration["steps"]
        source = minibatches()
        before = {}
        for i in range(warmup + steps):
            inputs = next(source)
            if i == warmup:
                comm.Barrier()   # the timed steps start together
                before = dict(optimizer.phase_times)
            started = clock()
            optimizer.step(inputs)
            times.append(clock() - started)
        phases = {k: (v - before.get(k, 0.0)) / steps
                  for k, v in optimizer.phase_times.items()}
    finally:
        optimizer.comm.close()
    return {"step_s": times[warmup:], "phases_s": phases}


def _gather(world, value) -> list:
    return [value] if world is None else world.gather(value, root=0)


# --- 4. compare ------------------------------------------------------------------------

_PARTS = ("step_s", "compute_s", "forward_s", "backward_s", "other_compute_s",
          "exposed_communication_s", "communication_s", "straggler_s", "update_s",
          "throughput", "parallel_efficiency", "gradient_bytes")


def _compare(configuration, profiles, machine, machine_record, size, gathered) -> dict:
    """Rank 0: predicted and measured per rank count, and the scaling curves."""
    import deep500 as d5
    from deep500.lv3_distributed.distributed_training import synchronous_step_times
    batch, algorithm = configuration["batch_size"], configuration["algorithm"]
    profile = profiles[batch]
    comparisons = []
    alone = [g["alone"] for g in gathered]
    measured_alone = {
        "step_s": float(np.median(alone[0]["step_s"])),
        "how": ("ConsistentDecentralized on MPI_COMM_SELF: every rank alone, concurrently "
                "(nothing communicated); rank 0's median step" if size > 1
                else "ConsistentDecentralized on one rank (nothing communicated)"),
        "per_rank_median_s": [float(np.median(a["step_s"])) for a in alone],
        "phases_s": alone[0]["phases_s"], "samples_s": alone[0]["step_s"],
        "steps": len(alone[0]["step_s"])}
    comparisons.append(_row(1, d5.simulate_training(profile, machine, 1,
                                                    algorithm=algorithm), measured_alone))
    if size > 1:
        together = [g["together"] for g in gathered]
        steps = synchronous_step_times(
            [{"epochs": [{"step_times": t["step_s"]}]} for t in together], skip_steps=0)
        measured = {
            "step_s": float(np.median(steps)),
            "how": f"ConsistentDecentralized(algorithm={algorithm}) on {size} ranks; per "
                   f"step the slowest rank's, median over steps",
            "per_rank_median_s": [float(np.median(t["step_s"])) for t in together],
            "phases_s": {k: max(t["phases_s"].get(k, 0.0) for t in together)
                         for k in together[0]["phases_s"]},
            "samples_s": steps, "steps": len(steps)}
        comparisons.append(_row(size, d5.simulate_training(profile, machine, size,
                                                           algorithm=algorithm), measured))
    notes = []
    if size == 1:
        notes.append("run on 1 rank: only the 1-rank configuration (no communication) "
                     "was measured; run 'deep500 run --np 2 RECIPE' to measure the "
                     "allreduce")
    scaling = []
    for label, model_of, kind in _what_if_machines(configuration, machine, machine_record):
        if not _has_network(model_of):
            notes.append(f"no scaling curves on {label}: its machine file has no network "
                         f"model (calibrated on one rank)")
            continue
        scaling.append({"machine": label, "kind": kind, "algorithm": algorithm,
                        **_curves(configuration, profiles, model_of, size)})
    return {"machine": machine_record, "world_size": size,
            "profile": {"batch": batch, "source": profile.source,
                        "compute_s": profile.compute_s, "forward_s": profile.forward_s,
                        "backward_s": profile.backward_s,
                        "other_compute_s": profile.other_compute_s,
                        "update_s": profile.update_s, "fusion_s": profile.fusion_s,
                        "gradient_bytes": profile.gradient_bytes,
                        "per_rank_median_step_s": [g["profile_step_s"] for g in gathered]},
            "comparisons": comparisons, "scaling": scaling, "notes": notes}


def _row(ranks, step, measured) -> dict:
    predicted = {k: v for k, v in step.to_dict().items() if k in _PARTS}
    ratio = predicted["step_s"] / measured["step_s"]
    return {"ranks": ranks, "predicted": predicted, "measured": measured,
            "ratio": ratio, "error": abs(ratio - 1.0)}


def _what_if_machines(configuration, machine, machine_record):
    """(label, MachineModel, kind) of the run's machine and the what-if machines."""
    from deep500.utils.machine import load_machine, shipped_machines
    chosen = [(f"{machine.name} ({machine_record['given_by']})", machine,
               machine_record["given_by"])]
    names = configuration["what_if_machines"]
    paths = list(names) if names is not None else list(shipped_machines().values())
    for path in paths:
        other = load_machine(path)
        if machine_record.get("path") and os.path.abspath(str(other.path or "")) == \
                os.path.abspath(str(machine_record["path"])):
            continue
        chosen.append((other.name, other, "what-if"))
    return chosen


def _has_network(machine) -> bool:
    alpha = getattr(machine, "alpha", None)
    return alpha is not None and math.isfinite(alpha) and bool(machine.segments)


def powers_of_two(top: int) -> list[int]:
    return [1 << k for k in range(int(math.log2(top)) + 1)]


#: What the report reads of each rank count of a curve.
_CURVE_KEYS = ("ranks", "batch_per_rank", "step_s", "compute_s", "exposed_communication_s",
               "straggler_s", "throughput", "parallel_efficiency", "speedup",
               "strong_efficiency", "global_batch")


def _curves(configuration, profiles, machine, size) -> dict:
    """Predicted weak scaling (the batch per rank, on the profile measured at it, so
    the curve meets the predictions of the table) and strong scaling (the world's
    global batch split over the ranks, on the profile's per-node batch lines; rank
    counts with less than one sample per rank are left out) at 1, 2, 4, ...
    ``scaling_ranks`` ranks, by ``deep500 predict``'s
    :func:`deep500.recipe.scaling_curves.curves`."""
    from deep500.recipe.scaling_curves import Workload, curves
    batch = configuration["batch_size"]
    workload = Workload(configuration["network"].label, configuration["network"],
                        dict(configuration["dataset"]), configuration["loss"],
                        configuration["seed"], dict(configuration["optimizer"]), batch,
                        profiles[batch].threads, configuration["algorithm"], None)
    ranks = powers_of_two(configuration["scaling_ranks"])
    weak = curves(profiles[batch], machine, workload, ranks, global_batch=batch)["weak"]
    strong = curves(profiles["lines"], machine, workload, ranks, global_batch=batch * size)

    def trimmed(rows):
        return [{k: row[k] for k in _CURVE_KEYS if k in row} for row in rows]
    return {"batch_per_rank": batch, "global_batch": strong["global_batch"],
            "weak": trimmed(weak), "strong": trimmed(strong["strong"])}
