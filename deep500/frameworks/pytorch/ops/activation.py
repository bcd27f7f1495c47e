"""The activation family in PyTorch: activation functions and the softmax family
(https://onnx.ai/onnx/operators/, newest opset), each a differentiable torch expression.
"""
from __future__ import annotations

from deep500.frameworks.pytorch._torch_common import calls, text
from deep500.utils.errors import require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional


def _softplus(x):
    """log(1 + exp(x)), written stably as max(x, 0) + log1p(exp(-|x|))."""
    return torch.clamp(x, min=0) + torch.log1p(torch.exp(-x.abs()))


def _softsign(x):
    return x / (1 + x.abs())


def _prelu(x, slope):
    return torch.where(x < 0, x * slope, x)


class ActivationOps:
    """``visit_<op>`` of the activation family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    visit_relu = calls(torch.relu)
    visit_sigmoid = calls(torch.sigmoid)
    # x·max(0, min(1, x/6 + 1/2)): https://onnx.ai/onnx/operators/onnx__HardSwish.html
    visit_hardswish = calls(F.hardswish)
    visit_mish = calls(F.mish)
    visit_softplus = calls(_softplus)
    visit_softsign = calls(_softsign)
    visit_prelu = calls(_prelu)

    def visit_leakyrelu(self, op, network):
        alpha = op.attributes["alpha"]
        self._emit(op, lambda x: F.leaky_relu(x, alpha))

    def visit_elu(self, op, network):
        alpha = float(op.attributes["alpha"])
        self._emit(op, lambda x: F.elu(x, alpha))

    def visit_selu(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Selu.html"""
        alpha, gamma = float(op.attributes["alpha"]), float(op.attributes["gamma"])
        self._emit(op, lambda x: gamma * torch.where(x > 0, x, alpha * torch.expm1(
            torch.clamp(x, max=0))))

    def visit_celu(self, op, network):
        alpha = float(op.attributes["alpha"])
        self._emit(op, lambda x: F.celu(x, alpha))

    def visit_hardsigmoid(self, op, network):
        alpha, beta = float(op.attributes["alpha"]), float(op.attributes["beta"])
        self._emit(op, lambda x: torch.clamp(alpha * x + beta, 0, 1))

    def visit_thresholdedrelu(self, op, network):
        alpha = float(op.attributes["alpha"])
        self._emit(op, lambda x: torch.where(x > alpha, x, torch.zeros_like(x)))

    def visit_shrink(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Shrink.html"""
        bias, lambd = float(op.attributes["bias"]), float(op.attributes["lambd"])

        def shrink(x):
            zero = torch.zeros_like(x)
            if x.is_floating_point():
                return torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias,
                                                                      zero))
            low = (x.double() + bias).to(x.dtype)
            high = (x.double() - bias).to(x.dtype)
            return torch.where(x < -lambd, low, torch.where(x > lambd, high, zero))
        self._emit(op, shrink)

    def visit_swish(self, op, network):
        """x·sigmoid(alpha·x): https://onnx.ai/onnx/operators/onnx__Swish.html"""
        alpha = op.attributes.get("alpha")
        alpha = 1.0 if alpha is None else float(alpha)
        self._emit(op, lambda x: x * torch.sigmoid(alpha * x))

    def visit_swiglu(self, op, network):
        """Swish_alpha(A)·B: https://onnx.ai/onnx/operators/onnx__SwiGLU.html"""
        alpha = float(op.attributes["alpha"])
        self._emit(op, lambda a, b: a * torch.sigmoid(alpha * a) * b)

    def visit_gelu(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Gelu.html"""
        approximate = text(op.attributes.get("approximate"), "none")
        if approximate not in ("none", "tanh"):
            raise self.node_error(op, f"approximate={approximate!r} is not 'none' or "
                                  f"'tanh'")
        self._emit(op, lambda x: F.gelu(x, approximate=approximate))

    def visit_hardmax(self, op, network):
        """1 at the first maximum along ``axis``, 0 elsewhere.
        https://onnx.ai/onnx/operators/onnx__Hardmax.html"""
        axis = op.attributes["axis"]

        def hardmax(x):
            index = x.argmax(axis, keepdim=True)
            return torch.zeros_like(x).scatter(axis, index, 1)
        self._emit(op, hardmax)

    def _along_axis(self, op, fn):
        axis = op.attributes["axis"]
        self._emit(op, lambda x: fn(x, axis))

    def visit_softmax(self, op, network):
        self._along_axis(op, torch.softmax)

    def visit_logsoftmax(self, op, network):
        self._along_axis(op, torch.log_softmax)


__all__ = ["ActivationOps"]
