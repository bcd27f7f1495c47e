"""DFT (opset 17 and 20): the discrete Fourier transform of a signal along ``axis``.

The last input dimension holds one value (a real signal) or two (real, imaginary); the
output's last dimension holds (real, imaginary), or one value for ``inverse`` with
``onesided`` (a real signal from its ``n//2 + 1`` non-redundant frequencies). The signal
is zero-padded or truncated to ``dft_length`` along ``axis``; ``onesided`` keeps the first
``n//2 + 1`` frequencies; ``inverse`` divides by n. Opset 17 takes ``axis`` as an
attribute (default 1), opset 20 as an optional input (default -2).
https://onnx.ai/onnx/operators/onnx__DFT.html

The transform is real-linear, so the backward pass applies its exact adjoint under the
real inner product: fft's adjoint is n·ifft, ifft's is fft/n, and irfft's is rfft/n with
the frequencies 1..(n-1)//2 (each standing for a conjugate pair) counted twice.
"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


def _resized(x: np.ndarray, axis: int, length: int) -> np.ndarray:
    """x truncated or zero-padded to ``length`` along ``axis``."""
    if x.shape[axis] >= length:
        return np.take(x, np.arange(length), axis=axis)
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, length - x.shape[axis])
    return np.pad(x, pad)


def _scalar(value, name: str, op_type: str):
    """One integer from an optional scalar (or 1-element) input; None if omitted."""
    if value is None:
        return None
    value = np.asarray(value)
    if value.size != 1 or not np.issubdtype(value.dtype, np.integer):
        raise ShapeError(f"{op_type}: {name} must be one integer, got {value!r}")
    return int(value.reshape(-1)[0])


@register("DFT")
class DFT(ReferenceOp):
    # axis: the opset-17 attribute; None (opset 20) reads the axis input, default -2.
    defaults = {"inverse": 0, "onesided": 0, "axis": None}

    def _plan(self, input, dft_length, axis_input):
        """(signal axis in the complex view, transform length n)."""
        if input.ndim < 2 or input.shape[-1] not in (1, 2):
            raise ShapeError(f"{self.op_type}: the input must end with a dimension of 1 "
                             f"(real) or 2 (real, imaginary), got shape {input.shape}")
        axis = self.attr("axis")
        given = _scalar(axis_input, "axis", self.op_type)
        if given is not None:
            axis = given
        axis = -2 if axis is None else int(axis)
        if not -input.ndim <= axis <= input.ndim - 2 or axis == -1:
            raise ShapeError(f"{self.op_type}: axis {axis} is out of range for an input of "
                             f"shape {input.shape} (the last dimension is real/imaginary)")
        axis %= input.ndim
        n = _scalar(dft_length, "dft_length", self.op_type)
        if n is None:
            size = input.shape[axis]
            n = 2 * (size - 1) if self.attr("inverse") and self.attr("onesided") else size
        if n < 1:
            raise ShapeError(f"{self.op_type}: dft_length must be positive, got {n}")
        return axis, n

    def forward(self, input, dft_length=None, axis=None):
        input = np.asarray(input)
        axis, n = self._plan(input, dft_length, axis)
        signal = input[..., 0] if input.shape[-1] == 1 else input[..., 0] + 1j * input[..., 1]
        if self.attr("inverse") and self.attr("onesided"):
            return np.fft.irfft(signal, n, axis=axis)[..., None].astype(input.dtype)
        y = (np.fft.ifft if self.attr("inverse") else np.fft.fft)(signal, n, axis=axis)
        if self.attr("onesided"):
            y = np.take(y, np.arange(n // 2 + 1), axis=axis)
        return np.stack([y.real, y.imag], -1).astype(input.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        input = np.asarray(fwd_inputs[0])
        rest = [None] * (len(fwd_inputs) - 1)
        if grads[0] is None:
            return [np.zeros_like(input)] + rest
        dft_length = fwd_inputs[1] if len(fwd_inputs) > 1 else None
        axis, n = self._plan(input, dft_length, fwd_inputs[2] if len(fwd_inputs) > 2 else None)
        grad = np.asarray(grads[0], np.float64)
        if self.attr("inverse") and self.attr("onesided"):
            weights = np.full(n // 2 + 1, 2.0)
            weights[0] = 1.0
            if n % 2 == 0:
                weights[-1] = 1.0
            shape = [1] * (input.ndim - 1)
            shape[axis] = n // 2 + 1
            d_signal = np.fft.rfft(grad[..., 0], n, axis=axis) * weights.reshape(shape) / n
        else:
            d_y = grad[..., 0] + 1j * grad[..., 1]
            if self.attr("onesided"):
                d_y = _resized(d_y, axis, n)
            d_signal = (np.fft.fft(d_y, axis=axis) / n if self.attr("inverse")
                        else np.fft.ifft(d_y, axis=axis) * n)
        d_signal = _resized(d_signal, axis, input.shape[axis])
        parts = [d_signal.real] if input.shape[-1] == 1 else [d_signal.real, d_signal.imag]
        return [np.stack(parts, -1).astype(input.dtype)] + rest
