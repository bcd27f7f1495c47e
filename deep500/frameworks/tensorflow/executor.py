"""TensorFlow 2 graph executors.

:class:`TensorFlowGraphExecutor` runs a :class:`TensorFlowNetwork` built from ONNX,
either eagerly (``mode="eager"``, default: one TensorFlow call per operation, with
per-operator events available) or as one ``tf.function`` (``mode="function"``: the whole
forward pass, and the forward pass with its ``tf.GradientTape`` backward pass, are each
traced once and retraced only when input shapes or dtypes change). Gradients of the
scalar output ``y`` with respect to every parameter come from ``tf.GradientTape`` and are
returned as ``gradient_name(parameter)``. Inputs and outputs may be tensors (NumPy
arrays; strings as object arrays of ``str``), sequences (lists of arrays) or optionals
(None when empty): ``_value_kinds.py``. Element types TensorFlow cannot compute with
(int4, float8, ...) are carried in wider ones and returned in their own
(``_carried_values.py``).

:class:`TensorFlowNativeGraphExecutor` puts an existing Keras model behind the same
interface, so that a model written for TensorFlow and its ONNX counterpart can be
measured with the same harness.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import numpy as np

from deep500.frameworks.tensorflow._carried_values import carry_values
from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow._traced_runs import TracedRuns
from deep500.frameworks.tensorflow import memory
from deep500.frameworks.tensorflow._value_kinds import (freeze, thaw, to_arrays, to_numpy,
                                                        to_tensors)
from deep500.frameworks.tensorflow.network import KerasNetwork, TensorFlowNetwork
from deep500.frameworks.tensorflow.node_backward import NodeBackward
from deep500.frameworks.tensorflow.visitor import TensorFlowVisitor
from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv1_network.network import gradient_name
from deep500.utils.device import parse_device
from deep500.utils.errors import Deep500Error
from deep500.utils.framework_errors import register
from deep500.utils.onnx_interop.carried_types import restore
from deep500.utils.onnx_interop.onnx_objects import OnnxModel, OnnxValueInfo
from deep500.utils.onnx_interop.parser import load_and_parse_model

MODES = ("eager", "function")

# TensorFlow's operators raise InvalidArgumentError (eagerly) or ValueError (while
# tracing) for tensors whose shapes or dtypes do not fit; UnimplementedError for kernels
# that do not exist.
register("tensorflow", shape=(tf.errors.InvalidArgumentError,),
         unsupported=(tf.errors.UnimplementedError,))


def _check_mode(mode: str, executor: str) -> str:
    if mode not in MODES:
        raise Deep500Error(f"{executor}: unknown mode {mode!r}; use 'eager' (one TensorFlow "
                           f"call per operation) or 'function' (one tf.function)")
    return mode


def _check_device(device) -> None:
    if device.is_gpu and not tf.config.list_physical_devices("GPU"):
        raise Deep500Error(f"The TensorFlow executor was asked for {device}, but this "
                           f"TensorFlow ({tf.__version__}) sees no GPU; use device='cpu' or "
                           f"install a GPU build of TensorFlow")


class _TensorFlowExecutorBase(GraphExecutor):
    """What both TensorFlow executors share: feeding, modes, NumPy conversion."""
    framework = "tensorflow"
    autograph = False   # whether traced code needs Python control flow on tensors
    #: The last backpropagation's gradients as TensorFlow tensors, in the order of
    #: ``network.get_params()`` and in each variable's stored layout: what a native
    #: (Keras) optimizer applies, without a round trip through NumPy.
    raw_gradients: list | None = None
    #: Set by a native optimizer only during its step, in mode="function":
    #: ``fused_update(gradients)`` runs right after backpropagation, traced into the
    #: same function (a fused train step; see ``d5tf.KerasOptimizer``).
    fused_update: Callable | None = None

    def __init__(self, network, device, events, input_specs, mode, jit_compile):
        super().__init__(network, device, events, input_specs)
        self.mode = _check_mode(mode, type(self).__name__)
        self.jit_compile = bool(jit_compile)
        _check_device(self.device)
        self._tf_device = self.device.tf_device()
        # Where TensorFlow sees no GPU, everything runs on the CPU anyway: no device
        # scope (entering one costs microseconds per call).
        self._placed = self.device.is_gpu or bool(tf.config.list_physical_devices("GPU"))
        self._traced: TracedRuns | None = None
        self._traced_version = None

    @property
    def peak_memory_method(self) -> str | None:
        return memory.METHOD if self.device.is_gpu else None

    @property
    def peak_memory_note(self) -> str | None:
        return None if self.device.is_gpu else memory.CPU_NOTE
    _memory = None   # the peak-memory measurement in progress (memory.TensorFlowPeakMemory)

    def reset_peak_memory(self) -> None:
        self._memory = memory.TensorFlowPeakMemory(self.device)
        self._memory.start()

    def peak_memory_bytes(self) -> int | None:
        """Peak bytes TensorFlow's allocator held above the run's start, for a run on a
        GPU that followed ``reset_peak_memory`` (None otherwise: on the CPU its
        statistics leave small tensors out, see ``memory.py``)."""
        measurement, self._memory = self._memory, None
        return measurement.stop() if measurement is not None else None

    @property
    def trace_count(self) -> int:
        """How many times mode='function' has traced the network (graph version)."""
        return self._traced.traces if self._traced is not None else 0

    def _scope(self):
        return tf.device(self._tf_device) if self._placed else contextlib.nullcontext()

    def _feeds(self, inputs: dict, static=frozenset()) -> tuple[dict, dict]:
        """Tensors of the fed arrays, and the inputs in ``static`` (values that decide
        shapes), as NumPy arrays in eager mode or, for a traced function, as hashable
        values it is traced for."""
        feeds, frozen = {}, {}
        carried = getattr(self.network, "carried_inputs", None)
        if carried:
            inputs = {name: np.asarray(value).astype(carried[name]) if name in carried
                      else value for name, value in inputs.items()}
        with self._scope():
            for name, value in inputs.items():
                if name not in static:
                    feeds[name] = to_tensors(value)
                elif self.mode == "eager":
                    feeds[name] = to_arrays(value)
                else:
                    frozen[name] = freeze(value)
        return feeds, frozen

    def _runs(self) -> TracedRuns:
        version = getattr(self.network, "version", 0)
        if self._traced is None or self._traced_version != version:
            self._traced = TracedRuns(self._forward, self._forward_backward,
                                       self.jit_compile, self.autograph)
            self._traced_version = version
        return self._traced

    def _check_y(self, y: str) -> None:
        if y not in self.network.outputs:
            raise Deep500Error(f"Cannot backpropagate from {y!r}: it is not an output of "
                               f"network '{self.network.name}' (outputs: "
                               f"{self.network.outputs}). Pass y= the name of the scalar "
                               f"loss output")

    def _check_loss(self, loss, y: str) -> None:
        dtype = tf.as_dtype(loss.dtype)
        if not dtype.is_floating or loss.shape.num_elements() != 1:
            raise Deep500Error(f"Cannot backpropagate from {y!r} of network "
                               f"'{self.network.name}': it must be a floating-point scalar, "
                               f"got shape {list(loss.shape)} and dtype {dtype.name}")

    def _parameters(self) -> list:
        variables = self.network.variables
        return [variables[name] for name in self.network.get_params()]

    def _gradients(self, tape, loss) -> list:
        parameters = self._parameters()
        return self._completed(parameters, tape.gradient(loss, parameters))

    def _completed(self, parameters: list, grads: list) -> list:
        """Dense gradients, zeros for parameters ``y`` does not depend on; the fused
        update applied, if any."""
        grads = [tf.zeros_like(p) if g is None else tf.convert_to_tensor(g)
                 for p, g in zip(parameters, grads)]
        if self.fused_update is not None:
            self.fused_update(grads)
        return grads

    def _finish(self, outputs: dict, grads=None) -> dict:
        result = {name: to_numpy(value) for name, value in outputs.items()}
        carried = getattr(self.network, "carried_outputs", None)
        if carried:
            result = {name: restore(value, carried[name], name, "The TensorFlow executor")
                      if name in carried else value for name, value in result.items()}
        if grads is not None:
            self.raw_gradients = grads
            network = self.network
            gradients = {gradient_name(name): network.to_onnx(name, to_numpy(g))
                         for name, g in zip(network.get_params(), grads)}
            self.network.store_gradients(gradients)
            result.update(gradients)
        return result

    # subclasses: _forward(feeds, frozen) -> outputs;
    # _forward_backward(feeds, frozen, y) -> (outputs, gradients)
    def _forward(self, feeds: dict, frozen: dict) -> dict:
        raise NotImplementedError

    def _forward_backward(self, feeds: dict, frozen: dict, y: str):
        raise NotImplementedError


class TensorFlowGraphExecutor(_TensorFlowExecutorBase):
    """Runs a :class:`TensorFlowNetwork` (see the module docstring for the modes).

    Args:
        mode: ``"eager"`` or ``"function"``. Per-operator events (events whose
            ``wants_operator_events`` is true) need ``"eager"``: a traced function runs
            as one TensorFlow call. They bracket each ONNX node of the forward pass
            (with the layout conversions it needs). The backward pass is one
            ``tape.gradient`` call, except when an event asks for per-node backward
            times (``wants_backward_times``: ``OperatorTimes``) or
            ``events_in_backward`` is set: then each node is recorded on a tape of its
            own and differentiated on its own, in reverse order (see
            ``node_backward``), with the same gradients.
        jit_compile: compile the traced functions with XLA (mode="function" only).
    """

    def __init__(self, network: TensorFlowNetwork, device=None, events=(),
                 input_specs: dict | None = None, mode: str = "eager",
                 jit_compile: bool = False):
        super().__init__(network, device if device is not None else network.device, events,
                         input_specs, mode, jit_compile)
        if jit_compile and mode != "function":
            raise Deep500Error("jit_compile=True needs mode='function'")
        for name in self.input_specs:
            if name not in network.inputs:
                network.inputs.append(name)
        #: With per-operator events: fire them around each node's backward too, in
        #: reverse order (the gradients are then computed node by node).
        self.events_in_backward = False
        self._by_node: NodeBackward | None = None
        self._check_operator_events()

    def _check_operator_events(self) -> list:
        operator_events = self.operator_events
        if operator_events and self.mode == "function":
            names = sorted({type(e).__name__ for e in operator_events})
            raise Deep500Error(f"Per-operator events ({', '.join(names)}) need the "
                               f"TensorFlow executor in mode='eager': in mode='function' "
                               f"the network runs as one traced TensorFlow call, with no "
                               f"operator boundaries to report")
        return operator_events

    def _run_eager(self, feeds: dict, operator_events) -> dict:
        return self.network.run(feeds, operator_events, self.device)

    # -- traced bodies -------------------------------------------------------------
    @staticmethod
    def _thawed(feeds: dict, frozen: dict) -> dict:
        if not frozen:
            return feeds
        feeds = dict(feeds)
        feeds.update((name, thaw(value)) for name, value in frozen.items())
        return feeds

    def _forward(self, feeds: dict, frozen: dict) -> dict:
        env = self.network.run(self._thawed(feeds, frozen))
        return {name: to_tensors(env[key])
                for name, key in zip(self.network.outputs, self.network.plan.outputs)}

    def _forward_backward(self, feeds: dict, frozen: dict, y: str):
        network = self.network
        with tf.GradientTape() as tape:
            env = network.run(self._thawed(feeds, frozen))
            outputs = {name: to_tensors(env[key])
                       for name, key in zip(network.outputs, network.plan.outputs)}
        loss = outputs[y]
        self._check_loss(loss, y)
        return outputs, self._gradients(tape, loss)

    # -- GraphExecutor -------------------------------------------------------------
    def _inference(self, inputs: dict) -> dict:
        operator_events = self._check_operator_events()
        network = self.network
        network.keep({})
        plan = network.plan
        feeds, frozen = self._feeds(inputs, plan.static_inputs)
        with self._scope():
            if self.mode == "function":
                outputs = self._runs()(None, feeds, frozen)
                network.keep(outputs)
                return self._finish(outputs)
            env = self._run_eager(feeds, operator_events)
        network.keep(env)
        return self._finish({name: env[key] for name, key in zip(network.outputs,
                                                                 plan.outputs)})

    def _inference_and_backprop(self, inputs: dict, y: str) -> dict:
        operator_events = self._check_operator_events()
        network = self.network
        self._check_y(y)
        shape = network.shapes.get(y)
        if shape is not None and all(isinstance(d, int) for d in shape) and \
                int(np.prod(shape)) != 1:
            raise Deep500Error(f"Cannot backpropagate from {y!r} of network "
                               f"'{network.name}': it must be a scalar, but its shape is "
                               f"{list(shape)}")
        network.keep({})
        plan = network.plan
        feeds, frozen = self._feeds(inputs, plan.static_inputs)
        with self._scope():
            if self.mode == "function":
                outputs, grads = self._runs()(y, feeds, frozen, self.fused_update)
                network.keep(outputs)
                return self._finish(outputs, grads)
            if self.events and (self.events_in_backward and operator_events or any(
                    getattr(e, "wants_backward_times", False) for e in self.events)):
                return self._backprop_by_node(feeds, y, operator_events)
            with tf.GradientTape() as tape:
                env = self._run_eager(feeds, operator_events)
            outputs = {name: env[key] for name, key in zip(network.outputs, plan.outputs)}
            loss = tf.convert_to_tensor(outputs[y])
            self._check_loss(loss, y)
            grads = self._gradients(tape, loss)
        network.keep(env)
        return self._finish(outputs, grads)

    def _backprop_by_node(self, feeds: dict, y: str, operator_events) -> dict:
        """Backprop with each node's backward pass a call of its own (see
        ``node_backward``), for events that time them."""
        network = self.network
        plan = network.plan
        by_node = self._by_node
        if by_node is None or by_node.plan is not plan:
            by_node = self._by_node = NodeBackward(plan, network.get_params())
        sync = self.device.synchronize if self.device.is_gpu else None
        env = network.environment(feeds)
        records = by_node.forward(env, operator_events, sync)
        outputs = {name: env[key] for name, key in zip(network.outputs, plan.outputs)}
        self._check_loss(tf.convert_to_tensor(outputs[y]), y)
        timed = [e for e in self.events if getattr(e, "wants_backward_times", False)]
        grads = by_node.backward(env, records, dict(zip(network.outputs, plan.outputs))[y],
                                 network.get_params(), timed,
                                 operator_events if self.events_in_backward else (), sync)
        grads = self._completed(self._parameters(), grads)
        network.keep(env)
        return self._finish(outputs, grads)


class TensorFlowNativeGraphExecutor(_TensorFlowExecutorBase):
    """A Keras model behind the GraphExecutor interface.

    Args:
        keras_model: a built Keras model; called as ``model(inputs, training=training)``
            with its inputs in the order of ``input_names`` (a single tensor when there
            is one).
        input_names, output_names: Deep500's names of the model's inputs and outputs
            (in the model's order).
        loss_fn: ``loss_fn(outputs, inputs) -> scalar``, both ``{name: tensor}`` dicts
            (``inputs`` holds every fed tensor, so labels can be fed under any name); its
            value is the output ``"loss"``, the default ``y`` of backpropagation.
        mode: ``"eager"`` or ``"function"`` (the call, and the call with its backward
            pass, each traced once into a ``tf.function``).
        training: passed to the model call (False: inference behaviour of batch
            normalization and dropout, as the ONNX executor's).

    Gradients are those of ``model.trainable_variables``, keyed
    ``gradient_name(variable path)`` (see :class:`KerasNetwork`).
    """
    autograph = True   # a subclassed Keras model may branch on tensors

    def __init__(self, keras_model, input_names: Sequence[str], output_names: Sequence[str],
                 loss_fn: Callable | None = None, device=None, events=(),
                 mode: str = "eager", training: bool = False, jit_compile: bool = False):
        input_names, output_names = list(input_names), list(output_names)
        if loss_fn is not None and "loss" in output_names:
            raise Deep500Error("TensorFlowNativeGraphExecutor: with loss_fn, 'loss' names "
                               "the loss output; rename the model output called 'loss'")
        outputs = output_names + (["loss"] if loss_fn is not None else [])
        network = KerasNetwork(keras_model, outputs)
        super().__init__(network, device, events, _keras_input_specs(keras_model, input_names),
                         mode, jit_compile)
        if self.operator_events:
            raise Deep500Error("TensorFlowNativeGraphExecutor: per-operator events are not "
                               "available for a Keras model (its layers are not ONNX "
                               "operators); convert the model to ONNX and use from_onnx")
        self.model = keras_model
        self.input_names = input_names
        self.output_names = output_names
        self.loss_fn = loss_fn
        self.training = bool(training)

    def _call(self, feeds: dict) -> dict:
        args = [feeds[name] for name in self.input_names]
        result = self.model(args[0] if len(args) == 1 else args, training=self.training)
        flat = tf.nest.flatten(result)
        if len(flat) != len(self.output_names):
            raise Deep500Error(f"Keras model '{self.network.name}' returned {len(flat)} "
                               f"outputs, but {len(self.output_names)} output names were "
                               f"given ({self.output_names})")
        outputs = dict(zip(self.output_names, flat))
        if self.loss_fn is not None:
            outputs["loss"] = tf.convert_to_tensor(self.loss_fn(outputs, feeds))
        return outputs

    def _forward(self, feeds: dict, frozen: dict) -> dict:
        return self._call(feeds)

    def _forward_backward(self, feeds: dict, frozen: dict, y: str):
        with tf.GradientTape() as tape:
            outputs = self._call(feeds)
        loss = outputs[y]
        self._check_loss(loss, y)
        return outputs, self._gradients(tape, loss)

    def _inference(self, inputs: dict) -> dict:
        feeds, frozen = self._feeds(inputs)
        with self._scope():
            outputs = (self._runs()(None, feeds, frozen) if self.mode == "function"
                       else self._forward(feeds, frozen))
        self.network.keep(outputs)
        return self._finish(outputs)

    def _inference_and_backprop(self, inputs: dict, y: str) -> dict:
        self._check_y(y)
        feeds, frozen = self._feeds(inputs)
        with self._scope():
            if self.mode == "function":
                outputs, grads = self._runs()(y, feeds, frozen, self.fused_update)
            else:
                outputs, grads = self._forward_backward(feeds, frozen, y)
        self.network.keep(outputs)
        return self._finish(outputs, grads)


def _keras_input_specs(model, input_names: list[str]) -> dict:
    specs = {name: OnnxValueInfo(name, None, None) for name in input_names}
    tensors = getattr(model, "inputs", None)
    try:
        tensors = list(tensors) if tensors is not None else None
    except TypeError:
        tensors = None
    if tensors and len(tensors) == len(input_names):
        for name, tensor in zip(input_names, tensors):
            dtype = np.dtype(tf.as_dtype(tensor.dtype).as_numpy_dtype)
            shape = tuple(d if d is not None else None for d in tensor.shape)
            specs[name] = OnnxValueInfo(name, dtype, shape)
    return specs


_OPTIONS = {"mode": "'eager' (default) or 'function'",
            "propagate_layout": "keep channels-last tensors channels-last between "
                                "operators (default True)",
            "jit_compile": "compile traced functions with XLA (default False)"}


def from_onnx(path_or_model, device=None, events=(), **options) -> TensorFlowGraphExecutor:
    """A TensorFlow executor for an ONNX model (a path, an ``onnx.ModelProto`` or a parsed
    :class:`OnnxModel`).

    Options: ``mode`` ('eager' or 'function'), ``propagate_layout`` (bool),
    ``jit_compile`` (bool; with mode='function').
    """
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise Deep500Error(f"Unknown options {unknown} for the TensorFlow executor; it "
                           f"takes: " + "; ".join(f"{k}: {v}" for k, v in _OPTIONS.items()))
    device = parse_device(device)
    _check_device(device)
    mode = _check_mode(options.get("mode", "eager"), "from_onnx")
    model = (path_or_model if isinstance(path_or_model, OnnxModel)
             else load_and_parse_model(path_or_model))
    carried, declared = carry_values(model)
    visitor = TensorFlowVisitor(propagate_layout=bool(options.get("propagate_layout", True)))
    network = TensorFlowNetwork(model.name, device, visitor)
    network.carried_inputs, network.carried_outputs = carried.inputs, carried.outputs
    network.carried_types = declared
    with tf.device(device.tf_device()):
        visitor.visit_model(carried.model, network)
    values = _value_typed_inputs(model)   # fed as lists or None: no tensor spec to check
    return TensorFlowGraphExecutor(network, device, events,
                                   {vi.name: vi for vi in model.feed_inputs
                                    if vi.name not in values}, mode=mode,
                                   jit_compile=bool(options.get("jit_compile", False)))


def _value_typed_inputs(model: OnnxModel) -> set:
    """The graph inputs of sequence or optional type (``_value_kinds``)."""
    graph_inputs = model.proto.graph.input if model.proto is not None else ()
    return {value.name for value in graph_inputs
            if value.type.WhichOneof("value") in ("sequence_type", "optional_type")}


__all__ = ["TensorFlowGraphExecutor", "TensorFlowNativeGraphExecutor", "from_onnx"]
