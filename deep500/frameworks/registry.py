"""The framework registry: every framework Deep500 bridges, by name, and what it can do.

Recipes, the command line, conformance and tests ask this registry which frameworks
exist, which executors they offer, what each can do (inference, backpropagation,
distributed baselines, devices, custom operators), how to build its networks, executors,
optimizers and native operators, which ONNX operators it supports, and what to install
when it is missing. No other table of framework names exists.

Nothing here imports a framework when this module is imported: modules are named by
their import path and loaded when a factory is asked for, and the supported operator
sets are computed on first request (and kept).
"""
from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable, Iterable

from deep500.utils.errors import Deep500Error, MissingDependencyError
from deep500.utils.onnx_interop import support

DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class Capabilities:
    """What a framework's bridge can do."""
    inference: bool = True
    backprop: bool = True            # inference_and_backprop, so it can train
    distributed: bool = False        # distributed training schemes or baselines
    devices: tuple = ("cpu",)        # device kinds: "cpu", "gpu"
    custom_ops: bool = False         # Python and C++ operators (custom_op_from_native ...)
    native_operators: bool = False   # ONNX operators as framework calls (level 0)
    backward_times: bool = False     # per-node backward times (measure_step_profile)


@dataclass(frozen=True)
class Framework:
    """One framework bridge.

    Attributes:
        name: the name recipes and the command line use.
        module: the bridge's package (``deep500.frameworks.<name>``).
        description: a few words for listings.
        requires: the Python modules the bridge imports (their absence makes it
            unavailable).
        pip: the pip distribution that provides them.
        extra: the ``deep500[<extra>]`` that installs them.
        capabilities: what it can do.
        executors: executor name -> ``from_onnx`` keyword options (variants of one bridge,
            e.g. ``pytorch_compiled``).
        network: ``module:attribute`` of its Network class.
        optimizers: module holding its optimizer classes (GradientDescent, ...).
        native_operator: ``module:function`` creating an ONNX operator (level 0).
        distributed_module: module holding its distributed schemes or baselines.
        glue: modules with ``build(live_output)`` and ``LOADER`` (its C++ glue).
        visitor: ``module:class`` of the ONNX visitor whose ``visit_<op>`` methods say
            which operators it supports; None when the framework declares them itself.
        gpu_count: a function () -> number of GPUs the framework sees.
        operator_lister: a function () -> the (domain, op_type) pairs it declares, used
            besides (or instead of) ``visitor``.
    """
    name: str
    module: str
    description: str
    requires: tuple
    pip: str
    extra: str
    capabilities: Capabilities
    executors: dict = field(default_factory=dict)
    network: str = ""
    optimizers: str = ""
    native_operator: str = ""
    distributed_module: str = ""
    glue: tuple = ()
    visitor: str = ""
    gpu_count: Callable[[], int] | None = None
    operator_lister: Callable[[], Iterable] | None = None

    @property
    def install(self) -> str:
        """The command that installs what the bridge needs (as the README says)."""
        return f"pip install 'deep500[{self.extra}]'" if self.extra else f"pip install {self.pip}"

    def missing_dependency_message(self) -> str:
        return (f"The {self.name} framework needs the Python package(s) "
                f"{', '.join(repr(r) for r in self.requires)} (pip package '{self.pip}'), "
                f"which are not installed. Install them with: {self.install}")

    def is_installed(self) -> bool:
        """Whether every module it requires can be found (without importing it)."""
        for module in self.requires:
            try:
                if importlib.util.find_spec(module) is None:
                    return False
            except (ImportError, ValueError):
                return False
        return True

    def load(self) -> ModuleType:
        """Import the bridge; a MissingDependencyError says what to install."""
        return _import(self.module, self)

    # -- factories -----------------------------------------------------------------
    def executor_factory(self, executor: str | None = None) -> Callable:
        """A function ``(model, device=None, **options) -> GraphExecutor`` building the
        executor ``executor`` (default: the framework's own name) from an ONNX model."""
        executor = executor or self.name
        if executor not in self.executors:
            raise unknown_name(executor, "executor of " + self.name, self.executors)
        options = dict(self.executors[executor])
        from_onnx = self.load().from_onnx

        def build(model, device=None, **more):
            return from_onnx(model, device=device, **{**options, **more})
        build.__name__ = f"{executor}_from_onnx"
        return build

    def network_class(self) -> type:
        return _attribute(self.network, self)

    def optimizer_module(self) -> ModuleType:
        if not self.optimizers:
            why = "runs inference only" if not self.capabilities.backprop else "cannot train"
            raise Deep500Error(f"The {self.name} framework has no optimizers (it {why}); "
                               f"frameworks with optimizers: {names(backprop=True)}")
        return _import(self.optimizers, self)

    def native_operator_factory(self) -> Callable:
        if not self.native_operator:
            raise Deep500Error(f"The {self.name} framework offers no native operators; "
                               f"frameworks that do: {names(native_operators=True)}")
        return _attribute(self.native_operator, self)

    def distributed(self) -> ModuleType:
        if not self.distributed_module:
            raise Deep500Error(f"The {self.name} framework has no distributed schemes; "
                               f"frameworks with them: {names(distributed=True)}")
        return _import(self.distributed_module, self)

    def gpus(self) -> int:
        """How many GPUs the framework sees on this machine (0 for CPU-only ones)."""
        if "gpu" not in self.capabilities.devices or self.gpu_count is None:
            return 0
        self.load()
        return int(self.gpu_count())

    # -- operators -----------------------------------------------------------------
    def supported_operators(self) -> frozenset:
        """``(domain, op_type)`` pairs (domain "" for ai.onnx) the framework's executor
        builds, computed on first call: its visitor's ``visit_<op>`` methods and what
        the framework declares. Imports the framework."""
        return _supported_operators(self.name)

    def supports(self, op_type: str, domain: str = "") -> bool:
        domain = "" if domain in DEFAULT_DOMAINS else domain
        return (domain, op_type) in self.supported_operators()


def _import(module: str, framework: Framework) -> ModuleType:
    try:
        return importlib.import_module(module)
    except MissingDependencyError:
        raise
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        if missing and missing.split(".")[0] in {r.split(".")[0] for r in framework.requires}:
            raise MissingDependencyError(missing, framework.extra,
                                         f"The {framework.name} framework ({framework.module})"
                                         ) from exc
        raise


def _attribute(path: str, framework: Framework):
    module, _, name = path.partition(":")
    return getattr(_import(module, framework), name)


# -- what each framework declares ----------------------------------------------------------
def _torch_gpus() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _tensorflow_gpus() -> int:
    from deep500.utils.tensorflow_import import import_tensorflow
    tf = import_tensorflow()
    return len(tf.config.list_physical_devices("GPU"))


def _onnxruntime_gpus() -> int:
    import onnxruntime as ort
    return 1 if "CUDAExecutionProvider" in ort.get_available_providers() else 0


def _reference_operators() -> Iterable:
    from deep500.frameworks.reference import operators
    return operators.operator_keys()   # (domain, op_type): ai.onnx.ml, training, ...


def _onnxruntime_operators() -> Iterable:
    """The operators onnxruntime declares: its kernels in this build
    (``get_all_opkernel_def``), and the ONNX operators defined as a function of other
    operators, which onnxruntime inlines when it has no kernel for them
    (https://onnxruntime.ai/docs/reference/operators/)."""
    import onnx.defs
    from onnxruntime.capi import _pybind_state
    pairs = {("" if k.domain in DEFAULT_DOMAINS else k.domain, k.op_name)
             for k in _pybind_state.get_all_opkernel_def()}
    pairs |= {("", s.name) for s in onnx.defs.get_all_schemas()
              if s.domain in DEFAULT_DOMAINS and (s.has_function
                                                  or s.has_context_dependent_function)}
    return pairs


_HOOKS = ("graph", "initializer", "input", "output", "graph_end")


def visitor_operators(visitor: type) -> frozenset:
    """``(domain, op_type)`` for each ``visit_<op>`` method of a visitor class (inherited
    ones included) that names an ONNX operator, with the operator's ONNX spelling and
    domain ("" for ai.onnx; methods are named in lower case); hooks and helpers are not
    operators."""
    spelled = _onnx_spellings()
    found = set()
    for attribute in dir(visitor):
        lower = attribute[len("visit_"):]
        if attribute.startswith("visit_") and lower not in _HOOKS and lower in spelled:
            found.add(spelled[lower])
    return frozenset(found)


@functools.lru_cache(maxsize=1)
def _onnx_spellings() -> dict:
    """lower-case name -> (domain, ONNX spelling) of every operator ONNX defines."""
    import onnx.defs
    return {s.name.lower(): ("" if s.domain in DEFAULT_DOMAINS else s.domain, s.name)
            for s in onnx.defs.get_all_schemas_with_history()}


@functools.lru_cache(maxsize=None)
def _supported_operators(name: str) -> frozenset:
    framework = get(name)
    framework.load()
    pairs = set()
    if framework.visitor:
        pairs |= visitor_operators(_attribute(framework.visitor, framework))
    if framework.operator_lister is not None:
        pairs |= set(framework.operator_lister())
    return frozenset(pairs)


# -- the registered frameworks ---------------------------------------------------------------
FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework(
        name="reference", module="deep500.frameworks.reference",
        description="NumPy reference", requires=("numpy",), pip="numpy",
        extra="", capabilities=Capabilities(distributed=True, custom_ops=True,
                                            native_operators=True, backward_times=True),
        executors={"reference": {}},
        network="deep500.frameworks.reference.network:ReferenceNetwork",
        optimizers="deep500.frameworks.reference.optimizers",
        native_operator="deep500.frameworks.reference.operators:create_operator",
        distributed_module="deep500.frameworks.reference.distributed",
        visitor="deep500.frameworks.reference.visitor:ReferenceVisitor",
        operator_lister=_reference_operators),
    Framework(
        name="pytorch", module="deep500.frameworks.pytorch", description="PyTorch",
        requires=("torch",), pip="torch", extra="pytorch",
        capabilities=Capabilities(distributed=True, devices=("cpu", "gpu"), custom_ops=True,
                                  native_operators=True, backward_times=True),
        executors={"pytorch": {}, "pytorch_compiled": {"compile": True}},
        network="deep500.frameworks.pytorch.network:PyTorchNetwork",
        optimizers="deep500.frameworks.pytorch.optimizers",
        native_operator="deep500.frameworks.pytorch.native_ops:native_operator",
        distributed_module="deep500.frameworks.pytorch.distributed",
        glue=("deep500.frameworks.pytorch.glue",),
        visitor="deep500.frameworks.pytorch.visitor:PyTorchVisitor",
        gpu_count=_torch_gpus),
    Framework(
        name="tensorflow", module="deep500.frameworks.tensorflow", description="TensorFlow",
        requires=("tensorflow",), pip="tensorflow-cpu", extra="tensorflow",
        capabilities=Capabilities(distributed=True, devices=("cpu", "gpu"), custom_ops=True,
                                  native_operators=True),
        executors={"tensorflow": {"mode": "eager"}, "tensorflow_function": {"mode": "function"}},
        network="deep500.frameworks.tensorflow.network:TensorFlowNetwork",
        optimizers="deep500.frameworks.tensorflow.optimizers",
        native_operator="deep500.frameworks.tensorflow.native_ops:native_operator",
        distributed_module="deep500.frameworks.tensorflow.distributed",
        glue=("deep500.frameworks.tensorflow.tf_kernel",
              "deep500.frameworks.tensorflow.glue"),
        visitor="deep500.frameworks.tensorflow.visitor:TensorFlowVisitor",
        gpu_count=_tensorflow_gpus),
    Framework(
        name="onnxruntime", module="deep500.frameworks.onnxruntime",
        description="onnxruntime (inference only)", requires=("onnxruntime",),
        pip="onnxruntime", extra="onnxruntime",
        capabilities=Capabilities(backprop=False, devices=("cpu", "gpu")),
        executors={"onnxruntime": {}},
        network="deep500.frameworks.onnxruntime.network:OnnxRuntimeNetwork",
        gpu_count=_onnxruntime_gpus, operator_lister=_onnxruntime_operators),
)}


# -- lookups ---------------------------------------------------------------------------------
def suggestion(name, known: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` for the registered name closest to ``name``, or ""."""
    close = difflib.get_close_matches(name, list(known), n=1) if isinstance(name, str) else []
    return f" Did you mean {close[0]!r}?" if close else ""


def unknown_name(name, what: str, known: Iterable[str]) -> Deep500Error:
    """The error for an unknown name: the registered ones, and the closest match."""
    known = sorted(known)
    return Deep500Error(f"Unknown {what} {name!r}; registered: {', '.join(known)}."
                        f"{suggestion(name, known)}")


def _matches(framework: Framework, wanted: dict) -> bool:
    return all(getattr(framework.capabilities, key) == value for key, value in wanted.items())


def names(**capabilities) -> list[str]:
    """Registered framework names, those with the given capabilities (e.g.
    ``backprop=True``) when any are given."""
    return [n for n, f in FRAMEWORKS.items() if _matches(f, capabilities)]


def get(name: str) -> Framework:
    """The framework ``name``; an unknown name is a Deep500Error listing the registered
    ones."""
    if not isinstance(name, str) or name not in FRAMEWORKS:
        raise unknown_name(name, "framework", FRAMEWORKS)
    return FRAMEWORKS[name]


def executor_names(**capabilities) -> list[str]:
    """Every executor name (variants such as ``pytorch_compiled`` included) of the
    frameworks with the given capabilities."""
    return [e for n in names(**capabilities) for e in FRAMEWORKS[n].executors]


def framework_of(executor: str) -> Framework:
    """The framework offering the executor ``executor``."""
    for framework in FRAMEWORKS.values():
        if executor in framework.executors:
            return framework
    raise unknown_name(executor, "executor", executor_names())


def executor_factory(executor: str) -> Callable:
    """``(model, device=None, **options) -> GraphExecutor`` for the executor name."""
    return framework_of(executor).executor_factory(executor)


def supporters(op_type: str, domain: str = "", among: Iterable[str] | None = None
               ) -> tuple[list[str], dict[str, str]]:
    """``([frameworks supporting the operator], {framework: why it was not checked})``
    over the installed frameworks of ``among`` (default: every registered one)."""
    supported, unchecked = [], {}
    for name in among if among is not None else FRAMEWORKS:
        framework = get(name)
        if not framework.is_installed():
            unchecked[name] = "not installed"
            continue
        try:
            if framework.supports(op_type, domain):
                supported.append(name)
        except Exception as exc:  # noqa: BLE001 - a broken install is reported, not raised
            unchecked[name] = f"{type(exc).__name__}: {exc}"
    return supported, unchecked


def _supporters_other_than(op_type: str, domain: str, exclude: str
                           ) -> tuple[list[str], dict[str, str]]:
    """The support table of the unsupported-operator errors: :func:`supporters` over every
    registered framework but ``exclude``."""
    return supporters(op_type, domain, [n for n in FRAMEWORKS if n != exclude])


# The ONNX level lists who supports an operator from this table, handed over here
# because it may not import the frameworks.
support.register_support_table(_supporters_other_than)


__all__ = ["Capabilities", "Framework", "FRAMEWORKS", "executor_factory", "executor_names",
           "framework_of", "get", "names", "suggestion", "supporters", "unknown_name",
           "visitor_operators"]
