"""Level-3 experiments: distributed training schemes compared
(``experiment: distributed``).

Every configuration trains the same ONNX model (same seeded initial weights on every
rank) on the same dataset with ``d5.DistributedSampler`` minibatches (rank ``r`` takes
its slice of every global minibatch of one seeded permutation), for the same epochs,
with the same base optimizer; what varies is the distributed scheme:

* a reference scheme of ``deep500.frameworks.reference.distributed.SCHEMES`` by class
  name, with its options, wrapping Deep500's reference optimizer of the given type
  (``d5ref.ConsistentDecentralized(d5ref.MomentumOptimizer(...), comm, **options)``)
  on the ``executor`` (default: the NumPy reference);
* a framework's own distributed baseline by name (``{framework: pytorch, scheme:
  <class in deep500.frameworks.pytorch.distributed>}``), wrapping that framework's
  native optimizer of the same type on its executor.

::

    experiment: distributed
    fixed:   {dataset: digits, network: mlp, optimizer: {type: momentum,
              learning_rate: 0.05}, batch_size: 32, epochs: 6, seed: 0}
    mutable:
      scheme: [ConsistentDecentralized, {scheme: ModelAverageDecentralized, period: 4},
               {framework: pytorch, scheme: DistributedDataParallel}]
    metrics: {TestAccuracy: {}, TimeToAccuracy: {target: 0.9}}
    acceptance: ["TestAccuracy.final >= 0.9"]

Run it with ``deep500 run --np N recipe.yaml`` (or ``mpirun -np N deep500 run
recipe.yaml``): every rank trains, and the runner gathers each rank's record at rank 0,
which writes them. Rank 0's result holds, in ``details["distributed"]``, every rank's
per-epoch statistics, the global per-epoch figures
(:mod:`deep500.lv3_distributed.distributed_training`) and ``analytic``: each rank's
bytes per epoch by the scheme's own traffic model (``analytic_traffic(steps)``). With
one process the schemes run on one rank (nothing is communicated) and the report says
so.

A grid of rank counts: ``ranks`` (fixed, or ``mutable: {ranks: [1, 2, 4]}``, with
``threads`` per rank) makes ``deep500 run recipe.yaml`` launch each rank count under
``mpirun`` itself (:mod:`deep500.recipe.rank_grid`); ``lr_scaling: linear`` multiplies
the optimizer's ``learning_rate`` by the number of ranks (Goyal et al. 2017), recorded
in ``details["lr_scaling"]``.

Weak and strong scaling: ``scaling: strong`` holds ``global_batch`` fixed and gives each
rank ``global_batch / ranks`` samples; ``weak`` (the default) gives each rank
``batch_size`` (:mod:`deep500.recipe.batch_scaling`; ``details["batch"]``). Default
versus best collective: ``mpich_allreduce`` runs each value's configurations under
``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` set to it (a launch setting of the rank grid,
:mod:`deep500.recipe.launch_environment`); every record says in
``details["mpich_allreduce"]`` which algorithm MPICH started with. ``allreduce_sizes``
times the scheme's allreduce per message size before training
(:mod:`deep500.recipe.allreduce_sweep`, ``details["allreduce_sizes"]``).

Failures: a scheme that cannot be set up on some rank (bad option value, missing
framework) is an error record for that configuration on every rank, and the next one
runs; a failure during training stops every rank (``guarded_main``): what was written
before stays, and ``deep500 report DIR`` rebuilds the report.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import os
import time

from deep500.frameworks import registry
from deep500.lv2_training.events import TrainingEvent
from deep500.recipe import (allreduce_sweep, batch_scaling, collective_choice, components,
                            launch_environment)
from deep500.recipe.epoch_progress import epoch_events
from deep500.recipe.experiments import base
from deep500.recipe.experiments.networks import executor_factory, \
    parse_network
from deep500.recipe.experiments.training import (NATIVE_OPTIMIZERS, REFERENCE_OPTIMIZERS,
                                                 TRAINING_EXECUTORS, OptimizerSpec,
                                                 _optimizer_class, build_network,
                                                 cached_datasets, check_datasets,
                                                 make_optimizer,
                                                 parse_dataset, parse_optimizer)
from deep500.recipe.problems import describe, key_path
from deep500.results.files import mark_run_failed
from deep500.utils.errors import Deep500Error, MissingDependencyError, RecipeError

REFERENCE_SCHEMES = registry.get("reference").distributed_module
# framework -> (module of its distributed baselines, executor it trains on), from the
# registry: every framework with distributed support other than the reference's schemes
BASELINES = {name: (registry.get(name).distributed_module, name)
             for name in registry.names(distributed=True) if name != "reference"}


# What a baseline is called where its framework names it shortly (PyTorch's documentation
# and tutorials call DistributedDataParallel "DDP").
BASELINE_SHORT_NAMES = {"DistributedDataParallel": "DDP"}


# Learning-rate scaling rules across rank counts: "none" keeps the recipe's rate;
# "linear" multiplies it by the number of ranks, the global batch growing with them
# (Goyal et al. 2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour",
# section 2.1: "when the minibatch size is multiplied by k, multiply the learning rate
# by k"), relative to the recipe's rate taken as the 1-rank rate.
LR_SCALING_RULES = ("none", "linear")


def scaled_optimizer(optimizer: OptimizerSpec, rule: str, ranks: int,
                     factor: float | None = None) -> tuple:
    """``(optimizer spec, what was done)``: the base optimizer's spec with its
    ``learning_rate`` scaled by ``rule`` for ``ranks`` ranks (by ``factor``, the global
    batch over the recipe's ``batch_size``, where given: ``batch_scaling``), and the
    record of it (``rule``, ``ranks``, ``base_learning_rate``, ``learning_rate``,
    ``source``), or ``None`` for the rule ``none``. A rule other than
    ``none`` on an optimizer without a ``learning_rate`` hyper-parameter in the recipe
    raises RecipeError."""
    if rule == "none":
        return optimizer, None
    rate = optimizer.get("learning_rate")
    if not isinstance(rate, (int, float)) or isinstance(rate, bool):
        raise RecipeError(f"lr_scaling: {rule} scales the optimizer's learning_rate, but "
                          f"optimizer {optimizer.label} gives none; add learning_rate "
                          f"to the optimizer or set lr_scaling: none")
    factor = ranks if factor is None else factor
    scaled = float(rate) * factor
    return OptimizerSpec({**optimizer, "learning_rate": scaled}), {
        "rule": rule, "ranks": ranks, "base_learning_rate": float(rate),
        "learning_rate": scaled, "source": "Goyal et al. 2017, sec. 2.1 (linear scaling "
                                           "rule)"}


class SchemeSpec(base.Spec):
    """``{framework, scheme, **options}``, hashable for the recipe's cross product."""
    OWN = ("framework", "scheme")

    @property
    def framework(self) -> str:
        return self.get("framework", "reference")

    @property
    def scheme(self) -> str:
        return self["scheme"]

    # the scheme's options: its entries but framework and scheme
    options = property(base.Spec.settings)

    @property
    def label(self) -> str:
        """The scheme's name for tables and legends: a reference scheme's class name, a
        baseline's framework and name as its framework calls it ("PyTorch DDP",
        "TensorFlow MultiWorkerMirroredStrategy"), with the options the recipe set."""
        options = self.settings_text()
        name = self.scheme
        if self.framework != "reference":
            framework = registry.get(self.framework).description
            name = name[len(framework):] if name.startswith(framework) else name
            name = f"{framework} {BASELINE_SHORT_NAMES.get(name, name)}"
        return name + (f"({options})" if options else "")


def reference_schemes() -> dict:
    """Class name -> reference scheme (``d5ref`` registry)."""
    return importlib.import_module(REFERENCE_SCHEMES).SCHEMES


def baseline_class(framework: str, name: str, where: str):
    """The class ``name`` of ``framework``'s distributed baselines module, or a
    RecipeError saying what is missing. The one place a baseline is resolved."""
    module_name, _ = BASELINES[framework]
    try:
        module = importlib.import_module(module_name)
    except MissingDependencyError as exc:
        raise RecipeError(f"{where}: {exc}") from None
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise RecipeError(f"{where}: the {framework} distributed baseline is not available "
                          f"in this installation ({module_name} is missing); remove this "
                          f"entry or use a reference scheme: "
                          f"{sorted(reference_schemes())}") from None
    available = getattr(module, "BASELINES", None) or {
        n: getattr(module, n) for n in getattr(module, "__all__", ())
        if inspect.isclass(getattr(module, n, None))}
    cls = available.get(name)
    if cls is None:
        raise RecipeError(f"{where}.scheme: {framework} has no distributed baseline "
                          f"{name!r}; available: {sorted(available)}")
    return cls


def _check_options(cls, options: dict, where: str) -> None:
    parameters = inspect.signature(cls).parameters
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return
    accepted = set(parameters) - {"base_optimizer", "comm"}
    unknown = sorted(map(str, set(options) - accepted))
    if unknown:
        raise RecipeError(f"{where}: {cls.__name__} takes no options {unknown}; it takes "
                          f"{sorted(accepted) or 'none'}")
    for key, value in options.items():
        base.check_like_default(parameters[key].default, value, key_path(where, key))
    # Every scheme's ``algorithm`` option is its allreduce algorithm.
    if "algorithm" in options:
        components.allreduce_algorithm_name(options["algorithm"],
                                            key_path(where, "algorithm"))
    # A scheme may check its option values up front (e.g. the allreduce algorithm's name).
    check = getattr(cls, "check_options", None)
    if check is not None:
        try:
            check(**options)
        except Deep500Error as exc:
            raise RecipeError(f"{where}: {exc}") from None


def parse_scheme(entry, where: str, recipe_dir=None) -> SchemeSpec:
    spec = SchemeSpec(base.named_mapping(
        entry, "scheme", where, "a scheme is a class name or a mapping with 'scheme' (and "
                                "'framework' for a framework's baseline) and its options"))
    for key, value in spec.options.items():
        if isinstance(value, dict):
            raise RecipeError(f"{where}.{key}: scheme options are numbers, strings, "
                              f"booleans or lists, got {describe(value)}")
    if not isinstance(spec.framework, str):
        raise RecipeError(f"{where}.framework: expected a framework name (a string), got "
                          f"{describe(spec.framework)}")
    if spec.framework == "reference":
        schemes = reference_schemes()
        if spec.scheme not in schemes:
            raise RecipeError(f"{where}.scheme: unknown reference scheme {spec.scheme!r}; "
                              f"available: {sorted(schemes)}")
        _check_options(schemes[spec.scheme], spec.options, where)
    elif spec.framework not in BASELINES:
        raise RecipeError(f"{where}.framework: {spec.framework!r} has no distributed "
                          f"baseline; frameworks: {['reference', *sorted(BASELINES)]}")
    return spec


def parse_base_optimizer(entry, where: str, recipe_dir=None) -> OptimizerSpec:
    spec = parse_optimizer(entry, where, recipe_dir)
    if "implementation" in spec:
        raise RecipeError(f"{where}: remove 'implementation': reference schemes wrap "
                          f"Deep500's reference optimizer of this type, and a framework's "
                          f"baseline uses that framework's own")
    return spec


def _executor(value, where, recipe_dir=None):
    if not isinstance(value, str) or value not in TRAINING_EXECUTORS:
        raise RecipeError(f"{where}: reference schemes drive an executor that trains: "
                          f"{list(TRAINING_EXECUTORS)}, got {describe(value)}")
    return value


def make_distributed_optimizer(scheme: SchemeSpec, optimizer: OptimizerSpec,
                               executor, comm):
    """The scheme wrapping its base optimizer on ``executor`` (constructor convention
    ``Scheme(base_optimizer, comm, **options)``, baselines included)."""
    if scheme.framework == "reference":
        cls = reference_schemes()[scheme.scheme]
        base_optimizer = make_optimizer(OptimizerSpec({**optimizer,
                                                       "implementation": "reference"}),
                                        "reference", executor)
    else:
        cls = baseline_class(scheme.framework, scheme.scheme, f"scheme {scheme.label}")
        base_optimizer = make_optimizer(optimizer, BASELINES[scheme.framework][1], executor)
    return cls(base_optimizer, comm, **scheme.options)


def _set_up_process(scheme: SchemeSpec, comm) -> None:
    """A baseline's ``set_up_process(comm, **options)``, where it has one: what must
    happen before its framework runs in the process (TensorFlow's
    MultiWorkerMirroredStrategy configures collective ops only at start-up).
    Collective."""
    if scheme.framework == "reference":
        return
    cls = baseline_class(scheme.framework, scheme.scheme, f"scheme {scheme.label}")
    set_up = getattr(cls, "set_up_process", None)
    if set_up is not None:
        set_up(comm, **scheme.options)


class DistributedExperiment(base.Experiment):
    name = "distributed"
    level = 3
    components = {
        "scheme": (parse_scheme, base.REQUIRED),
        "network": (parse_network, base.REQUIRED),
        "optimizer": (parse_base_optimizer, base.REQUIRED),
        "dataset": (parse_dataset, (("name", "digits"),)),
        "executor": (_executor, "reference"),
        "batch_size": (base.positive_int, 32),          # per rank
        "epochs": (base.positive_int, 5),
        "test_batch_size": (base.positive_int, 256),
        "loss": base.loss_component(),
        "threads": base.CONDITIONS["threads"],
        "seed": base.CONDITIONS["seed"],
        # MPI ranks; deep500 run launches each count itself (deep500.recipe.rank_grid)
        "ranks": (base.positive_int, None),
        "lr_scaling": (base.one_of(LR_SCALING_RULES), "none"),
        # weak (batch_size per rank, the default) or strong (global_batch over the ranks)
        "scaling": (batch_scaling.parse_scaling, None),
        "global_batch": (batch_scaling.parse_global_batch, None),
        # MPICH's MPI_Allreduce algorithm, set in each mpirun job's environment
        launch_environment.MPICH_ALLREDUCE: (launch_environment.parse_mpich_allreduce,
                                             None),
        # message sizes (bytes) at which the scheme's allreduce is timed before training
        "allreduce_sizes": (allreduce_sweep.parse_allreduce_sizes, None),
    }
    # Components a record's configuration shows only where the recipe sets them.
    optional_components = ("scaling", "global_batch", launch_environment.MPICH_ALLREDUCE,
                           "allreduce_sizes")
    input_components = ("dataset", "network", "seed", "loss")
    metric_names = ("TrainingAccuracy", "TestAccuracy", "TimeToAccuracy", "LossCurve",
                    "Timeline", "MPIProfiling")
    default_metrics = ("TrainingAccuracy", "TestAccuracy", "LossCurve")

    def check(self, recipe, problems):
        executors_checked = False
        for path, scheme in recipe.located("scheme"):
            label = f"{path}: scheme {scheme.label}"
            if scheme.framework == "reference":
                if not executors_checked:
                    for epath, name in recipe.located("executor"):
                        with problems.check(epath, name):
                            executor_factory(name)
                    executors_checked = True
                continue
            before = len(problems)
            with problems.check(path, scheme.label):
                _check_options(baseline_class(scheme.framework, scheme.scheme, label),
                               scheme.options, label)
                executor_name = BASELINES[scheme.framework][1]
                executor_factory(executor_name)
            if len(problems) > before:
                continue
            for opath, spec in recipe.located("optimizer"):
                with problems.check(path, spec.label):
                    _optimizer_class(NATIVE_OPTIMIZERS[executor_name], spec.type,
                                     f"{label}: optimizer {spec.label} ({opath})")
        for opath, spec in recipe.located("optimizer"):
            with problems.check(opath, spec.label):
                _optimizer_class(REFERENCE_OPTIMIZERS, spec.type, f"{opath}: optimizer")
            if any(rule != "none" for rule in recipe.alternatives("lr_scaling")) and \
                    "learning_rate" not in spec:
                where = next(p for p, v in recipe.located("lr_scaling") if v != "none")
                problems.add(where, f"lr_scaling scales the optimizer's learning_rate, "
                                    f"but optimizer {spec.label} ({opath}) gives none; "
                                    f"add learning_rate or set lr_scaling: none")
        check_datasets(recipe, problems)
        collective_choice.check(recipe, problems, reference_schemes())
        batch_scaling.check(recipe, problems)

    def applicable(self, configuration) -> str | None:
        """Why a configuration is skipped (``collective_choice.skip_reason``), or
        None."""
        return collective_choice.skip_reason(configuration, reference_schemes())

    def executor_name(self, configuration) -> str:
        scheme = configuration["scheme"]
        return (configuration["executor"] if scheme.framework == "reference"
                else BASELINES[scheme.framework][1])

    def measure(self, recipe, configuration, tag, output_dir, state):
        import deep500 as d5
        from deep500.lv3_distributed import CommunicationNetwork, guarded_main
        comm = CommunicationNetwork()  # collective: every rank of the world
        if "MPIProfiling" in recipe.metric_builders:
            from deep500.lv3_distributed.mpi_profiling import MPIProfiling
            MPIProfiling.off()   # set-up is outside the measured phase
        scheme: SchemeSpec = configuration["scheme"]
        ranks = configuration.get("ranks")
        if ranks is not None and ranks != comm.size:  # the runner launches each count
            comm.close()
            raise RecipeError(f"ranks: this configuration is for {ranks} rank(s) but runs "
                              f"on {comm.size}; run the recipe with 'deep500 run RECIPE', "
                              f"which launches each rank count under mpirun itself")
        train, test = cached_datasets(configuration, state)
        problem = scaling = None
        try:
            batch = batch_scaling.batch_per_rank(configuration, comm.size)
            base_optimizer, scaling = scaled_optimizer(
                configuration["optimizer"], configuration.get("lr_scaling", "none"),
                comm.size, batch_scaling.learning_rate_factor(configuration, comm.size))
            model = build_network(configuration, train)
            _set_up_process(scheme, comm)
            executor = executor_factory(self.executor_name(configuration))(model, "cpu")
            optimizer = make_distributed_optimizer(scheme, base_optimizer, executor, comm)
            sampler = d5.DistributedSampler(train, batch, comm, seed=configuration["seed"])
        except (Deep500Error, TypeError, ValueError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        # Agree before any rank starts communicating, so a set-up failure on one rank
        # is an error record on all of them rather than a hang.
        problems = comm.comm.allgather(problem)
        if any(problems):
            comm.close()
            raise RecipeError(f"scheme {scheme.label} could not be set up: " + "; ".join(
                f"rank {r}: {p}" for r, p in enumerate(problems) if p))
        metrics = recipe.build_metrics(output_dir, tag)
        events = []
        if isinstance(optimizer, TrainingEvent):
            # A scheme that acts on the epoch's test results (NNT's synchronisation to
            # the best worker) hears them as a training event.
            events.append(optimizer)
        if comm.rank == 0:  # only rank 0 writes into the run folder
            events.append(d5.CSVWriter(os.path.join(output_dir, "training", f"{tag}.csv")))
            events += epoch_events()
        with guarded_main(comm, on_failure=functools.partial(
                mark_run_failed, output_dir, ending_the_job=True)):
            sweep = self._allreduce_sizes(configuration, optimizer, comm)
            training_started = time.time()   # MLPerf init_stop / run_start
            result = d5.test_training(executor, train, test, optimizer,
                                      epochs=configuration["epochs"],
                                      batch_size=batch,
                                      metrics=metrics, events=events, sampler=sampler,
                                      seed=configuration["seed"],
                                      test_batch_size=configuration["test_batch_size"])
            distributed = self._distributed_details(optimizer, comm, result)
        comm.close()
        if comm.rank == 0:
            result.details["distributed"] = distributed
            if sweep is not None:
                result.details["allreduce_sizes"] = sweep
        if scaling is not None:
            result.details["lr_scaling"] = scaling
        result.details["batch"] = batch_scaling.batch_details(configuration, comm.size)
        result.details["training_started_unix"] = training_started
        # which MPI_Allreduce algorithm MPICH started with on this rank
        result.details[launch_environment.MPICH_ALLREDUCE] = comm.mpi_allreduce_algorithm
        return result

    @staticmethod
    def _allreduce_sizes(configuration, optimizer, comm) -> dict | None:
        """The scheme's allreduce timed at the recipe's ``allreduce_sizes`` (rank 0's
        result, with the size of the step's fused gradients; ``allreduce_sweep``), or
        None. Collective."""
        scheme = configuration["scheme"]
        algorithm = collective_choice.scheme_algorithm(scheme, reference_schemes())
        if not configuration.get("allreduce_sizes") or algorithm is None:
            return None
        sweep = allreduce_sweep.time_allreduce_sizes(
            comm.comm, configuration["allreduce_sizes"], algorithm,
            scheme.options.get("segment_bytes"))
        if sweep is not None:
            sweep["gradient_bytes"] = optimizer.fused().nbytes
        return sweep

    def _distributed_details(self, optimizer, comm, result) -> dict | None:
        """Rank 0: the global figures plus every rank's analytic traffic per epoch, its
        hyper-parameters and the scheme's consistency; ``None`` elsewhere. Collective."""
        summary = result.details.get("distributed")
        if "distributed" not in result.details:  # an optimizer without its own summary
            from deep500.lv3_distributed.distributed_training import global_epochs
            gathered = comm.comm.gather(result.outputs.to_dict(), root=0)
            summary = None if comm.rank else {
                "scheme": optimizer.name, "size": comm.size,
                "consistent": getattr(optimizer, "consistent", None), "ranks": gathered,
                "epochs": global_epochs(gathered)}
        epochs = [e for e in result.outputs.epochs if e.completed]
        steps = epochs[0].steps if epochs else 0
        analytic = getattr(optimizer, "analytic_traffic", lambda steps: None)(steps)
        analytic = None if analytic is None else {**analytic, "steps": steps}
        analytic = comm.comm.gather(analytic, root=0)
        if comm.rank != 0:
            return None
        hyperparameters = getattr(optimizer, "hyperparameters", dict)()
        return {**summary, "analytic_per_epoch": analytic,
                "hyperparameters": hyperparameters}

    def describe(self, configuration):
        scheme = configuration["scheme"]
        configuration = {k: v for k, v in configuration.items()
                         if k not in self.optional_components or v is not None}
        return {**configuration, "network": configuration["network"].to_dict(),
                "dataset": dict(configuration["dataset"]),
                "executor": self.executor_name(configuration),
                "optimizer": {**configuration["optimizer"],
                              "label": configuration["optimizer"].label},
                "scheme": {**scheme, "framework": scheme.framework,
                           "label": scheme.label}}
