"""The Level-1 graph executor interface: run a network for inference, or for inference
and backpropagation, on inputs given as ``{ONNX tensor name: NumPy array}``."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from deep500.lv1_network.events import ExecutorEvent
from deep500.lv1_network.network import Network
from deep500.utils.device import CPUDevice, parse_device
from deep500.utils.errors import Deep500Error, ModelError, ShapeError
from deep500.utils.framework_errors import NOT_CONVERTED, convert, name_node


class GraphExecutor:
    """Base class of executors. Subclasses implement ``_inference`` and
    ``_inference_and_backprop``; this class checks inputs and calls events.

    Attributes:
        network: the executor's :class:`Network`.
        input_specs: ``{name: OnnxValueInfo}`` of the inputs a caller must feed.
        events: :class:`ExecutorEvent` objects called around each run.
    """
    framework = "abstract"
    supports_backprop = True
    _accepted_inputs: dict | None = None   # {name: (shape, dtype)} last checked in full

    def __init__(self, network: Network, device=None, events: Sequence[ExecutorEvent] = (),
                 input_specs: dict | None = None):
        self.network = network
        self.device = parse_device(device) if device is not None else CPUDevice()
        self.events = list(events)
        self.input_specs = dict(input_specs or {})

    @property
    def operator_events(self) -> list[ExecutorEvent]:
        return [e for e in self.events if e.wants_operator_events]

    # -- public --------------------------------------------------------------------
    def inference(self, inputs: dict) -> dict:
        """Run the network forward; returns ``{output name: array}``.

        Missing inputs raise a ModelError, inputs whose static shape or dtype differs
        from the model's a ShapeError, before any framework code runs; a framework's
        own exception becomes a ShapeError, UnsupportedError or ModelError that keeps
        its message (see ``deep500.utils.framework_errors``)."""
        self._check_inputs(inputs)
        for event in self.events:
            event.before_executor(inputs)
        outputs = self._converting_errors(self._inference, "inference", inputs)
        for event in self.events:
            event.after_inference(outputs)
        return outputs

    def inference_and_backprop(self, inputs: dict, y: str = "loss") -> dict:
        """Forward, then the gradient of scalar output ``y`` w.r.t. every parameter.

        Returns outputs and gradients (keyed ``gradient_name(parameter)``, see
        ``network.gradient(y)``); gradients are also stored in the network.
        """
        if not self.supports_backprop:
            raise Deep500Error(f"The {self.framework} executor runs inference only")
        self._check_inputs(inputs)
        for event in self.events:
            event.before_executor(inputs)
        outputs = self._converting_errors(self._inference_and_backprop,
                                          "inference and backpropagation", inputs, y)
        for event in self.events:
            event.after_backprop(outputs)
        return outputs

    def _converting_errors(self, run, doing: str, *args):
        """``run(*args)``, a framework's exception turned into a Deep500 error that
        names the node (see ``_framework_error``)."""
        try:
            return run(*args)
        except Deep500Error as exc:
            raise name_node(exc)
        except NOT_CONVERTED:
            raise
        except Exception as exc:
            raise self._framework_error(exc, doing) from exc

    # -- memory ---------------------------------------------------------------------
    #: How ``peak_memory_bytes`` is measured, named in every PeakMemory record (None:
    #: this executor reports no peak memory).
    peak_memory_method: str | None = None
    #: Why this executor reports no peak memory, where it reports none for a reason.
    peak_memory_note: str | None = None

    def peak_memory_bytes(self) -> int | None:
        """Peak memory of the last run, if this framework reports it (after
        ``reset_peak_memory``, for executors that must start a measurement)."""
        return getattr(self, "last_peak_bytes", None)

    def reset_peak_memory(self) -> None:
        """Start a new peak-memory measurement (where supported)."""

    def _framework_error(self, exc: Exception, doing: str) -> Deep500Error:
        """The Deep500 error for a framework's exception: a ShapeError, UnsupportedError
        or ModelError keeping the framework's message and naming the node where known
        (see ``deep500.utils.framework_errors``)."""
        name = getattr(self.network, "name", "?")
        return convert(exc, self.framework, f"The {self.framework} executor failed in "
                                            f"{doing} of network '{name}'")

    # -- for subclasses ------------------------------------------------------------
    def _inference(self, inputs: dict) -> dict:
        raise NotImplementedError

    def _inference_and_backprop(self, inputs: dict, y: str) -> dict:
        raise NotImplementedError

    def _check_inputs(self, inputs: dict) -> None:
        """Missing or surplus inputs, or static shapes/dtypes that differ, raise before
        any framework code runs.

        Arrays with the names, shapes and dtypes of the last accepted ones pass by a
        short comparison: a training loop feeds the same signature every step, and this
        code runs with caches just flushed by backpropagation."""
        accepted = self._accepted_inputs
        if accepted is not None and type(inputs) is dict and len(inputs) == len(accepted):
            for name, value in inputs.items():
                known = accepted.get(name)
                if (known is None or type(value) is not np.ndarray
                        or value.shape != known[0] or value.dtype != known[1]):
                    break
            else:
                return
        self._check_inputs_fully(inputs)
        if all(type(value) is np.ndarray for value in inputs.values()):
            self._accepted_inputs = {name: (value.shape, value.dtype)
                                     for name, value in inputs.items()}

    def _check_inputs_fully(self, inputs: dict) -> None:
        if not isinstance(inputs, dict):
            raise Deep500Error(f"{self.framework} executor: inputs must be a dict of "
                               f"{{tensor name: array}}, got {type(inputs).__name__}")
        missing = [n for n in self.input_specs if n not in inputs]
        if missing:
            raise ModelError(f"Network '{self.network.name}' needs inputs {missing} "
                               f"(expected: {sorted(self.input_specs)}; given: "
                               f"{sorted(inputs)})")
        for name, value in inputs.items():
            spec = self.input_specs.get(name)
            if spec is None:
                continue
            value = np.asarray(value)
            if spec.shape is not None:
                if len(spec.shape) != value.ndim or any(
                        isinstance(d, int) and d > 0 and d != v
                        for d, v in zip(spec.shape, value.shape)):
                    raise ShapeError(f"Input {name!r} of network '{self.network.name}' "
                                     f"should have shape {list(spec.shape)} (None/strings "
                                     f"are free), got {list(value.shape)}")
            if spec.dtype is not None and value.dtype != spec.dtype:
                raise ShapeError(f"Input {name!r} of network '{self.network.name}' should "
                                 f"have dtype {spec.dtype}, got {value.dtype}")
