"""PyTorch's own operators behind Deep500's ``CustomOp`` interface.

``native_operator("Conv", strides=[2, 2], ...)`` maps an ONNX operator and its attributes
onto ``torch.nn.functional`` so PyTorch can be validated against the reference and timed
on its own tensors. Backward uses PyTorch's autograd.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from deep500.frameworks._bridge.native_ops import NativeOperators
from deep500.lv0_operators.custom_op import CustomOp, as_tuple
from deep500.utils.device import parse_device
from deep500.utils.errors import UnsupportedError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional


class PyTorchNativeOp(CustomOp):
    """A PyTorch function as a CustomOp on NumPy arrays.

    Args:
        fn: a function of torch tensors returning one tensor or a tuple.
        op_type: the name shown in results (an ONNX name for mapped operators).
        attributes: the attributes ``fn`` was built from, for the record.
        device: where tensors live ('cpu', 'gpu:0', or a DeviceDescriptor).
    """
    framework = "pytorch"

    def __init__(self, fn: Callable, op_type: str = "PyTorchOp", attributes: dict | None = None,
                 device=None, input_descriptors=None, output_descriptors=None):
        super().__init__(input_descriptors, output_descriptors, parse_device(device))
        self.fn = fn
        self.op_type = op_type
        self._attributes = dict(attributes or {})

    @property
    def attributes(self) -> dict:
        return dict(self._attributes)

    def _to_torch(self, array, requires_grad=False):
        if array is None:
            return None
        tensor = torch.from_numpy(np.asarray(array, order="C")).to(self.device.torch_device())
        return tensor.requires_grad_(requires_grad) if requires_grad else tensor

    @staticmethod
    def _to_numpy(result) -> tuple:
        return tuple(t.detach().cpu().numpy() if t is not None else None
                     for t in as_tuple(result))

    def forward(self, *inputs):
        with torch.no_grad():
            outputs = self._to_numpy(self.fn(*[self._to_torch(x) for x in inputs]))
        return outputs[0] if len(outputs) == 1 else outputs

    def backward(self, grads, fwd_inputs, fwd_outputs):
        tensors = [self._to_torch(x, requires_grad=x is not None and
                                  np.issubdtype(np.asarray(x).dtype, np.floating))
                   for x in fwd_inputs]
        outputs = as_tuple(self.fn(*tensors))
        pairs = [(o, self._to_torch(g)) for o, g in zip(outputs, grads)
                 if g is not None and o.requires_grad]
        wanted = [t for t in tensors if t is not None and t.requires_grad]
        computed = iter(torch.autograd.grad([o for o, _ in pairs], wanted,
                                            [g for _, g in pairs], allow_unused=True))
        result = []
        for tensor, array in zip(tensors, fwd_inputs):
            if tensor is None or not tensor.requires_grad:
                result.append(None)
                continue
            grad = next(computed)
            result.append(np.zeros_like(array) if grad is None else grad.cpu().numpy())
        return result

    def native_call(self, inputs: Sequence[np.ndarray]):
        # Inputs become device tensors once, outside the clock; none requires grad, so
        # the timed call builds no autograd graph.
        tensors = [self._to_torch(x) for x in inputs]
        fn = self.fn
        return (lambda: fn(*tensors)), self._to_numpy


# -- ONNX operators onto torch.nn.functional -------------------------------------------
# Each builder returns the function of torch tensors computing the operator.
_OPERATORS = NativeOperators("PyTorch")
_OPERATORS.without_attributes({"MatMul": torch.matmul, "Relu": torch.relu,
                               "Sigmoid": torch.sigmoid, "Tanh": torch.tanh})


def _symmetric_or_pad(pads: Sequence[int], dims: int):
    """PyTorch convolutions take symmetric padding; asymmetric ONNX pads need F.pad."""
    begin, end = list(pads[:dims]), list(pads[dims:])
    if begin == end:
        return begin, None
    torch_pads = []
    for axis in reversed(range(dims)):
        torch_pads += [begin[axis], end[axis]]
    return [0] * dims, torch_pads


@_OPERATORS.builder("Conv")
def _conv(attributes):
    if attributes.get("auto_pad", "NOTSET") != "NOTSET":
        raise UnsupportedError("The PyTorch Conv wrapper takes explicit pads; "
                               "auto_pad is not supported")
    strides = attributes.get("strides", [1, 1])
    dilations = attributes.get("dilations", [1, 1])
    padding, explicit = _symmetric_or_pad(attributes.get("pads", [0, 0, 0, 0]), 2)
    group = attributes.get("group", 1)

    def conv(X, W, B=None):
        if explicit is not None:
            X = F.pad(X, explicit)
        return F.conv2d(X, W, B, stride=strides, padding=padding, dilation=dilations,
                        groups=group)
    return conv


@_OPERATORS.builder("Gemm")
def _gemm(attributes):
    alpha, beta = attributes.get("alpha", 1.0), attributes.get("beta", 1.0)
    trans_a, trans_b = attributes.get("transA", 0), attributes.get("transB", 0)

    def gemm(A, B, C=None):
        a = A.t() if trans_a else A
        b = B.t() if trans_b else B
        if C is None or beta == 0:
            return torch.mm(a, b) if alpha == 1.0 else alpha * torch.mm(a, b)
        return torch.addmm(C, a, b, beta=beta, alpha=alpha)
    return gemm


@_OPERATORS.builder("Softmax")
def _softmax(attributes):
    axis = attributes.get("axis", -1)
    return lambda X: torch.softmax(X, axis)


@_OPERATORS.builder("LogSoftmax")
def _log_softmax(attributes):
    axis = attributes.get("axis", -1)
    return lambda X: torch.log_softmax(X, axis)


def native_operator(op_type: str, device=None, **attributes) -> PyTorchNativeOp:
    """PyTorch's implementation of ONNX operator ``op_type`` as a CustomOp."""
    return PyTorchNativeOp(_OPERATORS.build(op_type, attributes), op_type, attributes, device)


def native_operator_names() -> list[str]:
    """The ONNX operators :func:`native_operator` maps onto PyTorch, sorted."""
    return _OPERATORS.names()
