"""PyTorch graph executors: an ONNX model run by PyTorch (``from_onnx``), and a user's
own ``nn.Module`` behind the same interface (``PyTorchNativeGraphExecutor``), so the two
can be validated and timed against each other.

Inference runs under ``torch.inference_mode`` (no autograd records); backpropagation
runs forward with autograd, then ``loss.backward()``, and returns every parameter's
gradient keyed ``gradient_name(parameter)``.
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence
from time import perf_counter_ns

import numpy as np

from deep500.frameworks.pytorch.extension_dtypes import array_from_tensor, tensor_from_array
from deep500.frameworks.pytorch.memory import TorchPeakMemory
from deep500.frameworks.pytorch.network import (PyTorchNativeNetwork, PyTorchNetwork,
                                                _as_array, _numpy_dtype, to_numpy)
from deep500.lv1_network.events import ExecutorEvent
from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv1_network.network import GRADIENT_SUFFIX, gradient_name
from deep500.utils.errors import Deep500Error, UnsupportedError, require
from deep500.utils.framework_errors import register, tag_event
from deep500.utils.onnx_interop.carried_types import restore
from deep500.utils.onnx_interop.cast import is_string
from deep500.utils.onnx_interop.onnx_objects import OnnxModel, OnnxValueInfo
from deep500.utils.onnx_interop.parser import load_and_parse_model

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
# PyTorch's operators raise RuntimeError for tensors whose shapes or dtypes do not fit.
register("pytorch", shape=(RuntimeError,))

_OPTIONS = ("compile",)
_NO_TENSOR = np.empty(0, object)   # stands in for a sequence or an optional input


def _torch_device(device) -> "torch.device":
    if device.is_gpu and not torch.cuda.is_available():
        raise UnsupportedError(f"Device {device} was requested, but this PyTorch "
                               f"({torch.__version__}) sees no CUDA GPU; use device='cpu'")
    return torch.device(device.torch_device())


class _TorchExecutor(GraphExecutor):
    """What both executors share: moving inputs to the device, checking ``y``,
    collecting gradients.

    Events with ``wants_gradients`` (``lv3_distributed.gradient_buckets``) get
    ``gradient_ready(parameter, gradient array)`` and ``backward_progress()`` from each
    parameter's post-accumulate-grad hook, as soon as autograd has accumulated that
    parameter's gradient (``reports_gradients_early``)."""
    framework = "pytorch"
    reports_gradients_early = True
    # graph inputs of sequence or optional type (a list of arrays, or None, when fed)
    _value_inputs: frozenset = frozenset()
    _memory = None   # the peak-memory measurement in progress (memory.TorchPeakMemory)

    @property
    def peak_memory_method(self) -> str:
        return TorchPeakMemory(self.device).method

    def reset_peak_memory(self) -> None:
        self._memory = TorchPeakMemory(self.device)
        self._memory.start()

    def peak_memory_bytes(self) -> int | None:
        """Peak bytes PyTorch's allocator held above the run's start, for a run that
        followed ``reset_peak_memory`` (None otherwise)."""
        measurement, self._memory = self._memory, None
        return measurement.stop() if measurement is not None else None

    def _gradient_hooks(self) -> list:
        """Post-accumulate-grad hooks on every parameter for the events that want
        gradients early (their handles: remove them after ``backward``)."""
        early = [e for e in self.events if getattr(e, "wants_gradients", False)]
        if not early:
            return []
        on_cpu = self._on_cpu

        def hook_for(name):
            def ready(parameter):
                grad = parameter.grad.detach()
                array = array_from_tensor(grad if on_cpu else grad.cpu())
                for event in early:
                    hook = "gradient_ready"
                    try:
                        event.gradient_ready(name, array)
                        hook = "backward_progress"
                        event.backward_progress()
                    except Exception as exc:  # the hook's failure, not the model's
                        tag_event(exc, f"{type(event).__name__}.{hook}")
                        raise
            return ready
        return [parameter.register_post_accumulate_grad_hook(hook_for(name))
                for name, parameter in self.network.parameter_values.items()
                if parameter.requires_grad]

    def _setup_device(self) -> None:
        self._torch_device = _torch_device(self.device)
        self._on_cpu = self._torch_device.type == "cpu"
        self._synchronize = (None if self._on_cpu else
                             functools.partial(torch.cuda.synchronize, self._torch_device))

    def _check_inputs_fully(self, inputs: dict) -> None:
        """The base check, with each sequence- or optional-typed input given as an
        empty stand-in: the graph declares no shape or element type for them
        (``OnnxValueInfo`` reads tensor types only), and the base check reads arrays;
        their tensors cross one by one in ``_to_tensor``."""
        if isinstance(inputs, dict) and self._value_inputs:
            inputs = {name: _NO_TENSOR if name in self._value_inputs else value
                      for name, value in inputs.items()}
        super()._check_inputs_fully(inputs)

    def _to_tensor(self, value, name: str = "") -> "torch.Tensor":
        if type(value) is np.ndarray and self._on_cpu:
            flags = value.flags
            if flags.c_contiguous and flags.writeable:
                # The training loop's case, kept to the fewest calls: code run between
                # backward and the next forward runs with cold caches, where each call
                # costs ~10x its warm time (measured in benchmarks/lv2_training_overhead).
                try:
                    return torch.from_numpy(value)
                except TypeError:
                    pass    # bfloat16, float8, int4, ...: through tensor_from_array
        if value is None or isinstance(value, (list, tuple)):
            # an empty optional; a sequence (of tensors, each crossing as one)
            return None if value is None else [self._to_tensor(v, name) for v in value]
        array = _as_array(value)
        if is_string(array.dtype):
            return array   # strings have no tensor type: the text operators read arrays
        # ml_dtypes' types cross bit for bit or in a wider exact type; others raise
        tensor = tensor_from_array(array, name)
        return tensor if self._on_cpu else tensor.to(self._torch_device)

    def _check_loss(self, y: str, loss) -> None:
        problem = self._loss_problem(y, loss)
        if problem is not None:
            raise problem

    def _loss_problem(self, y: str, loss) -> Deep500Error | None:
        """Why output ``y`` cannot be backpropagated, or ``None``."""
        if loss.numel() != 1:
            return Deep500Error(f"inference_and_backprop: y={y!r} must be a scalar output "
                                f"of network '{self.network.name}', but it has shape "
                                f"{list(loss.shape)}; reduce it (e.g. ReduceMean) first")
        if not loss.requires_grad:
            return Deep500Error(f"inference_and_backprop: output {y!r} of network "
                                f"'{self.network.name}' does not depend on any parameter, "
                                f"so it has no gradient")
        return None

    def _unknown_y(self, y: str) -> Deep500Error:
        return Deep500Error(f"inference_and_backprop: y={y!r} is not an output of network "
                            f"'{self.network.name}' (outputs: {self.network.outputs}); "
                            f"pass one of them, or add it with network.add_output")

    def _outputs_to_numpy(self, outputs: dict) -> dict:
        if self._on_cpu:  # plain tensors share memory; parameters are copied (to_numpy)
            return {name: array_from_tensor(value.detach()) if type(value) is torch.Tensor
                    else to_numpy(value) for name, value in outputs.items()}
        return {name: to_numpy(value) for name, value in outputs.items()}

    def _gradients(self, result: dict) -> dict:
        """Adds every parameter's gradient (zeros where the loss does not reach it)."""
        computed = []
        on_cpu = self._on_cpu
        for name, parameter in self.network.parameter_values.items():
            grad = parameter.grad
            if grad is not None and on_cpu:
                result[name + GRADIENT_SUFFIX] = array_from_tensor(grad)
            elif grad is None:
                result[gradient_name(name)] = np.zeros(tuple(parameter.shape),
                                                       _numpy_dtype(parameter))
            else:
                computed.append((name, grad))
        if computed:
            # One device-to-host copy for all gradients rather than one per parameter.
            for dtype in {grad.dtype for _, grad in computed}:
                group = [(n, g) for n, g in computed if g.dtype == dtype]
                flat = array_from_tensor(torch.cat([g.reshape(-1) for _, g in group]).cpu())
                offset = 0
                for name, grad in group:
                    size = grad.numel()
                    result[gradient_name(name)] = flat[offset:offset + size].reshape(
                        tuple(grad.shape))
                    offset += size
        return result

    def _backprop(self, inputs: dict, y: str) -> dict:
        """Forward and backpropagation of ``y`` on checked ``inputs``: returns the
        network's outputs as NumPy arrays and leaves each parameter's gradient in its
        ``.grad``, where ``torch.optim`` reads it. ``_inference_and_backprop`` adds the
        gradients as arrays; a native optimizer skips that when nothing reads them
        (measured in benchmarks/lv2_training_overhead.py: converting LeNet's 8
        gradients right after backward, with cold caches, took ~95 µs per step, 0.9% of
        the step)."""
        raise NotImplementedError

    def _clear_gradients(self) -> None:
        # New gradient tensors each time: arrays returned earlier stay as they were.
        for parameter in self.network.parameter_values.values():
            parameter.grad = None


class PyTorchGraphExecutor(_TorchExecutor):
    """Runs a :class:`PyTorchNetwork` eagerly, or through ``torch.compile``.

    Args:
        network: the network (``network.module`` is the computation).
        device: 'cpu' (default), 'gpu', 'gpu:N' or a DeviceDescriptor; the module and
            every input move there.
        events: ExecutorEvents; per-operator events are called around each ONNX node
            (after a device synchronize on GPUs) only when one of them asks for them.
        compile: run the module through ``torch.compile``. Nodes then fuse into
            compiled kernels, so per-operator events are not available.
    """

    def __init__(self, network: PyTorchNetwork, device=None,
                 events: Sequence[ExecutorEvent] = (), compile: bool = False,
                 input_specs: dict | None = None):
        if input_specs is None:
            input_specs = {vi.name: vi for vi in network.model.feed_inputs}
        super().__init__(network, device, events, input_specs)
        self._value_inputs = _sequence_or_optional_inputs(network.model)
        self.compile = bool(compile)
        self._check_compile_events()
        self._setup_device()
        network.module.place(self._torch_device)
        self._run = torch.compile(network.module) if self.compile else network.module

    def _check_compile_events(self) -> list:
        wanted = self.operator_events
        if wanted and self.compile:
            raise Deep500Error(
                f"Per-operator events ({', '.join(type(e).__name__ for e in wanted)}) "
                f"cannot run with compile=True on network '{self.network.name}': "
                f"torch.compile fuses the ONNX nodes into kernels. Use compile=False to "
                f"time operators, or drop the per-operator events")
        return wanted

    def _forward(self, tensors: dict, backward_marks: list | None = None) -> dict:
        if self.events:
            events = self._check_compile_events()
            if events:
                return self.network.module.forward_with_events(
                    tensors, events, self._synchronize, backward_marks)
        return self._run(**tensors)

    def _backward_timed(self) -> list:
        """Events that collect per-node backward seconds (OperatorTimes)."""
        if not self.events or self.compile:
            return []
        return [e for e in self.events if getattr(e, "wants_backward_times", False)]

    def _inference(self, inputs: dict) -> dict:
        if self.network.needs_build:  # outside inference mode: constants are made here
            self.network.build_if_needed()
        tensors = {name: self._to_tensor(value, name) for name, value in inputs.items()}
        with torch.inference_mode():
            outputs = self._forward(tensors)
        result = {name: to_numpy(value) for name, value in outputs.items()}
        if self.network.carried_outputs:
            result = self._restore_carried(result)
        self.network.last_values = {**inputs, **result}
        return result

    def _restore_carried(self, result: dict) -> dict:
        """Outputs computed in a wider type (int4 in int8, ...) as declared."""
        declared = self.network.carried_outputs
        return {name: restore(value, declared[name], name, "The PyTorch executor")
                if name in declared else value for name, value in result.items()}

    def _inference_and_backprop(self, inputs: dict, y: str) -> dict:
        return self._gradients(self._backprop(inputs, y))

    def _backprop(self, inputs: dict, y: str) -> dict:
        if self.network.needs_build:
            self.network.build_if_needed()
        if y not in self.network.outputs:
            raise self._unknown_y(y)
        tensors = {name: self._to_tensor(value, name) for name, value in inputs.items()}
        self._clear_gradients()
        if torch.is_grad_enabled():   # entering enable_grad costs ~30 us with cold caches
            return self._forward_and_backward(inputs, tensors, y)
        with torch.enable_grad():
            return self._forward_and_backward(inputs, tensors, y)

    def _forward_and_backward(self, inputs: dict, tensors: dict, y: str) -> dict:
        """Forward, then backward; returns the outputs as NumPy arrays. They are
        converted, and kept as the network's last values, between the two: backward
        does not change them, and caches are still warm after forward's last (small)
        operators, not after backward's kernels."""
        timed = self._backward_timed()
        marks = [] if timed else None
        outputs = self._forward(tensors, marks)
        loss = outputs[y]
        result = self._outputs_to_numpy(outputs)
        if self.network.carried_outputs:
            result = self._restore_carried(result)
        self.network.last_values = {**inputs, **result}
        hooks = self._gradient_hooks() if self.events else ()
        try:
            loss.backward()
            if timed:
                self._record_backward(timed, marks)
        except RuntimeError:
            # Checked only on failure: torch refuses a loss that is not a scalar or
            # reaches no parameter (the same conditions); say which output, and what
            # to do. Before backward, the two checks cost ~10 µs per training step.
            problem = self._loss_problem(y, loss)
            if problem is None:
                raise
            raise problem from None
        finally:
            for hook in hooks:
                hook.remove()
        return result


    def _record_backward(self, timed: list, marks: list) -> None:
        """Each node's backward: from its mark to the next node's (the last to the end
        of ``loss.backward()``), see ``OnnxModule.forward_with_events``."""
        if self._synchronize is not None:
            self._synchronize()
        end = perf_counter_ns()
        for i, (op, start) in enumerate(marks):
            stop = marks[i + 1][1] if i + 1 < len(marks) else end
            for event in timed:
                event.record_backward_time(op, (stop - start) * 1e-9)


class PyTorchNativeGraphExecutor(_TorchExecutor):
    """A user's ``nn.Module`` behind the GraphExecutor interface.

    Args:
        module: called as ``module(*[inputs[n] for n in input_names])``; returns a
            tensor, a tuple/list (one per output name) or a dict.
        input_names: the names of the module's positional inputs, in order.
        output_names: names for the module's outputs, in order.
        loss_fn: optional ``loss_fn(outputs, inputs) -> scalar tensor``, with
            ``outputs`` and ``inputs`` dicts of tensors by name (inputs may include
            ones the module does not take, such as labels); its value is the output
            ``'loss'`` of ``inference_and_backprop``.
        device, events: as for :class:`PyTorchGraphExecutor` (no per-operator events:
            a native module has no ONNX nodes).

    Gradients are keyed ``gradient_name(n)`` for ``n`` in ``module.named_parameters()``.
    """

    def __init__(self, module, input_names: Sequence[str], output_names: Sequence[str],
                 loss_fn: Callable | None = None, device=None,
                 events: Sequence[ExecutorEvent] = ()):
        if not isinstance(module, torch.nn.Module):
            raise Deep500Error(f"PyTorchNativeGraphExecutor wraps a torch.nn.Module, got "
                               f"{type(module).__name__}")
        output_names = list(output_names)
        if loss_fn is not None and "loss" in output_names:
            raise Deep500Error("With a loss_fn, 'loss' names the loss; rename the module "
                               "output called 'loss'")
        specs = {n: OnnxValueInfo(n, None, None) for n in input_names}
        super().__init__(None, device, events, specs)
        if self.operator_events:
            raise UnsupportedError("Per-operator events need ONNX nodes; a native module "
                                   "has none. Export the module to ONNX and use from_onnx")
        self.input_names = list(input_names)
        self.output_names = output_names
        self.loss_fn = loss_fn
        self._setup_device()
        module.to(self._torch_device)  # before the network lists its parameters
        self.network = PyTorchNativeNetwork(module, output_names +
                                            (["loss"] if loss_fn else []))

    def _named(self, raw) -> dict:
        names = self.output_names
        if isinstance(raw, dict):
            missing = [n for n in names if n not in raw]
            if missing:
                raise Deep500Error(f"Module '{self.network.name}' returned a dict without "
                                   f"outputs {missing} (it has {sorted(raw)})")
            return {n: raw[n] for n in names}
        values = raw if isinstance(raw, (tuple, list)) else (raw,)
        if len(values) != len(names):
            raise Deep500Error(f"Module '{self.network.name}' returned {len(values)} "
                               f"output(s) but output_names has {len(names)}: {names}")
        return dict(zip(names, values))

    def _call(self, tensors: dict) -> dict:
        return self._named(self.network.module(*[tensors[n] for n in self.input_names]))

    def _inference(self, inputs: dict) -> dict:
        tensors = {name: self._to_tensor(value, name) for name, value in inputs.items()}
        with torch.inference_mode():
            outputs = self._call(tensors)
        result = {name: to_numpy(value) for name, value in outputs.items()}
        self.network.last_values = {**inputs, **result}
        return result

    def _inference_and_backprop(self, inputs: dict, y: str) -> dict:
        return self._gradients(self._backprop(inputs, y))

    def _backprop(self, inputs: dict, y: str) -> dict:
        if y not in self.network.outputs:
            raise self._unknown_y(y)
        tensors = {name: self._to_tensor(value, name) for name, value in inputs.items()}
        self._clear_gradients()
        with torch.enable_grad():
            outputs = self._call(tensors)
            if self.loss_fn is not None:
                outputs["loss"] = self.loss_fn(outputs, tensors)
            loss = outputs[y]
            self._check_loss(y, loss)
            hooks = self._gradient_hooks() if self.events else ()
            try:
                loss.backward()
            finally:
                for hook in hooks:
                    hook.remove()
        result = {name: to_numpy(value) for name, value in outputs.items()}
        self.network.last_values = {**inputs, **result}
        return result


def _sequence_or_optional_inputs(model) -> frozenset:
    """The names of ``model``'s graph inputs of sequence or optional type."""
    proto = getattr(model, "proto", None)
    if proto is None:
        return frozenset()
    return frozenset(value.name for value in proto.graph.input
                     if value.type.WhichOneof("value") in ("sequence_type",
                                                           "optional_type"))


def from_onnx(path_or_model, device=None, events: Sequence[ExecutorEvent] = (),
              **options) -> PyTorchGraphExecutor:
    """A PyTorch executor for an ONNX model (a path, ``onnx.ModelProto`` or parsed
    ``OnnxModel``). Options: ``compile`` (bool, default False): use ``torch.compile``."""
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise Deep500Error(f"from_onnx (PyTorch): unknown options {unknown}; supported: "
                           f"{list(_OPTIONS)}")
    model = (path_or_model if isinstance(path_or_model, OnnxModel)
             else load_and_parse_model(path_or_model))
    return PyTorchGraphExecutor(PyTorchNetwork(model), device, events, **options)
