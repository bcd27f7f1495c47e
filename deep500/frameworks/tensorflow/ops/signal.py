"""TensorFlowVisitor: the signal family (``deep500/frameworks/families.py``), spectral
transforms and windows: https://onnx.ai/onnx/operators/onnx__DFT.html, .../onnx__STFT.html,
the cosine-sum windows and MelWeightMatrix. Transforms compute in float64 (float32 FFTs
err by ~1e-6 of the sum) and cast back.
"""
from __future__ import annotations

import math

import numpy as np
import onnx

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _attr
from deep500.frameworks.tensorflow.ops._values import _axis, _ints, _tf_dtype
from deep500.utils.errors import ShapeError


class SignalOps:
    """``visit_<op>`` of the signal family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def _window(self, op, coefficients) -> None:
        """A cosine-sum window sum_k c_k·cos(2πkn/N') of ``size`` points, N' = size
        (periodic) or size - 1 (symmetric), signs alternating."""
        periodic = bool(_attr(op, "periodic", 1))
        output = int(_attr(op, "output_datatype", onnx.TensorProto.FLOAT))
        dtype = tf.as_dtype(onnx.helper.tensor_dtype_to_np_dtype(output))

        def window(size):
            n = tf.reshape(tf.cast(size, tf.int64), [])
            period = tf.cast(n if periodic else n - 1, tf.float64)
            phase = 2 * math.pi * tf.cast(tf.range(n), tf.float64) / period
            values = sum((-1) ** k * c * tf.cos(k * phase) for k, c in enumerate(coefficients))
            return tf.cast(values, dtype)
        self.emit(window, [self.key(op.inputs[0])], op.outputs[0], rank=1)

    def visit_hannwindow(self, op, network) -> None:
        """HannWindow: https://onnx.ai/onnx/operators/onnx__HannWindow.html"""
        self._window(op, (0.5, 0.5))

    def visit_hammingwindow(self, op, network) -> None:
        """HammingWindow: https://onnx.ai/onnx/operators/onnx__HammingWindow.html"""
        self._window(op, (25 / 46, 21 / 46))

    def visit_blackmanwindow(self, op, network) -> None:
        """BlackmanWindow: https://onnx.ai/onnx/operators/onnx__BlackmanWindow.html"""
        self._window(op, (0.42, 0.5, 0.08))

    def visit_melweightmatrix(self, op, network) -> None:
        """MelWeightMatrix: triangular filters, peak 1, between mel-spaced edges mapped to
        spectrogram bins (https://onnx.ai/onnx/operators/onnx__MelWeightMatrix.html; as
        onnx's reference, num_mel_bins + 2 steps span the mel range)."""
        output = int(_attr(op, "output_datatype", onnx.TensorProto.FLOAT))
        dtype = tf.as_dtype(onnx.helper.tensor_dtype_to_np_dtype(output))

        def mel_weight_matrix(mel_bins, dft_length, sample_rate, lower_hz, upper_hz):
            count = tf.reshape(tf.cast(mel_bins, tf.int64), [])
            length = tf.reshape(tf.cast(dft_length, tf.float64), [])
            rate = tf.reshape(tf.cast(sample_rate, tf.float64), [])

            def mel(hz):
                return 2595 * tf.math.log1p(tf.reshape(tf.cast(hz, tf.float64), []) / 700) \
                    / math.log(10)
            low, high = mel(lower_hz), mel(upper_hz)
            edges = tf.range(count + 2, dtype=tf.float64)
            edges = edges * ((high - low) / tf.cast(count + 2, tf.float64)) + low
            edges = 700 * tf.math.expm1(edges / 2595 * math.log(10))
            edges = tf.floor((length + 1) * edges / rate)
            left, center, right = edges[None, :-2], edges[None, 1:-1], edges[None, 2:]
            rows = tf.cast(tf.range(tf.cast(length, tf.int64) // 2 + 1), tf.float64)[:, None]
            zero = tf.zeros_like(rows * left)
            rising = tf.where((rows >= left) & (rows <= center) & (center > left),
                              (rows - left) / tf.maximum(center - left, 1), zero)
            rising = tf.where((center == left) & (rows == center), tf.ones_like(zero), rising)
            falling = (rows >= center) & (rows < right) & (right > center)
            weights = tf.where(falling, (right - rows) / tf.maximum(right - center, 1),
                               rising)
            return tf.cast(weights, dtype)
        self.emit(mel_weight_matrix, [self.key(n) for n in op.inputs], op.outputs[0], rank=2)

    def visit_dft(self, op, network) -> None:
        """DFT: https://onnx.ai/onnx/operators/onnx__DFT.html (the last axis holds the
        real and, if of length 2, imaginary parts; ``axis`` an input from opset 20)."""
        inverse = bool(_attr(op, "inverse", 0))
        onesided = bool(_attr(op, "onesided", 0))
        attribute_axis = op.attributes.get("axis")
        inputs = [self.key(op.inputs[0])] + [self.static_key(n) for n in op.inputs[1:3]]
        dynamic_error = self._dynamic_error(op, "dft_length and axis")

        def dft(x, length=None, axis=None):
            x = tf.convert_to_tensor(x)
            rank = len(x.shape)
            along = (int(attribute_axis) if attribute_axis is not None else -2) \
                if axis is None else _ints(axis)
            if along is None:
                raise dynamic_error
            along = along[0] if isinstance(along, list) else along
            along = _axis(along, rank)
            if along == rank - 1:
                raise self.node_error(op, f"axis {along} is the real/imaginary axis; "
                                          f"transform one of the first {rank - 1} axes",
                                      ShapeError)
            parts = tf.cast(x, tf.float64)   # float32 FFTs err by ~1e-6 of the sum
            signal = (tf.complex(parts[..., 0], parts[..., 1]) if x.shape[-1] == 2
                      else tf.complex(parts[..., 0], tf.zeros_like(parts[..., 0])))
            perm = [a for a in range(rank - 1) if a != along] + [along]
            signal = tf.transpose(signal, perm)
            n = signal.shape[-1]
            irfft = inverse and onesided
            if length is not None:
                wanted = _ints(length)
                if wanted is None:
                    raise dynamic_error
                wanted = wanted[0]
            else:
                wanted = 2 * (n - 1) if irfft else n
            if irfft:   # a one-sided spectrum to a real signal of dft_length points
                signal = tf.signal.irfft(signal, fft_length=[wanted])
                signal = tf.transpose(signal, list(np.argsort(perm)))
                return tf.cast(signal[..., None], _tf_dtype(x))
            if length is not None:
                if wanted < n:
                    signal = signal[..., :wanted]
                elif wanted > n:
                    pad = [[0, 0]] * (len(signal.shape) - 1) + [[0, wanted - n]]
                    signal = tf.pad(signal, pad)
                n = wanted
            spectrum = tf.signal.ifft(signal) if inverse else tf.signal.fft(signal)
            if onesided:
                spectrum = spectrum[..., :n // 2 + 1]
            spectrum = tf.transpose(spectrum, list(np.argsort(perm)))
            out = tf.stack([tf.math.real(spectrum), tf.math.imag(spectrum)], axis=-1)
            return tf.cast(out, _tf_dtype(x))
        self.emit(dft, inputs, op.outputs[0], rank=self.rank(op.inputs[0]))

    def visit_stft(self, op, network) -> None:
        """STFT: the DFT of each frame_step-spaced frame, windowed, one-sided for real
        signals by default (https://onnx.ai/onnx/operators/onnx__STFT.html)."""
        onesided = bool(_attr(op, "onesided", 1))
        inputs = [self.key(op.inputs[0]), self.static_key(op.inputs[1])]
        inputs += [self.key(n) for n in op.inputs[2:3]]
        inputs += [self.static_key(n) for n in op.inputs[3:4]]
        dynamic_error = self._dynamic_error(op, "frame_step and frame_length")

        def stft(signal, step, window=None, length=None):
            signal = tf.convert_to_tensor(signal)
            step = _ints(step)
            size = _ints(length) if length is not None else (
                [window.shape[0]] if window is not None else None)
            if step is None or size is None or None in size:
                raise dynamic_error
            parts = tf.cast(signal, tf.float64)
            values = (tf.complex(parts[..., 0], parts[..., 1]) if signal.shape[-1] == 2
                      else tf.complex(parts[..., 0], tf.zeros_like(parts[..., 0])))
            frames = tf.signal.frame(values, size[0], step[0], axis=1)
            if window is not None:
                frames = frames * tf.complex(tf.cast(window, tf.float64),
                                             tf.zeros([size[0]], tf.float64))
            spectrum = tf.signal.fft(frames)
            if onesided:
                spectrum = spectrum[..., :size[0] // 2 + 1]
            out = tf.stack([tf.math.real(spectrum), tf.math.imag(spectrum)], axis=-1)
            return tf.cast(out, _tf_dtype(signal))
        self.emit(stft, inputs, op.outputs[0], rank=4)
