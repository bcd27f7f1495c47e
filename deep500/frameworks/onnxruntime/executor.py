"""The onnxruntime graph executor: inference only.

onnxruntime runs a whole model inside one ``InferenceSession.run`` call, so it cannot
call ``before_operator``/``after_operator`` around each node. When some event asks for
per-operator events, the executor instead runs that inference in a session with
onnxruntime's built-in profiler on, reads the per-node kernel times from the profile
(Chrome trace format: events with ``cat == "Node"`` named ``<node>_kernel_time``, ``dur``
in microseconds) and exposes them after the run as ``executor.last_operator_times``
(``{node name: seconds}``) and ``executor.last_operator_types`` (``{node name: op
type}``). ``OperatorTimes`` consumers read them (``OperatorTimes.record_run``).

Node names are Deep500's (``op.name``): unnamed nodes get the parser's names before the
model reaches onnxruntime. Nodes that onnxruntime's graph optimizations fuse or fold
appear under onnxruntime's names (pass ``optimization='disabled'`` to time the model's
own nodes).
"""
from __future__ import annotations

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
from deep500.utils.onnx_interop.visitor import OnnxBaseVisitor

_KERNEL_SUFFIX = "_kernel_time"


class OnnxRuntimeVisitor(OnnxBaseVisitor):
    """Collects the model's nodes and initializers into an :class:`OnnxRuntimeNetwork`
    and loads the session. onnxruntime, not the visitor, decides which operators it
    supports: a node it cannot run fails the session load with an UnsupportedError."""
    framework = "onnxruntime"

    def visitor_for(self, op):
        return self._visit_operation

    def supports(self, op_type: str) -> bool:
        return True

    def _visit_operation(self, op, network: OnnxRuntimeNetwork) -> None:
        network.record_operation(op)

    def visit_initializer(self, name: str, value, network: OnnxRuntimeNetwork) -> None:
        network.record_initializer(name, value)

    def visit_graph_end(self, model, network: OnnxRuntimeNetwork) -> None:
        network.session  # load now, so unsupported models fail when the executor is built


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
    profiled kernel time of each node in seconds (see the module docstring).
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
        self.last_operator_times: dict[str, float] = {}
        self.last_operator_types: dict[str, str] = {}
        self._profile_dir: str | None = None
        OnnxRuntimeVisitor().visit_model(model, network)

    def _check_inputs(self, inputs: dict) -> None:
        if self._non_tensor_inputs and isinstance(inputs, dict):
            inputs = {name: (np.empty(()) if name in self._non_tensor_inputs else value)
                      for name, value in inputs.items()}
        super()._check_inputs(inputs)

    def _inference(self, inputs: dict) -> dict:
        if self.operator_events:
            return self._profiled_inference(inputs)
        return self.network.run(self.network.session, inputs)

    def _profiled_inference(self, inputs: dict) -> dict:
        """One run in a fresh profiling session. onnxruntime profiles from a session's
        creation until ``end_profiling`` and cannot restart, hence the new session; its
        first run (which allocates memory) is done before, and left out of, the times."""
        if self._profile_dir is None:
            self._profile_dir = tempfile.mkdtemp(prefix="deep500-ort-profile-")
            weakref.finalize(self, shutil.rmtree, self._profile_dir, True)
        session = self.network.new_session(os.path.join(self._profile_dir, "run"))
        self.network.run(session, inputs)
        outputs = self.network.run(session, inputs)
        path = session.end_profiling()
        try:
            with open(path, encoding="utf-8") as trace:
                events = json.load(trace)
        finally:
            if path and os.path.exists(path):
                os.remove(path)
        self.last_operator_times, self.last_operator_types = node_times(events)
        return outputs


def node_times(events: list) -> tuple[dict[str, float], dict[str, str]]:
    """Seconds and operator type per node in the last ``model_run`` of an onnxruntime
    profile (nodes inside loops are summed over their executions)."""
    runs = [e["ts"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    start = max(runs) if runs else 0
    times: dict[str, float] = defaultdict(float)
    types: dict[str, str] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith(_KERNEL_SUFFIX) or \
                event.get("ts", 0) < start:
            continue
        node = name[:-len(_KERNEL_SUFFIX)]
        times[node] += event.get("dur", 0) * 1e-6
        types.setdefault(node, event.get("args", {}).get("op_name", "?"))
    return dict(times), types
