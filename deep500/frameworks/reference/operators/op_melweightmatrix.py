"""MelWeightMatrix: the [dft_length//2 + 1, num_mel_bins] matrix of triangular filters,
peak 1, that maps a linear spectrum to the mel scale mel(f) = 2595 log10(1 + f/700).
https://onnx.ai/onnx/operators/onnx__MelWeightMatrix.html

The filters' corners are num_mel_bins + 2 points spaced (mel(upper) - mel(lower)) /
(num_mel_bins + 2) apart on the mel scale from mel(lower_edge_hertz), each mapped to the
spectrum bin floor((dft_length + 1) f / sample_rate): the conventions of ONNX's reference
implementation and test data. Filter i rises linearly from corner i to corner i+1
(where the two coincide, it is 1 at that bin) and falls to 0 at corner i+2.
"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.cast import target_dtype


def _mel(hertz):
    return 2595.0 * np.log10(1.0 + hertz / 700.0)


def _hertz(mel):
    return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)


@register("MelWeightMatrix")
class MelWeightMatrix(ReferenceOp):
    defaults = {"output_datatype": 1}

    def forward(self, num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
                upper_edge_hertz):
        mels, length, rate = (int(np.asarray(v).reshape(-1)[0])
                              for v in (num_mel_bins, dft_length, sample_rate))
        if mels < 1 or length < 1 or rate < 1:
            raise ShapeError(f"{self.op_type}: num_mel_bins, dft_length and sample_rate must "
                             f"be positive, got {mels}, {length}, {rate}")
        low, high = (float(np.asarray(v).reshape(-1)[0])
                     for v in (lower_edge_hertz, upper_edge_hertz))
        step = (_mel(high) - _mel(low)) / (mels + 2)
        corners = _hertz(_mel(low) + step * np.arange(mels + 2))
        corners = ((length + 1) * corners // rate).astype(np.int64)
        left, center, right = corners[:-2], corners[1:-1], corners[2:]
        j = np.arange(length // 2 + 1)[:, None]
        rising = np.where((left <= j) & (j <= center),
                          (j - left) / np.maximum(center - left, 1), 0.0)
        rising = np.where((left == center) & (j == center), 1.0, rising)
        falling = np.where((center <= j) & (j < right),
                           (right - j) / np.maximum(right - center, 1), 0.0)
        weights = np.maximum(rising, falling)
        return weights.astype(target_dtype(self.op_type, self.attr("output_datatype")))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        # Piecewise constant in the edges (corners are whole bins): no gradient.
        return [None] * len(fwd_inputs)
