"""The signal family in PyTorch: DFT and STFT by torch.fft, the Hann, Hamming and
Blackman windows and MelWeightMatrix's filters.
https://onnx.ai/onnx/operators/onnx__DFT.html
"""
from __future__ import annotations

import math

from deep500.frameworks.pytorch._torch_common import torch_dtype
from deep500.utils.errors import ShapeError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


def _window(kind, size, periodic, dtype):
    """Hann, Hamming and Blackman windows of ``size`` samples (periodic: the
    denominator is N, else N - 1), computed in float64.
    https://onnx.ai/onnx/operators/onnx__HannWindow.html"""
    count = int(size.reshape(-1)[0])
    n = torch.arange(count, dtype=torch.float64, device=size.device)
    phase = 2 * math.pi * n / (count if periodic else max(count - 1, 1))
    if kind == "hann":
        window = 0.5 - 0.5 * torch.cos(phase)
    elif kind == "hamming":
        window = 25 / 46 - 21 / 46 * torch.cos(phase)
    else:
        window = 0.42 - 0.5 * torch.cos(phase) + 0.08 * torch.cos(2 * phase)
    return window.to(dtype)


def _mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
                       upper_edge_hertz, dtype):
    """(dft_length//2 + 1, num_mel_bins) triangular filters: num_mel_bins + 2 points
    equally spaced in mel (2595·log10(1 + f/700)) from lower to upper_edge_hertz,
    mapped to spectrogram bins floor((dft_length + 1)·f / sample_rate); filter i rises
    linearly from point i to i + 1 (1 there) and falls to point i + 2."""
    bins, length = int(num_mel_bins), int(dft_length)
    rate = float(sample_rate)

    def mel(hertz):
        return 2595 * math.log1p(float(hertz) / 700) / math.log(10)
    low, high = mel(lower_edge_hertz), mel(upper_edge_hertz)
    points = torch.arange(bins + 2, dtype=torch.float64)
    points = points * ((high - low) / (bins + 2)) + low
    hertz = 700 * torch.expm1(points / 2595 * math.log(10))
    edges = torch.div((length + 1) * hertz, rate, rounding_mode="floor")  # whole bins
    left, center, right = edges[:-2], edges[1:-1], edges[2:]
    j = torch.arange(length // 2 + 1, dtype=torch.float64).unsqueeze(1)
    rising = torch.where(center > left, (j - left) / (center - left).clamp(min=1),
                         (j == center).double())
    falling = (right - j) / (right - center).clamp(min=1)
    weights = torch.where((j >= center) & (j < right), falling,
                          torch.where((j >= left) & (j <= center), rising, 0.0))
    return weights.to(dtype)


class SignalOps:
    """``visit_<op>`` of the signal family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def _window(self, op, kind):
        periodic = bool(op.attributes.get("periodic", 1))
        dtype = torch_dtype(op.attributes.get("output_datatype") or 1)
        self._emit(op, lambda size: _window(kind, size, periodic, dtype))

    def visit_hannwindow(self, op, network):
        self._window(op, "hann")

    def visit_hammingwindow(self, op, network):
        self._window(op, "hamming")

    def visit_blackmanwindow(self, op, network):
        self._window(op, "blackman")

    def visit_melweightmatrix(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__MelWeightMatrix.html"""
        dtype = torch_dtype(op.attributes.get("output_datatype") or 1)
        self._emit(op, lambda *scalars: _mel_weight_matrix(*scalars, dtype))

    def visit_dft(self, op, network):
        """Discrete Fourier transform along ``axis`` of a signal whose last dimension
        holds (real) or (real, imaginary); onesided keeps the n//2 + 1 non-redundant
        frequencies (inverse + onesided: a real signal from them).
        https://onnx.ai/onnx/operators/onnx__DFT.html"""
        inverse = bool(op.attributes.get("inverse"))
        onesided = bool(op.attributes.get("onesided"))
        default = op.attributes.get("axis", -2)  # an attribute before opset 20

        def dft(x, length=None, axis_input=None):
            axis = default if axis_input is None else int(axis_input.reshape(-1)[0])
            dim = axis % x.dim()
            if dim == x.dim() - 1:
                raise ShapeError(f"DFT: axis {axis} is the real/imaginary dimension of "
                                 f"an input of shape {tuple(x.shape)}")
            signal = x[..., 0] if x.shape[-1] == 1 else torch.complex(x[..., 0], x[..., 1])
            n = None if length is None else int(length.reshape(-1)[0])
            if inverse and onesided:
                return torch.fft.irfft(signal, n, dim=dim).unsqueeze(-1)
            if inverse:
                y = torch.fft.ifft(signal, n, dim=dim)
            elif onesided and not signal.is_complex():
                y = torch.fft.rfft(signal, n, dim=dim)
            else:
                y = torch.fft.fft(signal, n, dim=dim)
                if onesided:
                    y = y.narrow(dim, 0, y.shape[dim] // 2 + 1)
            return torch.stack([y.real, y.imag], -1)
        self._emit(op, dft)

    def visit_stft(self, op, network):
        """DFTs of the frames of frame_length samples every frame_step samples, each
        multiplied by the window; computed in float64, returned in the signal's type.
        https://onnx.ai/onnx/operators/onnx__STFT.html"""
        onesided = bool(op.attributes.get("onesided", 1))

        def stft(signal, frame_step, window=None, frame_length=None):
            x = signal.double()
            x = x[..., 0] if x.shape[-1] == 1 else torch.complex(x[..., 0], x[..., 1])
            if frame_length is not None:
                length = int(frame_length.reshape(-1)[0])
            else:
                length = x.shape[1] if window is None else window.shape[0]
            frames = x.unfold(1, length, int(frame_step.reshape(-1)[0]))
            if window is not None:
                frames = frames * window.double()
            if onesided and not frames.is_complex():
                y = torch.fft.rfft(frames, dim=-1)
            else:
                y = torch.fft.fft(frames, dim=-1)
                if onesided:
                    y = y[..., :length // 2 + 1]
            return torch.stack([y.real, y.imag], -1).to(signal.dtype)
        self._emit(op, stft)


__all__ = ["SignalOps"]
