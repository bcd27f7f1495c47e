"""Level-1 experiments: whole ONNX networks across graph executors
(``experiment: networks``).

Each configuration builds the same ONNX model (same seeded weights), feeds the same
seeded inputs, and runs inference or inference + backpropagation; outputs and gradients
are compared with the reference executor's on the same model and inputs.
"""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field

import numpy as np

from deep500.frameworks import registry
from deep500.lv1_network.validation import test_executor_backprop, test_executor_inference
from deep500.recipe import components, microbatch_budget
from deep500.recipe.experiments import base
from deep500.recipe.problems import VALUE_ERRORS, describe, show
from deep500.utils.errors import Deep500Error, MissingDependencyError, RecipeError

# executor names (variants such as pytorch_compiled included), from the registry
EXECUTORS = tuple(registry.executor_names())
INFERENCE_ONLY = tuple(registry.executor_names(backprop=False))
LABELS = "labels"


@dataclass(frozen=True)
class NetworkSpec:
    """A zoo model by name with its options, or an ONNX file; ``frozen``: regular
    expressions naming floating initializers kept constant in training
    (``OnnxModel.freeze``; an exporter's folded constants, say). ``inputs``: a file's
    ``(graph input, dataset field)`` pairs (``network: {file: ..., inputs: {x:
    input}}``); ``single_input``: the file's only graph input when it has one and no
    ``inputs`` are given, which then takes the dataset's input whatever its name."""
    model: str | None = None
    file: str | None = None
    options: tuple = field(default=())
    frozen: tuple = field(default=())
    inputs: tuple = field(default=())
    single_input: str | None = None

    def input_mapping(self, dataset_input: str | None) -> dict:
        """``{graph input: dataset field}`` of a file model fed by a dataset whose input
        field is ``dataset_input`` (None: no dataset, only the explicit pairs)."""
        if self.inputs:
            return dict(self.inputs)
        if self.single_input and dataset_input and self.single_input != dataset_input:
            return {self.single_input: dataset_input}
        return {}

    @property
    def label(self) -> str:
        if self.file:
            fed = ", ".join(f"{k} <- {v}" for k, v in self.inputs)
            if not fed and self.single_input and self.single_input != "input":
                fed = f"{self.single_input} <- the dataset's input"
            return os.path.basename(self.file) + (f" (inputs {fed})" if fed else "")
        extra = ", ".join(f"{k}={v}" for k, v in self.options)
        return f"{self.model}" + (f" ({extra})" if extra else "")

    def build(self, batch_size: int, dtype: str, seed: int, loss: str | None,
              dataset_input: str | None = None):
        """The ONNX model; fed by a dataset, a file's inputs renamed to the dataset's
        fields (``input_mapping``) and its only output to ``output`` (the training
        loop's accuracy reads that name) before the loss is added."""
        import onnx
        if self.file:
            model = onnx.load(self.file)
            if dataset_input is not None or self.inputs:
                from deep500.utils.onnx_interop.input_names import (rename_graph_inputs,
                                                                    rename_only_output)
                model = rename_graph_inputs(model, self.input_mapping(dataset_input))
                if dataset_input is not None:   # the training loop's accuracy reads it
                    model = rename_only_output(model, "output")
            if loss:
                from deep500.utils.onnx_interop.losses import add_loss
                model = add_loss(model, loss)
        else:
            from deep500.networks import create_model
            model = create_model(self.model, batch_size=batch_size, loss=loss, seed=seed,
                                 dtype=dtype, **dict(self.options))
        if self.frozen:
            import json
            from deep500.utils.onnx_interop.parser import FROZEN_METADATA
            onnx.helper.set_model_props(model, {
                **{p.key: p.value for p in model.metadata_props},
                FROZEN_METADATA: json.dumps(list(self.frozen))})
        return model

    def to_dict(self) -> dict:
        return {"model": self.model, "file": self.file, "options": dict(self.options),
                "frozen": list(self.frozen), "label": self.label,
                **({"inputs": self.input_mapping("input")} if self.file and
                   self.input_mapping("input") else {})}


def parse_network(entry, where: str, recipe_dir: str) -> NetworkSpec:
    if isinstance(entry, str):
        entry = {"model": entry}
    if not isinstance(entry, dict):
        raise RecipeError(f"{where}: a network is a zoo name or a mapping with 'model' or "
                          f"'file', got {describe(entry)}")
    entry = dict(entry)
    keys = [k for k in entry if not isinstance(k, str)]
    if keys:
        raise RecipeError(f"{where}: keys are names (strings), got {show(keys)}")
    frozen = _frozen(entry.pop("frozen", ()), f"{where}.frozen")
    if "file" in entry:
        path = entry.pop("file")
        if not isinstance(path, str) or not path:
            raise RecipeError(f"{where}.file: the path of an ONNX file, got {describe(path)}")
        path = path if os.path.isabs(path) else os.path.join(recipe_dir, path)
        if not os.path.isfile(path):
            raise RecipeError(f"{where}.file: ONNX file {path!r} does not exist")
        inputs = entry.pop("inputs", None)
        if entry:
            raise RecipeError(f"{where}: unexpected keys {sorted(entry)} next to 'file'")
        check_onnx_file(path, f"{where}.file")
        fed = _file_inputs(path)
        pairs = _input_pairs(inputs, fed, f"{where}.inputs") if inputs is not None else ()
        return NetworkSpec(file=path, frozen=frozen, inputs=pairs,
                           single_input=fed[0] if len(fed) == 1 and not pairs else None)
    name = entry.pop("model", None)
    from deep500.networks import model_names
    if not isinstance(name, str) or name not in model_names():
        raise RecipeError(f"{where}.model: unknown model {show(name)}; the zoo has "
                          f"{model_names()}")
    return NetworkSpec(model=name, options=tuple(sorted(entry.items())), frozen=frozen)


def _file_inputs(path: str) -> list:
    """The graph inputs an ONNX file must be fed (its weights not loaded)."""
    import onnx
    from deep500.utils.onnx_interop.input_names import fed_inputs
    return fed_inputs(onnx.load(path, load_external_data=False))


def _input_pairs(value, fed: list, where: str) -> tuple:
    """``inputs: {graph input: dataset field}`` checked against the file's inputs."""
    if not isinstance(value, dict) or not value or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in value.items()):
        raise RecipeError(f"{where}: map the model's graph inputs to dataset fields, "
                          f"e.g. {{{(fed or ['x'])[0]}: input}}; got {describe(value)}")
    unknown = sorted(k for k in value if k not in fed)
    if unknown:
        raise RecipeError(f"{where}: the model has no input {show(unknown)}; its inputs "
                          f"are {fed}")
    if len(set(value.values())) < len(value):
        raise RecipeError(f"{where}: two graph inputs take one dataset field "
                          f"({show(value)}); give each its own")
    return tuple(sorted(value.items()))


def _frozen(value, where: str) -> tuple:
    """The ``frozen`` regular expressions of a network entry (a string or a list)."""
    import re
    patterns = [value] if isinstance(value, str) else value
    if not isinstance(patterns, (list, tuple)) or not all(isinstance(p, str)
                                                         for p in patterns):
        raise RecipeError(f"{where}: regular expressions naming initializers to keep "
                          f"constant (a string or a list of strings), got {describe(value)}")
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise RecipeError(f"{where}: {pattern!r} is not a regular expression: {exc}"
                              ) from None
    return tuple(patterns)


def check_onnx_file(path: str, where: str) -> None:
    """Parse and check the ONNX file at ``path`` (``onnx.checker.check_model`` reads it
    in C++, without building Python objects): a truncated or corrupt file fails here,
    before any work, rather than in the middle of a run."""
    import onnx
    try:
        onnx.checker.check_model(path)
    except Exception as exc:  # onnx raises ValidationError, DecodeError, OSError, ...
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else \
            type(exc).__name__
        raise RecipeError(f"{where}: {os.path.basename(path)} is not a valid ONNX model "
                          f"({reason}); export it again, or check that it was copied "
                          f"whole") from None


def _executor(value, where, recipe_dir=None):
    return components.registered_name(value, "executor", where, EXECUTORS)


def executor_factory(name: str):
    try:
        build = registry.executor_factory(name)
    except MissingDependencyError as exc:
        raise RecipeError(f"executor {name!r}: {exc}") from None
    except Deep500Error as exc:   # an unknown name
        raise RecipeError(str(exc)) from None
    return lambda model, device: build(model, device=device)


def make_inputs(model, batch_size: int, seed: int, classes: int | None) -> dict:
    """Seeded inputs for every graph input; integer labels in [0, classes)."""
    from deep500.utils.onnx_interop.parser import load_and_parse_model
    parsed = load_and_parse_model(model)
    inputs = {}
    for value in parsed.feed_inputs:
        rng = np.random.default_rng([seed, zlib.crc32(value.name.encode())])
        shape = [batch_size if not isinstance(d, int) or d <= 0 else d
                 for d in (value.shape or ())]
        if np.issubdtype(value.dtype, np.integer):
            high = classes or 2
            inputs[value.name] = rng.integers(0, high, size=shape).astype(value.dtype)
        else:
            inputs[value.name] = rng.standard_normal(shape).astype(value.dtype)
    return inputs


class NetworksExperiment(base.Experiment):
    name = "networks"
    level = 1
    components = {
        "executor": (_executor, base.REQUIRED),
        "network": (parse_network, base.REQUIRED),
        "mode": (base.one_of(("inference", "backprop")), "inference"),
        "batch_size": (base.positive_int, 16),
        "dtype": (base.dtype, "float32"),
        "loss": base.loss_component("mean_squared_error"),
        "microbatch": (microbatch_budget.parse_microbatch, None),
        "memory_budget": (microbatch_budget.parse_memory_budget, None),
        "memory_policy": (microbatch_budget.memory_policy, "division"),
        **base.CONDITIONS,
    }
    input_components = ("network", "batch_size", "dtype", "seed", "mode", "loss")
    metric_names = ("WallclockTime", "L1Error", "L2Error", "MaxError", "OperatorTimes",
                    "FrameworkOverhead", "PeakMemory", "Energy")

    def check(self, recipe, problems):
        for path, name in recipe.located("executor"):
            with problems.check(path, name):
                executor_factory(name)
        if "reference" not in recipe.alternatives("executor") and recipe.needs_reference():
            with problems.check("metrics"):
                executor_factory("reference")
        microbatch_budget.check_budgets(recipe, problems)
        dtype = recipe.alternatives("dtype")[0]
        for path, spec in recipe.located("network"):
            with problems.check(path, spec.label):
                try:  # bad model options fail now, not after other configurations ran
                    spec.build(1, dtype, 0, None)
                except Deep500Error as exc:
                    raise RecipeError(f"{path}: network {spec.label}: {exc}") from None
                except VALUE_ERRORS as exc:  # options of a wrong type or size
                    raise RecipeError(f"{path}: network {spec.label} cannot be built with "
                                      f"these options ({type(exc).__name__}: {exc})") from None

    def applicable(self, configuration) -> str | None:
        if configuration["mode"] == "backprop" and configuration["executor"] in INFERENCE_ONLY:
            return f"{configuration['executor']} runs inference only"
        return microbatch_budget.not_applicable(configuration)

    def _model_and_inputs(self, configuration, state):
        spec: NetworkSpec = configuration["network"]
        loss = configuration["loss"] if configuration["mode"] == "backprop" else None
        key = (spec, configuration["batch_size"], configuration["dtype"],
               configuration["seed"], loss)
        if state.get("key") != key:
            model = spec.build(configuration["batch_size"], configuration["dtype"],
                               configuration["seed"], loss)
            classes = _classes(model)
            inputs = make_inputs(model, configuration["batch_size"], configuration["seed"],
                                 classes)
            state.clear()
            state.update(key=key, model=model, inputs=inputs)
        return state["model"], state["inputs"]

    def _reference(self, configuration, state):
        if "reference" not in state:
            executor = executor_factory("reference")(state["model"], "cpu")
            if configuration["mode"] == "backprop":
                result = executor.inference_and_backprop(state["inputs"], "loss")
                params = executor.network.get_params()
                from deep500.lv1_network.network import gradient_name
                state["reference"] = {gradient_name(p): result[gradient_name(p)]
                                      for p in params}
            else:
                state["reference"] = executor.inference(state["inputs"])
        return state["reference"]

    def measure(self, recipe, configuration, tag, output_dir, state):
        model, inputs = self._model_and_inputs(configuration, state)
        reference = self._reference(configuration, state) if recipe.needs_reference() else None
        make_executor = executor_factory(configuration["executor"])
        micro, chosen = configuration.get("microbatch"), None
        if micro == microbatch_budget.AUTO:
            micro, chosen = microbatch_budget.choose_sizes(
                configuration, model, lambda m: make_executor(m, configuration["device"]),
                state)
        if micro:
            from deep500.lv1_network.transformations import microbatch_convolutions
            model = microbatch_convolutions(model, micro,
                                            batch_size=configuration["batch_size"])
        executor = make_executor(model, configuration["device"])
        metrics = recipe.build_metrics(output_dir, tag)
        if configuration["mode"] == "backprop":
            result = test_executor_backprop(executor, inputs, reference, "loss", metrics)
        else:
            result = test_executor_inference(executor, inputs, reference, metrics)
        if chosen is not None:
            result.details["microbatch"] = chosen
        _peak_from_fresh_process(result, model, inputs, configuration)
        return result

    def describe(self, configuration):
        return {**configuration, "network": configuration["network"].to_dict()}


def _peak_from_fresh_process(result, model, inputs: dict, configuration: dict) -> None:
    """A PeakMemory the executor could not report in-process (TensorFlow on the CPU),
    measured from the first run in a fresh process instead
    (``deep500.frameworks.fresh_process_memory``)."""
    peak = next((m for m in result.metrics if m.metric == "PeakMemory"), None)
    if peak is None or peak.summary["peak_bytes"] is not None:
        return
    from deep500.frameworks import fresh_process_memory
    threads = configuration.get("threads") or int(os.environ.get("OMP_NUM_THREADS") or 0)
    measured = fresh_process_memory.first_run_peak_rss(
        model, inputs, configuration["executor"], configuration["device"],
        configuration["mode"], threads or None)
    peak.summary.update(peak_bytes=measured, measured_by=fresh_process_memory.METHOD,
                        reported=True)
    peak.samples = [measured]
    peak.warnings = []


def _classes(model) -> int | None:
    """Number of classes: the last extent of the first graph output, if static."""
    output = model.graph.output[0].type.tensor_type.shape.dim
    if output and output[-1].HasField("dim_value"):
        return output[-1].dim_value
    raise Deep500Error("cannot tell the number of classes from the model's first output")
