"""The onnxruntime network: a read-only view of an ONNX model that an onnxruntime
``InferenceSession`` runs.

onnxruntime compiles a whole model into a session; it has no graph API. This view keeps
the parsed model and the session built from it: ``fetch_tensor`` reads initializers and
the tensors of the last run, ``feed_tensor`` of an initializer and ``add_output`` of an
intermediate tensor rebuild the session (lazily, before the next run) from an edited
copy of the model. Adding or removing nodes is not possible.
"""
from __future__ import annotations

import ctypes

import numpy as np
import onnx
import onnx.numpy_helper

from deep500.lv1_network.network import Network
from deep500.utils.errors import (Deep500Error, ModelError, ShapeError, UnsupportedError,
                                  require)

ort = require("onnxruntime", "onnxruntime",
              "The onnxruntime bridge (deep500.frameworks.onnxruntime)")
from onnxruntime.capi import onnxruntime_pybind11_state as _ort_state  # noqa: E402

# Every exception type onnxruntime's C++ core raises into Python.
ORT_ERRORS = tuple(cls for cls in vars(_ort_state).values()
                   if isinstance(cls, type) and issubclass(cls, Exception))

OPTIMIZATION_LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}

# ONNX element types stored below a byte per element, which ml_dtypes stores unpacked.
_PACKED_TYPES = {getattr(onnx.TensorProto, name)
                 for name in ("INT4", "UINT4", "INT2", "UINT2", "FLOAT4E2M1")
                 if hasattr(onnx.TensorProto, name)}

# Messages by which onnxruntime says it lacks a feature rather than that the model is wrong.
_UNSUPPORTED_MARKS = ("Unsupported model IR version", "is not a registered function/op",
                      "Could not find an implementation", "is under development",
                      "not supported", "Unsupported data type")


def _is_ml_dtype(dtype: np.dtype) -> bool:
    """bfloat16, float8, int4, ...: NumPy dtypes that the ml_dtypes package defines."""
    return dtype.type.__module__.startswith("ml_dtypes")


class OnnxRuntimeNetwork(Network):
    """A parsed ONNX model and the onnxruntime session that runs it.

    Args:
        model: the parsed :class:`OnnxModel`.
        providers: onnxruntime execution providers, in order of preference.
        threads: intra-op threads (inter-op threads are then 1); None keeps
            onnxruntime's default.
        optimization: graph optimization level: 'disabled', 'basic', 'extended' or
            'all'; None keeps onnxruntime's default ('all').
    """

    def __init__(self, model, providers: list, threads: int | None = None,
                 optimization: str | None = None):
        super().__init__(model.name)
        if optimization is not None and optimization not in OPTIMIZATION_LEVELS:
            raise Deep500Error(f"Unknown onnxruntime optimization level {optimization!r}; "
                               f"use one of {sorted(OPTIMIZATION_LEVELS)} or None")
        if threads is not None and int(threads) < 1:
            raise Deep500Error(f"onnxruntime threads must be a positive integer or None, "
                               f"got {threads!r}")
        self.model = model
        self.providers = list(providers)
        self.threads = None if threads is None else int(threads)
        self.optimization = optimization
        self.operations: dict = {}
        self.initializers: dict[str, np.ndarray] = {}
        self.outputs = [vi.name for vi in model.outputs]
        self._graph_outputs = list(self.outputs)
        self._fed_initializers: set[str] = set()
        self._last: dict = {}
        self.last_inputs: dict = {}
        self.version = 0  # counts edits of the model; sessions of older versions are stale
        self._session = None
        self._model_bytes: bytes | None = None

    # -- built by the visitor ----------------------------------------------------------
    def record_operation(self, op) -> None:
        self.operations[op.name] = op

    def record_initializer(self, name: str, value: np.ndarray) -> None:
        self.initializers[name] = value

    # -- tensors -------------------------------------------------------------------------
    def feed_tensor(self, name: str, value, is_param: bool = False) -> None:
        """Replace the value of an initializer; the session is rebuilt before the next
        run. Graph inputs are not stored: pass them to ``executor.inference``."""
        if name not in self.initializers:
            if any(vi.name == name for vi in self.model.feed_inputs):
                raise Deep500Error(f"{name!r} is an input of network '{self.name}'; pass it "
                                   f"to executor.inference({{{name!r}: ...}}) instead of "
                                   f"feeding it")
            raise Deep500Error(f"onnxruntime network '{self.name}' can only feed "
                               f"initializers; {name!r} is not one (initializers: "
                               f"{sorted(self.initializers)[:10]})")
        old = self.initializers[name]
        value = np.asarray(value)
        if value.shape != old.shape:
            raise ShapeError(f"Initializer {name!r} of network '{self.name}' has shape "
                             f"{list(old.shape)}; cannot feed shape {list(value.shape)}")
        if value.dtype != old.dtype and not np.can_cast(value.dtype, old.dtype, "same_kind"):
            raise ShapeError(f"Initializer {name!r} of network '{self.name}' has dtype "
                             f"{old.dtype}; cannot feed dtype {value.dtype}")
        self.initializers[name] = np.array(value, dtype=old.dtype)
        self._fed_initializers.add(name)
        self._invalidate()

    def fetch_tensor(self, name: str) -> np.ndarray:
        """An initializer's current value, or a tensor of the last run (its inputs, graph
        outputs and tensors added with ``add_output``)."""
        if name in self._last:
            return self._last[name]
        if name in self.initializers:
            return self.initializers[name]
        known = self._tensor_names()
        if name in known:
            raise Deep500Error(f"Tensor {name!r} of network '{self.name}' is not kept by "
                               f"onnxruntime: call network.add_output({name!r}) and run "
                               f"inference again (or run inference first if it is an "
                               f"input or output)")
        raise self._unknown_tensor(name, sorted(known))

    def get_params(self) -> list[str]:
        return [name for name, value in self.initializers.items()
                if np.issubdtype(value.dtype, np.floating)
                and name not in self.model.frozen]

    # -- graph ---------------------------------------------------------------------------
    def add_output(self, name: str) -> None:
        """Make an intermediate tensor an output of every later run."""
        if name in self.outputs:
            return
        known = self._tensor_names()
        if name not in known:
            raise self._unknown_tensor(name, sorted(known))
        self.outputs.append(name)
        self._invalidate()

    def add_node(self, op) -> None:
        raise UnsupportedError(f"The onnxruntime network '{self.name}' is a read-only view "
                               f"of a compiled model: edit the ONNX model and build a new "
                               f"executor to add node '{op.name}'")

    def remove_node(self, name: str) -> None:
        raise UnsupportedError(f"The onnxruntime network '{self.name}' is a read-only view "
                               f"of a compiled model: edit the ONNX model and build a new "
                               f"executor to remove node '{name}'")

    # -- session -------------------------------------------------------------------------
    @property
    def session(self):
        """The session for plain runs, (re)built when the model changed."""
        if self._session is None:
            self._session = self.new_session()
        return self._session

    def new_session(self, profile_prefix: str | None = None):
        """A new session of the current model; with ``profile_prefix``, onnxruntime's
        profiler records it and ``end_profiling`` writes ``<prefix>_<time>.json``."""
        options = ort.SessionOptions()
        # fatal only: errors are raised as exceptions, logging them too would double them
        options.log_severity_level = 4
        if self.threads is not None:
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        if self.optimization is not None:
            options.graph_optimization_level = OPTIMIZATION_LEVELS[self.optimization]
        if profile_prefix is not None:
            options.enable_profiling = True
            options.profile_file_prefix = profile_prefix
        try:
            return ort.InferenceSession(self._serialized_model(), options,
                                        providers=self.providers)
        except ORT_ERRORS + (UnicodeDecodeError,) as exc:
            raise self._ort_error(exc, "load") from exc

    def run(self, session, inputs: dict) -> dict:
        """Run ``session`` on ``inputs`` and keep its inputs and outputs for
        ``fetch_tensor``; returns ``{output name: value}``."""
        feeds = {}
        for meta in session.get_inputs():
            if meta.name not in inputs:
                continue  # an initializer listed as an input (IR < 4): its stored value
            value = inputs[meta.name]
            feeds[meta.name] = (np.ascontiguousarray(value) if isinstance(value, np.ndarray)
                                else value)
        try:
            if self._needs_ort_values(feeds):
                values = self._run_with_ort_values(session, feeds)
            else:
                values = session.run(self.outputs, feeds)
        except ORT_ERRORS + (UnicodeDecodeError,) as exc:
            raise self._ort_error(exc, "run") from exc
        outputs = dict(zip(self.outputs, values))
        self.last_inputs = dict(inputs)
        self._last = {**inputs, **outputs}
        return outputs

    def _needs_ort_values(self, feeds: dict) -> bool:
        """Whether a tensor has a dtype outside NumPy's own (bfloat16, float8, ... from
        ml_dtypes), which onnxruntime's NumPy interface does not convert."""
        if any(isinstance(v, np.ndarray) and _is_ml_dtype(v.dtype) for v in feeds.values()):
            return True
        for name in self.outputs:
            info = self.model.value_info.get(name)
            if info is not None and info.dtype is not None and _is_ml_dtype(info.dtype):
                return True
        return False

    def _run_with_ort_values(self, session, feeds: dict) -> list:
        """Run with ``OrtValue`` tensors, reinterpreting ml_dtypes buffers as onnxruntime
        tensors of the same ONNX element type and back."""
        values = {}
        for name, value in feeds.items():
            if isinstance(value, np.ndarray) and _is_ml_dtype(value.dtype):
                element_type = onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
                self._check_byte_type(element_type, name)
                raw = value.view(np.dtype(f"uint{8 * value.dtype.itemsize}"))
                values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                    raw, element_type)
            elif isinstance(value, np.ndarray):
                values[name] = ort.OrtValue.ortvalue_from_numpy(value)
            else:
                raise UnsupportedError(f"onnxruntime network '{self.name}': input {name!r} "
                                       f"is a {type(value).__name__}; with tensors of "
                                       f"ml_dtypes types every input must be an array")
        results = session.run_with_ort_values(self.outputs, values)
        return [self._to_numpy(value, name) for value, name in zip(results, self.outputs)]

    def _to_numpy(self, value, name: str):
        if not value.is_tensor():
            raise UnsupportedError(f"onnxruntime network '{self.name}': output {name!r} is "
                                   f"not a tensor; sequences cannot be returned together "
                                   f"with tensors of ml_dtypes types")
        element_type = value.element_type()
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(element_type))
        if not _is_ml_dtype(dtype):
            return value.numpy()
        self._check_byte_type(element_type, name)
        raw = ctypes.string_at(value.data_ptr(), value.tensor_size_in_bytes())
        return np.frombuffer(raw, dtype=dtype).reshape(value.shape()).copy()

    def _check_byte_type(self, element_type: int, name: str) -> None:
        if element_type in _PACKED_TYPES:
            raise UnsupportedError(
                f"onnxruntime network '{self.name}': tensor {name!r} has ONNX type "
                f"{onnx.helper.tensor_dtype_to_string(element_type)}, packed below a byte "
                f"per element; Deep500 cannot pass it to or from onnxruntime")

    def _invalidate(self) -> None:
        self.version += 1
        self._session = None
        self._model_bytes = None

    def _serialized_model(self) -> bytes:
        if self._model_bytes is None:
            self._model_bytes = self._edited_proto().SerializeToString()
        return self._model_bytes

    def _edited_proto(self) -> onnx.ModelProto:
        """The model as onnxruntime gets it: nodes named as Deep500 names them (so
        profiler events match ``op.name``), fed initializers and added outputs."""
        proto = onnx.ModelProto()
        proto.CopyFrom(self.model.proto)
        graph = proto.graph
        # Matched by outputs, not position: normalisation may expand one node of an
        # old opset into several operations (e.g. Flatten, Softmax, Reshape).
        named = {}
        for op in self.model.operations:
            for output in op.outputs:
                if output:
                    named.setdefault(output, op.name)
        for node in graph.node:
            if not node.name:
                name = next((named[o] for o in node.output if o in named), None)
                if name is not None:
                    node.name = name
        for tensor in graph.initializer:
            if tensor.name in self._fed_initializers:
                tensor.CopyFrom(onnx.numpy_helper.from_array(self.initializers[tensor.name],
                                                             tensor.name))
        typed = {vi.name: vi for vi in list(graph.value_info) + list(graph.input)}
        for name in self.outputs[len(self._graph_outputs):]:
            # an untyped output is valid: onnxruntime infers its type
            graph.output.append(typed.get(name, onnx.ValueInfoProto(name=name)))
        return proto

    def _tensor_names(self) -> set[str]:
        names = {vi.name for vi in self.model.inputs} | set(self.initializers)
        for op in self.model.operations:
            names.update(n for n in op.outputs if n)
        return names

    def _ort_error(self, exc: Exception, doing: str) -> Deep500Error:
        """UnsupportedError for what onnxruntime lacks; when running, ShapeError for
        inputs or intermediate tensors that do not fit a node (onnxruntime's
        InvalidArgument, Fail and RuntimeException while running); ModelError for a
        model it refuses to load. (Its error text may hold bytes of the model that are
        not UTF-8, which its binding fails to decode: that is a ModelError too.)"""
        if isinstance(exc, UnicodeDecodeError):
            message = exc.object.decode("utf-8", "replace") if isinstance(
                exc.object, bytes) else str(exc)
        else:
            message = str(exc).strip()
        unsupported = isinstance(exc, _ort_state.NotImplemented) or (
            doing == "load" and any(mark in message for mark in _UNSUPPORTED_MARKS))
        if unsupported:
            kind = UnsupportedError
        elif doing == "run" and isinstance(exc, (_ort_state.InvalidArgument, _ort_state.Fail,
                                                 _ort_state.RuntimeException)):
            kind = ShapeError
        else:
            kind = ModelError
        source = "" if self.model.source.startswith("<") else f" ({self.model.source})"
        return kind(f"onnxruntime {ort.__version__} could not {doing} model "
                    f"'{self.name}'{source}: {message}")
