"""Level-3 experiments comparing data, pipeline and hybrid parallelism
(``experiment: parallelism``), the table of a local-parallelism study in shape.

Everything of ``experiment: distributed`` holds (the same model, weights, dataset,
optimizer, epochs, metrics and report), and ``scheme`` may also be a pipeline::

    {scheme: PipelineParallel, stages: 2, microbatches: 4, schedule: gpipe,
     data_parallel: 1, cuts: [3]}

(``d5.PipelineParallel``: ``stages · data_parallel`` ranks; ``cuts`` default: balanced
by the nodes' measured seconds; the stages run on the reference executor.) A
configuration whose ``ranks`` differ from ``stages · data_parallel`` is skipped with the
reason. ``batch_size`` stays per rank for every scheme, so that every configuration on
the same ranks trains with the same global minibatch: a pipeline takes ``batch_size ·
stages`` samples per step (``d5.DistributedSampler`` over the stage's replicas, so the
ranks of one pipeline read the same minibatch). The record's
``details["pipeline"]`` holds the split, the schedule and the bubble fraction per epoch
(measured, GPipe's formula and the timeline model's, its messages priced by the
recipe's machine file where it has one) with the measured and modelled step seconds;
each rank's ``optimizer_measurements["pipeline"]`` its stage's figures.
"""
from __future__ import annotations

import functools
import os
import time

import numpy as np

from deep500.recipe import batch_scaling
from deep500.recipe.experiments import base
from deep500.recipe.experiments.distributed import (DistributedExperiment, SchemeSpec,
                                                    parse_scheme, scaled_optimizer)
from deep500.recipe.experiments.networks import executor_factory
from deep500.recipe.experiments.training import (OptimizerSpec, build_network,
                                                 cached_datasets, make_optimizer)
from deep500.recipe.problems import describe
from deep500.results.files import mark_run_failed
from deep500.utils.errors import Deep500Error, RecipeError

PIPELINE = "PipelineParallel"
PIPELINE_OPTIONS = {"stages": 2, "microbatches": 4, "schedule": "gpipe",
                    "data_parallel": 1, "cuts": None}


def parse_parallel_scheme(entry, where: str, recipe_dir=None) -> SchemeSpec:
    """A distributed experiment's scheme, or ``{scheme: PipelineParallel, ...}``."""
    name = entry.get("scheme") if isinstance(entry, dict) else entry
    if name != PIPELINE:
        return parse_scheme(entry, where, recipe_dir)
    spec = SchemeSpec(base.named_mapping(
        entry, "scheme", where, "a pipeline is {scheme: PipelineParallel, stages, "
                                "microbatches}"))
    if spec.framework != "reference":
        raise RecipeError(f"{where}.framework: PipelineParallel runs on Deep500's "
                          f"reference executor; remove framework")
    unknown = sorted(set(spec.options) - set(PIPELINE_OPTIONS))
    if unknown:
        raise RecipeError(f"{where}: PipelineParallel takes no options {unknown}; it takes "
                          f"{sorted(PIPELINE_OPTIONS)}")
    for key in ("stages", "microbatches", "data_parallel"):
        value = spec.options.get(key, PIPELINE_OPTIONS[key])
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RecipeError(f"{where}.{key}: a whole number >= 1, got {describe(value)}")
    from deep500.lv3_distributed.pipeline.schedule import SCHEDULES
    if spec.options.get("schedule", "gpipe") not in SCHEDULES:
        raise RecipeError(f"{where}.schedule: one of {sorted(SCHEDULES)}, got "
                          f"{describe(spec.options['schedule'])}")
    cuts = spec.options.get("cuts")
    if cuts is not None and (not isinstance(cuts, list) or
                             len(cuts) != spec.options.get("stages", 2) - 1 or
                             not all(isinstance(c, int) and not isinstance(c, bool)
                                     for c in cuts)):
        raise RecipeError(f"{where}.cuts: a list of stages - 1 node indices, got "
                          f"{describe(cuts)}")
    return spec


def pipeline_options(scheme: SchemeSpec) -> dict:
    return {**PIPELINE_OPTIONS, **scheme.options}


class ParallelismExperiment(DistributedExperiment):
    name = "parallelism"
    components = {**DistributedExperiment.components,
                  "scheme": (parse_parallel_scheme, base.REQUIRED)}

    def applicable(self, configuration) -> str | None:
        scheme = configuration["scheme"]
        if scheme.scheme != PIPELINE:
            return super().applicable(configuration)
        options = pipeline_options(scheme)
        needed = options["stages"] * options["data_parallel"]
        ranks = configuration.get("ranks")
        if ranks is not None and ranks != needed:
            return (f"{scheme.label} runs on stages x data_parallel = {needed} ranks, "
                    f"not {ranks}")
        if configuration.get("executor", "reference") != "reference":
            return f"{scheme.label} runs on the reference executor"
        return None

    def measure(self, recipe, configuration, tag, output_dir, state):
        if configuration["scheme"].scheme != PIPELINE:
            return super().measure(recipe, configuration, tag, output_dir, state)
        import deep500 as d5
        from mpi4py import MPI

        from deep500.lv3_distributed import guarded_main
        from deep500.lv3_distributed.pipeline import PipelineParallel
        from deep500.lv3_distributed.pipeline.pipeline_training import PipelineTraining
        scheme, world = configuration["scheme"], MPI.COMM_WORLD
        options = pipeline_options(scheme)
        train, test = cached_datasets(configuration, state)
        batch = batch_scaling.batch_per_rank(configuration, world.Get_size())
        per_pipeline = batch * options["stages"]
        problem = scaling = training = None
        try:
            spec, scaling = scaled_optimizer(
                configuration["optimizer"], configuration.get("lr_scaling", "none"),
                world.Get_size(),
                batch_scaling.learning_rate_factor(configuration, world.Get_size()))
            model = build_network(configuration, train)
            factory = executor_factory("reference")
            reference = OptimizerSpec({**spec, "implementation": "reference"})
            pipeline = PipelineParallel(
                model, options["stages"], options["microbatches"], options["schedule"],
                executor=lambda m: factory(m, "cpu"),
                optimizer=lambda e: make_optimizer(reference, "reference", e),
                cuts=options["cuts"], profile_inputs=train[np.arange(per_pipeline)],
                data_parallel=options["data_parallel"])
            training = PipelineTraining(pipeline, factory(model, "cpu"), recipe.machine)
            sampler = d5.DistributedSampler(train, per_pipeline, pipeline.replicas,
                                            seed=configuration["seed"])
        except (Deep500Error, TypeError, ValueError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        problems = world.allgather(problem)
        if any(problems):
            raise RecipeError(f"scheme {scheme.label} could not be set up: " + "; ".join(
                f"rank {r}: {p}" for r, p in enumerate(problems) if p))
        metrics = recipe.build_metrics(output_dir, tag)
        events = []
        if world.Get_rank() == 0:
            events.append(d5.CSVWriter(os.path.join(output_dir, "training", f"{tag}.csv")))
        with guarded_main(training.comm, on_failure=functools.partial(
                mark_run_failed, output_dir, ending_the_job=True)):
            started = time.time()
            result = d5.test_training(training.executor, train, test, training,
                                      epochs=configuration["epochs"],
                                      batch_size=per_pipeline, metrics=metrics,
                                      events=events, sampler=sampler,
                                      seed=configuration["seed"],
                                      test_batch_size=configuration["test_batch_size"])
            distributed = self._distributed_details(training, training.comm, result)
        training.close()
        if world.Get_rank() == 0:
            result.details["distributed"] = distributed
        if scaling is not None:
            result.details["lr_scaling"] = scaling
        result.details["batch"] = {**batch_scaling.batch_details(configuration,
                                                                 world.Get_size()),
                                   "per_pipeline": per_pipeline}
        result.details["pipeline"] = self._pipeline_details(training, result)
        result.details["training_started_unix"] = started
        return result

    @staticmethod
    def _pipeline_details(training, result) -> dict:
        p = training.pipeline
        epochs = [(e.optimizer_measurements or {}).get("pipeline", {})
                  for e in result.outputs.epochs]
        return {"stages": p.stages, "microbatches": p.microbatches,
                "schedule": p.schedule_name, "data_parallel": p.data_parallel,
                "cuts": p.cuts, "stage_nodes": [s.nodes for s in p.all_stages],
                "node_seconds": getattr(p, "node_seconds", None),
                "bytes_per_sample_per_cut": p.boundary_bytes(p.microbatches),
                "bubble_per_epoch": [e.get("bubble") for e in epochs]}
