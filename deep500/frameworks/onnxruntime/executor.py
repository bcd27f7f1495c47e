"""The onnxruntime graph executor: inference only.

onnxruntime runs a whole model inside one ``InferenceSession.run`` call, so it cannot
call ``before_operator``/``after_operator`` around each node. When some event asks for
per-operator events, the executor instead runs that inference in a session with
onnxruntime's built-in profiler on, reads the per-node kernel times from the profile
(Chrome trace format: events with ``cat == "Node"`` named ``<node>_kernel_time``, ``dur``
in microseconds) and exposes them after the run as ``executor.last_operator_times``
(``{node name: seconds}``) and ``executor.last_operator_types`` (``{node name: op
type}``). ``OperatorTimes`` consumers read them (``OperatorTimes.record_run``). How
profiled runs are kept comparable with plain ones: see :class:`ProfiledRuns`.

Node names are Deep500's (``op.name``): unnamed nodes get the parser's names before the
model reaches onnxruntime. Nodes that onnxruntime's graph optimizations fuse or fold
appear under onnxruntime's names (pass ``optimization='disabled'`` to time the model's
own nodes).
"""
from __future__ import annotations

import bisect
import json
import os
import shutil
import tempfile
import weakref
from collections import defaultdict

import numpy as np

from deep500.frameworks.onnxruntime.network import OnnxRuntimeNetwork, ort
from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.utils.device import parse_device
from deep500.utils.errors import UnsupportedError
from deep500.utils.onnx_interop.support import unsupported_operators_error
from deep500.utils.onnx_interop.visitor import OnnxBaseVisitor

_KERNEL_SUFFIX = "_kernel_time"


class OnnxRuntimeVisitor(OnnxBaseVisitor):
    """Collects the model's nodes and initializers into an :class:`OnnxRuntimeNetwork`
    and loads the session. onnxruntime, not the visitor, decides which operators it
    supports: a node it cannot run fails the session load with an UnsupportedError."""
    framework = "onnxruntime"
    errors = "onnxruntime"

    def visitor_for(self, op):
        return self._visit_operation

    def supports(self, op_type: str) -> bool:
        return True

    def _visit_operation(self, op, network: OnnxRuntimeNetwork) -> None:
        network.record_operation(op)

    def visit_initializer(self, name: str, value, network: OnnxRuntimeNetwork) -> None:
        network.record_initializer(name, value)

    def visit_graph_end(self, model, network: OnnxRuntimeNetwork) -> None:
        try:
            network.session  # load now, so unsupported models fail when the executor is built
        except UnsupportedError as exc:
            # onnxruntime names the first operator it lacks; list every one it does not
            # declare (the registry's set), with the executors that support each.
            from deep500.frameworks import registry
            framework = registry.get("onnxruntime")
            lacking = [op for op in model.operations
                       if not framework.supports(op.op_type, op.domain)]
            if not lacking:
                raise
            listing = unsupported_operators_error(self.framework, lacking, model,
                                                  exclude="onnxruntime")
            raise UnsupportedError(f"{exc}\n{listing}") from exc


def execution_providers(device) -> list:
    """onnxruntime providers for a Deep500 device: CUDA then CPU on a GPU, CPU only
    otherwise. A GPU without onnxruntime's CUDA provider is an error, not a silent
    fallback to the CPU."""
    if not device.is_gpu:
        return ["CPUExecutionProvider"]
    available = ort.get_available_providers()
    if "CUDAExecutionProvider" not in available:
        raise UnsupportedError(f"The onnxruntime executor was asked for device {device}, "
                               f"but this onnxruntime build has no CUDAExecutionProvider "
                               f"(available: {available}). Install onnxruntime-gpu, or use "
                               f"device='cpu'")
    return [("CUDAExecutionProvider", {"device_id": device.index}), "CPUExecutionProvider"]


class OnnxRuntimeGraphExecutor(GraphExecutor):
    """Runs a parsed ONNX model with onnxruntime (inference only).

    Args:
        model: the parsed :class:`OnnxModel`.
        device: 'cpu' or a GPU (needs onnxruntime's CUDA provider).
        events: :class:`ExecutorEvent` objects.
        threads: intra-op threads, with inter-op threads 1; None keeps onnxruntime's
            default.
        optimization: onnxruntime graph optimization level ('disabled', 'basic',
            'extended', 'all'); None keeps onnxruntime's default.

    After a run with per-operator events, ``last_operator_times`` holds onnxruntime's
    profiled kernel time of each node in seconds (see the module docstring and
    :class:`ProfiledRuns`).
    """
    framework = "onnxruntime"
    supports_backprop = False

    def __init__(self, model, device=None, events=(), threads: int | None = None,
                 optimization: str | None = None):
        device = parse_device(device)
        network = OnnxRuntimeNetwork(model, execution_providers(device), threads=threads,
                                     optimization=optimization)
        super().__init__(network, device, events,
                         input_specs={vi.name: vi for vi in model.feed_inputs})
        self.model = model
        # Sequence- and optional-typed inputs are not arrays; the base checks tensors.
        self._non_tensor_inputs = {vi.name for vi in model.proto.graph.input
                                   if not vi.type.HasField("tensor_type")}
        self._profiler: ProfiledRuns | None = None
        OnnxRuntimeVisitor().visit_model(model, network)

    def _check_inputs(self, inputs: dict) -> None:
        if self._non_tensor_inputs and isinstance(inputs, dict):
            inputs = {name: (np.empty(()) if name in self._non_tensor_inputs else value)
                      for name, value in inputs.items()}
        super()._check_inputs(inputs)

    @property
    def last_operator_times(self) -> dict[str, float]:
        """Seconds per node of the last run with per-operator events (else empty)."""
        runs = self.operator_times_of_runs
        return runs[-1] if runs else {}

    @property
    def operator_times_of_runs(self) -> list[dict[str, float]]:
        """Seconds per node of each run with per-operator events since these times were
        last read."""
        return self._profiler.collect()[0] if self._profiler else []

    @property
    def last_operator_types(self) -> dict[str, str]:
        """Operator type per node of ``last_operator_times``."""
        return self._profiler.collect()[1] if self._profiler else {}

    def _inference(self, inputs: dict) -> dict:
        if self.operator_events:
            if self._profiler is None:
                self._profiler = ProfiledRuns(self.network)
            return self._profiler.run(inputs)
        return self.network.run(self.network.session, inputs)


class ProfiledRuns:
    """Runs with onnxruntime's profiler on, and the per-node times of each.

    onnxruntime profiles a session from its creation until ``end_profiling``, which
    writes the trace and ends profiling for good. So profiled runs use a session of their
    own that has already run once (a session's first run allocates its memory, which
    would be billed to the operators). Collecting the times ends that session's profile
    and readies the next session with the last inputs, so that this work falls outside
    the caller's timing of a run.
    """

    def __init__(self, network: OnnxRuntimeNetwork):
        self.network = network
        self.directory = tempfile.mkdtemp(prefix="deep500-ort-profile-")
        # The live session sits in a dict the finalizer can empty: a session with
        # profiling on writes its trace when freed, which must happen before the folder
        # is removed.
        self._state: dict = {}
        weakref.finalize(self, _discard_profiles, self._state, self.directory)
        self._pending = 0  # profiled runs since the last collection
        self._runs: list[dict[str, float]] = []
        self._types: dict[str, str] = {}

    def run(self, inputs: dict) -> dict:
        session = self._state.get("session")
        if session is None or self._state.get("version") != self.network.version:
            session = self._ready_session(inputs)
        outputs = self.network.run(session, inputs)
        self._pending += 1
        return outputs

    def collect(self) -> tuple[list[dict[str, float]], dict[str, str]]:
        """Seconds per node in each profiled run since the previous collection (the
        last collection's runs if none since), and the nodes' operator types."""
        if self._pending:
            pending, self._pending = self._pending, 0
            session = self._state.pop("session")
            path = session.end_profiling()
            try:
                with open(path, encoding="utf-8") as trace:
                    events = json.load(trace)
            finally:
                if path and os.path.exists(path):
                    os.remove(path)
            runs, self._types = node_times_per_run(events)
            self._runs = runs[-pending:]  # the session's first model_run was its warm-up
            self._ready_session(self.network.last_inputs)
        return [dict(run) for run in self._runs], dict(self._types)

    def _ready_session(self, inputs: dict):
        self._state.clear()
        self._pending = 0  # runs in a dropped session are not reported
        session = self.network.new_session(os.path.join(self.directory, "run"))
        self.network.run(session, inputs)
        self._state.update(session=session, version=self.network.version)
        return session


def _discard_profiles(state: dict, directory: str) -> None:
    state.clear()
    shutil.rmtree(directory, ignore_errors=True)


def node_times(events: list) -> tuple[dict[str, float], dict[str, str]]:
    """Seconds and operator type per node in the last ``model_run`` of an onnxruntime
    profile (nodes inside loops are summed over their executions)."""
    runs, types = node_times_per_run(events)
    return (runs[-1] if runs else {}), types


def node_times_per_run(events: list) -> tuple[list[dict[str, float]], dict[str, str]]:
    """Seconds per node in each ``model_run`` of an onnxruntime profile, in order, and
    the operator type of each node."""
    starts = sorted(e.get("ts", 0) for e in events
                    if e.get("cat") == "Session" and e.get("name") == "model_run")
    runs: list[dict[str, float]] = [defaultdict(float) for _ in starts]
    types: dict[str, str] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith(_KERNEL_SUFFIX):
            continue
        index = bisect.bisect_right(starts, event.get("ts", 0)) - 1
        if index < 0:
            continue
        node = name[:-len(_KERNEL_SUFFIX)]
        runs[index][node] += event.get("dur", 0) * 1e-6
        types.setdefault(node, event.get("args", {}).get("op_name", "?"))
    return [dict(run) for run in runs], types
