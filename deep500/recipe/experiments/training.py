"""Level-2 experiments: training across frameworks (``experiment: training``).

Each configuration trains the same ONNX model (same seeded initial weights) on the same
dataset, with minibatches drawn in the same seeded order, for the same number of
epochs; what varies is the executor (reference, PyTorch, TensorFlow) and the optimizer:
the executor framework's own implementation (``implementation: native``, e.g.
``torch.optim.Adam`` on PyTorch, Keras Adam on TensorFlow) or Deep500's NumPy reference
(``implementation: reference``) driving that executor.

::

    experiment: training
    fixed:   {dataset: digits, network: lenet, batch_size: 32, epochs: 8, seed: 0}
    mutable:
      executor:  [reference, pytorch, tensorflow]
      optimizer: [{type: momentum, learning_rate: 0.05},
                  {type: momentum, learning_rate: 0.05, implementation: reference}]
    metrics: {TestAccuracy: {}, TimeToAccuracy: {target: 0.95},
              TrajectoryDivergence: {steps: 40}}
    acceptance: ["TestAccuracy.final >= 0.95"]

``TrajectoryDivergence`` runs, before training, the configured optimizer and the
reference optimizer of the same type on the reference executor from the same weights
on the same minibatches, and records how far the parameters drift apart per step (as
Fig. 11 of the Deep500 paper).
"""
from __future__ import annotations

import importlib
import inspect
import os
import time

from deep500.frameworks import registry
from deep500.recipe.epoch_progress import epoch_events
from deep500.recipe.experiments import base
from deep500.recipe.experiments.networks import EXECUTORS, NetworkSpec, executor_factory, \
    parse_network
from deep500.recipe.problems import key_path, show
from deep500.utils.errors import MissingDependencyError, RecipeError

TRAINING_EXECUTORS = tuple(registry.executor_names(backprop=True))
# executor name -> module holding its framework's native optimizers (from the registry)
NATIVE_OPTIMIZERS = {e: registry.framework_of(e).optimizers for e in TRAINING_EXECUTORS}
REFERENCE_OPTIMIZERS = registry.get("reference").optimizers
# recipe name -> class name (the same in every framework that has it)
OPTIMIZER_TYPES = {"sgd": "GradientDescent", "momentum": "MomentumOptimizer",
                   "adam": "AdamOptimizer", "adagrad": "AdaGradOptimizer",
                   "rmsprop": "RMSPropOptimizer", "accelegrad": "AcceleGradOptimizer"}
SAMPLERS = {"shuffle": "ShuffleSampler", "ordered": "OrderedSampler",
            "choice": "ChoiceSampler", "bucket": "BucketSampler"}


class OptimizerSpec(base.Spec):
    """``{type, implementation, **hyper-parameters}``, hashable for caching."""
    OWN = ("type", "implementation")

    @property
    def type(self) -> str:
        return self["type"]

    @property
    def implementation(self) -> str:
        return self.get("implementation", "native")

    # the optimizer's hyper-parameters: its entries but type and implementation
    hyperparameters = property(base.Spec.settings)

    @property
    def label(self) -> str:
        values = self.settings_text()
        return f"{self.type}" + (f" ({values})" if values else "")


def _optimizer_class(module_name: str, type_name: str, where: str):
    try:
        module = importlib.import_module(module_name)
    except MissingDependencyError as exc:
        raise RecipeError(f"{where}: {exc}") from None
    cls = getattr(module, OPTIMIZER_TYPES[type_name], None)
    if cls is None:
        raise RecipeError(f"{where}: {module_name} has no {OPTIMIZER_TYPES[type_name]} "
                          f"(optimizer type {type_name!r}); use implementation: reference")
    return cls


def parse_optimizer(entry, where: str, recipe_dir=None) -> OptimizerSpec:
    spec = OptimizerSpec(base.named_mapping(
        entry, "type", where, f"an optimizer is a mapping with 'type' (one of "
                              f"{sorted(OPTIMIZER_TYPES)}) and its hyper-parameters"))
    if spec.type not in OPTIMIZER_TYPES:
        raise RecipeError(f"{where}.type: unknown optimizer {show(spec.type)}; known: "
                          f"{sorted(OPTIMIZER_TYPES)}")
    if spec.implementation not in ("native", "reference"):
        raise RecipeError(f"{where}.implementation: 'native' (the executor framework's "
                          f"own optimizer) or 'reference', got {show(spec.implementation)}")
    # Hyper-parameter names and values are checked against the reference class's
    # signature: its names, and the type of each default (a number takes a number).
    cls = _optimizer_class(REFERENCE_OPTIMIZERS, spec.type, where)
    parameters = inspect.signature(cls).parameters
    accepted = set(parameters) - {"executor", "loss", "events"}
    unknown = sorted(set(spec.hyperparameters) - accepted)
    if unknown:
        raise RecipeError(f"{where}: {OPTIMIZER_TYPES[spec.type]} takes no {unknown}; "
                          f"it takes {sorted(accepted)}")
    for key, value in spec.hyperparameters.items():
        base.check_like_default(parameters[key].default, value, key_path(where, key))
    return spec


def parse_dataset(entry, where: str, recipe_dir=None) -> tuple:
    entry = base.named_mapping(entry, "name", where, "a dataset is a name or a mapping "
                                                     "with 'name' and loader options")
    from deep500.datasets import dataset_names
    if entry["name"] not in dataset_names():
        raise RecipeError(f"{where}.name: unknown dataset {show(entry['name'])}; known: "
                          f"{dataset_names()}")
    return tuple(sorted(entry.items()))


def _training_executor(value, where, recipe_dir=None):
    if not isinstance(value, str) or value not in TRAINING_EXECUTORS:
        hint = " (it runs inference only)" if value in EXECUTORS else ""
        raise RecipeError(f"{where}: {show(value)} cannot train{hint}; executors that train: "
                          f"{list(TRAINING_EXECUTORS)}")
    return value


def make_optimizer(spec: OptimizerSpec, executor_name: str, executor):
    module = (REFERENCE_OPTIMIZERS if spec.implementation == "reference"
              else NATIVE_OPTIMIZERS[executor_name])
    cls = _optimizer_class(module, spec.type, f"optimizer {spec.label}")
    return cls(executor, loss="loss", **spec.hyperparameters)


class TrainingExperiment(base.Experiment):
    name = "training"
    level = 2
    components = {
        "executor": (_training_executor, base.REQUIRED),
        "network": (parse_network, base.REQUIRED),
        "dataset": (parse_dataset, (("name", "digits"),)),  # as parse_dataset returns
        "optimizer": (parse_optimizer, base.REQUIRED),
        "epochs": (base.positive_int, 5),
        "batch_size": (base.positive_int, 32),
        "test_batch_size": (base.positive_int, 256),
        "sampler": (base.one_of(tuple(SAMPLERS)), "shuffle"),
        "loss": base.loss_component(),
        **base.CONDITIONS,
    }
    input_components = ("dataset", "network", "seed", "loss")
    metric_names = ("TrainingAccuracy", "TestAccuracy", "TimeToAccuracy", "LossCurve",
                    "TrajectoryDivergence")
    default_metrics = ("TrainingAccuracy", "TestAccuracy", "LossCurve")

    def check(self, recipe, problems):
        for epath, name in recipe.located("executor"):
            before = len(problems)
            with problems.check(epath, name):
                executor_factory(name)
            if len(problems) > before:
                continue
            for opath, spec in recipe.located("optimizer"):
                module = (REFERENCE_OPTIMIZERS if spec.implementation == "reference"
                          else NATIVE_OPTIMIZERS[name])
                with problems.check(opath, spec.label):
                    _optimizer_class(module, spec.type, f"{opath}: optimizer {spec.label} "
                                                        f"on executor {name} ({epath})")
        check_datasets(recipe, problems)
        check_bucket_sampler(recipe, problems)

    def applicable(self, configuration) -> str | None:
        spec = configuration["optimizer"]
        if configuration["executor"] == "reference" and spec.implementation == "reference":
            return ("the reference executor's native optimizers are the reference ones; "
                    "this is the same configuration as implementation: native")
        return None

    def measure(self, recipe, configuration, tag, output_dir, state):
        import deep500 as d5
        train, test = cached_datasets(configuration, state)
        model = build_network(configuration, train)
        build_executor = executor_factory(configuration["executor"])
        spec: OptimizerSpec = configuration["optimizer"]
        metrics = recipe.build_metrics(output_dir, tag)
        divergence = [m for m in metrics if m.name == "TrajectoryDivergence"]
        training_metrics = [m for m in metrics if m.name != "TrajectoryDivergence"]
        sampler_class = getattr(d5, SAMPLERS[configuration["sampler"]])
        divergence_results = []
        for metric in divergence:
            # The reference optimizer of this type on the reference executor (a) against
            # this configuration's optimizer and executor (b), each on its own network.
            reference = make_optimizer(OptimizerSpec({**spec, "implementation": "reference"}),
                                       "reference", executor_factory("reference")(model, "cpu"))
            candidate = make_optimizer(spec, configuration["executor"],
                                       build_executor(model, configuration["device"]))
            metric.path = os.path.join(output_dir, "trajectories", f"{tag}.json")
            divergence_results.append(metric.compare(
                reference, candidate,
                sampler_class(train, configuration["batch_size"], seed=configuration["seed"])))
        executor = build_executor(model, configuration["device"])
        optimizer = make_optimizer(spec, configuration["executor"], executor)
        log = os.path.join(output_dir, "training", f"{tag}.csv")
        training_started = time.time()   # MLPerf init_stop / run_start
        result = d5.test_training(executor, train, test, optimizer,
                                  epochs=configuration["epochs"],
                                  batch_size=configuration["batch_size"],
                                  metrics=training_metrics,
                                  events=[d5.CSVWriter(log), *epoch_events()],
                                  sampler=sampler_class, seed=configuration["seed"],
                                  test_batch_size=configuration["test_batch_size"])
        result.metrics.extend(divergence_results)
        result.details["training_started_unix"] = training_started
        return result

    def describe(self, configuration):
        return {**configuration, "network": configuration["network"].to_dict(),
                "dataset": dict(configuration["dataset"]),
                "optimizer": {**configuration["optimizer"],
                              "implementation": configuration["optimizer"].implementation,
                              "label": configuration["optimizer"].label}}


def check_bucket_sampler(recipe, problems) -> None:
    """``sampler: bucket`` groups sequences by length: every dataset must hold token
    sequences (int64 ids; their padding tells the lengths)."""
    if "bucket" not in recipe.alternatives("sampler"):
        return
    from deep500.datasets import dataset_shape
    where = next(p for p, v in recipe.located("sampler") if v == "bucket")
    for path, entry in recipe.located("dataset"):
        options = dict(entry)
        name = options.pop("name")
        try:
            dtype = dataset_shape(name, **options).get("dtype")
        except Exception:  # noqa: BLE001 - check_datasets names this dataset's problem
            continue
        if dtype != "int64":
            problems.add(where, f"sampler: bucket draws minibatches of sequences of "
                                f"similar length, but dataset {name} ({path}) holds no "
                                f"token sequences (its inputs are {dtype}, not int64 "
                                f"token ids); use a token dataset (token-order, "
                                f"markov-tokens) or another sampler")


def check_datasets(recipe, problems) -> None:
    """Each dataset's name, and its loader options against the loader's signature."""
    from deep500.datasets import dataset_shape
    from deep500.datasets.registry import FILE_OPTIONS, _entry
    from deep500.recipe.typed_schema import argument_problems
    for path, entry in recipe.located("dataset"):
        options = dict(entry)
        name = options.pop("name")
        with problems.check(path, name):
            dataset_shape(name)
            loader = _entry(name)
            if not loader.files:
                options = {k: v for k, v in options.items() if k not in FILE_OPTIONS}
            for message in argument_problems(loader.load, options, path):
                problems.add("", message)


def cached_datasets(configuration: dict, state: dict) -> tuple:
    """The configuration's ``(train, test)`` datasets, loaded once per distinct entry
    (consecutive configurations usually share them)."""
    entry = configuration["dataset"]
    if state.get("dataset_key") != entry:
        from deep500.datasets import load_dataset
        options = dict(entry)
        train, test = load_dataset(options.pop("name"), **options)
        state.update(dataset_key=entry, datasets=(train, test))
    return state["datasets"]


def build_network(configuration: dict, train):
    """The configuration's ONNX model with its loss; a zoo model takes its input shape
    and classes from the training set unless the recipe gives them."""
    spec: NetworkSpec = configuration["network"]
    if spec.file is None:
        options = dict(spec.options)
        options.setdefault("input_shape", tuple(train.sample_shape))
        if train.classes:
            options.setdefault("classes", int(train.classes))
        spec = NetworkSpec(model=spec.model, options=tuple(sorted(options.items())),
                           frozen=spec.frozen)
    return spec.build("N", "float32", configuration["seed"], configuration["loss"],
                      dataset_input=train.input_node)
