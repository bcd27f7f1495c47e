"""STFT: the short-time Fourier transform of ``signal`` [batch, length, 1 (real) or 2
(real, imaginary)]: frames of ``frame_length`` samples every ``frame_step`` samples,
floor((length - frame_length) / frame_step) + 1 of them, each multiplied by ``window``
(all ones when omitted) and transformed by a DFT of frame_length points, of which
``onesided`` keeps the first frame_length//2 + 1. Output [batch, frames, bins, 2]
(real, imaginary). frame_length defaults to the window's length, else to the signal's.
https://onnx.ai/onnx/operators/onnx__STFT.html

Backward: the transform is linear in the signal and in the window; with G the output's
gradient as complex numbers (zero-padded to frame_length bins where one-sided), each
frame's windowed samples get g = frame_length · ifft(G) (the DFT's adjoint under the real
inner product), the signal w·g summed over the frames covering each sample (real part to
the real component, imaginary to the imaginary), the window Re(g)·Re(x) + Im(g)·Im(x)
summed over batch and frames.
"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


def _integer(value, name: str, op_type: str) -> int:
    value = np.asarray(value)
    if value.size != 1 or value.dtype.kind not in "iu":
        raise ShapeError(f"{op_type}: {name} must be one integer, got {value!r}")
    return int(value.reshape(-1)[0])


@register("STFT")
class STFT(ReferenceOp):
    defaults = {"onesided": 1}

    def _frames(self, signal, frame_step, window, frame_length):
        """(complex signal [batch, length], window, frame start indices [frames, n])."""
        if signal.ndim != 3 or signal.shape[-1] not in (1, 2):
            raise ShapeError(f"{self.op_type}: signal must be [batch, length, 1 or 2], got "
                             f"shape {list(signal.shape)}")
        samples = signal[..., 0] if signal.shape[-1] == 1 else signal[..., 0] + 1j * signal[..., 1]
        step = _integer(frame_step, "frame_step", self.op_type)
        n = (_integer(frame_length, "frame_length", self.op_type) if frame_length is not None
             else len(window) if window is not None else samples.shape[1])
        window = np.ones(n) if window is None else np.asarray(window)
        if window.shape != (n,) or step < 1 or not 0 < n <= samples.shape[1]:
            raise ShapeError(f"{self.op_type}: frame_length {n} must be in [1, "
                             f"{samples.shape[1]}] and equal the window's length "
                             f"{list(window.shape)}, frame_step {step} positive")
        count = (samples.shape[1] - n) // step + 1
        return samples, window, step * np.arange(count)[:, None] + np.arange(n)

    def forward(self, signal, frame_step, window=None, frame_length=None):
        samples, window, index = self._frames(np.asarray(signal), frame_step, window,
                                              frame_length)
        spectra = np.fft.fft(samples[:, index] * window, axis=-1)
        if self.attr("onesided"):
            spectra = spectra[..., :index.shape[1] // 2 + 1]
        return np.stack([spectra.real, spectra.imag], -1).astype(signal.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        signal, frame_step, window, frame_length = (list(fwd_inputs) + [None] * 2)[:4]
        rest = [None] * (len(fwd_inputs) - 1)
        if grads[0] is None:
            return [np.zeros_like(signal)] + rest
        samples, weights, index = self._frames(np.asarray(signal), frame_step, window,
                                               frame_length)
        n = index.shape[1]
        g_spectra = np.zeros(grads[0].shape[:-2] + (n,), complex)
        g_spectra[..., :grads[0].shape[-2]] = grads[0][..., 0] + 1j * grads[0][..., 1]
        g_frames = n * np.fft.ifft(g_spectra, axis=-1)          # [batch, frames, n]
        g_samples = np.zeros(samples.shape, complex)
        np.add.at(g_samples, (slice(None), index), g_frames * weights)
        parts = [g_samples.real] if signal.shape[-1] == 1 else [g_samples.real,
                                                               g_samples.imag]
        grad_inputs = [np.stack(parts, -1).astype(signal.dtype)] + rest
        if window is not None:
            frames = samples[:, index]
            g_window = (g_frames.real * frames.real + g_frames.imag * frames.imag).sum((0, 1))
            grad_inputs[2] = g_window.astype(np.asarray(window).dtype)
        return grad_inputs
