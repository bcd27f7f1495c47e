"""Level-0 operator interface: ``forward(*inputs)`` and
``backward(grads, fwd_inputs, fwd_outputs)`` on NumPy arrays.

Framework operators also expose the call a fair benchmark should time: the operator on
the framework's own tensors, with conversions from and to NumPy kept outside the clock
(``native_call``).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from deep500.utils.device import CPUDevice, DeviceDescriptor
from deep500.utils.errors import ShapeError
from deep500.utils.tensor_desc import TensorDescriptor


def as_tuple(values) -> tuple:
    """Normalise one output or a sequence of outputs to a tuple."""
    if isinstance(values, tuple):
        return values
    if isinstance(values, list):
        return tuple(values)
    return (values,)


def _check_declared(values: Sequence[Any], descriptors: Sequence[TensorDescriptor] | None,
                   owner: str, kind: str) -> None:
    """Raise a ShapeError unless ``values`` match ``descriptors`` (None: anything goes)
    in count, then each in shape and dtype; messages name ``owner``'s ``kind`` ("input",
    "output") and its index."""
    if descriptors is None:
        return
    if len(values) != len(descriptors):
        raise ShapeError(f"{owner}: expected {len(descriptors)} {kind}s, got {len(values)}")
    for index, (value, desc) in enumerate(zip(values, descriptors)):
        desc.check(value, f"{owner} {kind} {index}")


class CustomOp:
    """An operator with a forward pass and its backward (vector-Jacobian product).

    Args:
        input_descriptors: one TensorDescriptor per input, or None if the operator
            accepts any shape (like the reference ONNX operators).
        output_descriptors: one TensorDescriptor per output, or None.

    ``forward(*inputs)`` returns one array or a tuple. ``backward(grads, fwd_inputs,
    fwd_outputs)`` gets one gradient per forward output (None where the output is not
    used) and returns one gradient per input (None for non-differentiable inputs).
    """
    op_type: str = "CustomOp"
    framework: str = "python"

    def __init__(self, input_descriptors: Sequence[TensorDescriptor] | None = None,
                 output_descriptors: Sequence[TensorDescriptor] | None = None,
                 device: DeviceDescriptor | None = None):
        self.input_descriptors = list(input_descriptors) if input_descriptors else None
        self.output_descriptors = list(output_descriptors) if output_descriptors else None
        self.device = device or CPUDevice()

    @property
    def attributes(self) -> dict:
        """Operator attributes (ONNX attributes for ONNX operators)."""
        return {}

    def forward(self, *inputs):
        raise NotImplementedError(f"{type(self).__name__} does not implement forward")

    def backward(self, grads, fwd_inputs, fwd_outputs):
        raise NotImplementedError(f"{type(self).__name__} does not implement backward")

    # -- checked calls ----------------------------------------------------------
    def check_inputs(self, inputs: Sequence[Any]) -> None:
        """Raise a ShapeError if inputs do not match the declared descriptors."""
        _check_declared(inputs, self.input_descriptors, self.name, "input")

    def check_outputs(self, outputs: Sequence[Any]) -> None:
        """Raise a ShapeError if what ``forward`` returned does not match the declared
        output descriptors."""
        _check_declared(outputs, self.output_descriptors, f"{self.name}.forward", "output")

    def __call__(self, *inputs):
        self.check_inputs(inputs)
        return self.forward(*inputs)

    @property
    def name(self) -> str:
        return f"{self.framework}:{self.op_type}"

    # -- the call a benchmark times -----------------------------------------------
    def native_call(self, inputs: Sequence[np.ndarray]) -> tuple[Callable[[], Any],
                                                                  Callable[[Any], tuple]]:
        """Prepare a timed call on the framework's own tensors.

        Returns ``(call, to_numpy)``: ``call()`` runs the operator once on inputs already
        converted (and placed on the device); ``to_numpy(result)`` turns its result into
        a tuple of NumPy arrays. NumPy operators need no conversion.
        """
        arrays = tuple(inputs)
        forward = self.forward
        return (lambda: forward(*arrays)), (lambda result: tuple(
            np.asarray(r) for r in as_tuple(result)))

    def conditions(self) -> dict:
        """What a measurement of this operator should record about it."""
        return {"framework": self.framework, "op_type": self.op_type,
                "attributes": self.attributes, "device": str(self.device)}


class CustomPythonOp(CustomOp):
    """A CustomOp from two Python functions on NumPy arrays.

    Args:
        forward_fn: ``forward_fn(*inputs) -> output(s)``.
        backward_fn: ``backward_fn(grads, fwd_inputs, fwd_outputs) -> input grads``;
            optional for inference-only operators.
    """
    framework = "python"

    def __init__(self, forward_fn: Callable, backward_fn: Callable | None = None,
                 input_descriptors=None, output_descriptors=None, name: str | None = None):
        super().__init__(input_descriptors, output_descriptors)
        self._forward_fn = forward_fn
        self._backward_fn = backward_fn
        self.op_type = name or getattr(forward_fn, "__name__", "CustomPythonOp")

    def forward(self, *inputs):
        return self._forward_fn(*inputs)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        if self._backward_fn is None:
            raise NotImplementedError(f"{self.name} was built without a backward function")
        return self._backward_fn(grads, fwd_inputs, fwd_outputs)
