"""CausalConvWithState (opset 27): a causal depthwise 1-D convolution that carries its
last k-1 input positions between calls (Mamba, Gated DeltaNet decoding).
https://onnx.ai/onnx/operators/onnx__CausalConvWithState.html

With P = concat(past_state (default zeros), input) along the length axis and weight
(C, 1, k): output[b, c, t] = act(Σ_j weight[c, 0, j]·P[b, c, t + j] + bias[c]), act the
identity ("none") or SiLU ("silu", "swish": x·sigmoid(x)); present_state holds the last
k-1 positions of P. Computed in float64; backward gives the gradients w.r.t. input,
weight, bias and past_state from both outputs' gradients.
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import sigmoid
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("CausalConvWithState")
class CausalConvWithState(ReferenceOp):
    defaults = {"activation": "none"}

    def _activation(self) -> str:
        activation = self.attr("activation")
        activation = activation.decode() if isinstance(activation, bytes) else activation
        if activation not in ("none", "silu", "swish"):
            raise ShapeError(f"{self.op_type}: activation must be 'none', 'silu' or 'swish', "
                             f"got {activation!r}")
        return activation

    def _padded(self, input, weight, bias, past_state) -> np.ndarray:
        """P = concat(past_state, input) in float64, after checking the shapes."""
        if input.ndim != 3:
            raise ShapeError(f"{self.op_type}: input must be (batch, channels, length), got "
                             f"shape {input.shape}")
        batch, channels, _ = input.shape
        if weight.ndim != 3 or weight.shape[:2] != (channels, 1) or weight.shape[2] < 1:
            raise ShapeError(f"{self.op_type}: weight must be ({channels}, 1, k), got shape "
                             f"{weight.shape}")
        k = weight.shape[2]
        if bias is not None and np.shape(bias) != (channels,):
            raise ShapeError(f"{self.op_type}: bias must be ({channels},), got shape "
                             f"{np.shape(bias)}")
        if past_state is None:
            past_state = np.zeros((batch, channels, k - 1))
        elif np.shape(past_state) != (batch, channels, k - 1):
            raise ShapeError(f"{self.op_type}: past_state must be ({batch}, {channels}, "
                             f"{k - 1}) (batch, channels, k - 1), got shape "
                             f"{np.shape(past_state)}")
        return np.concatenate([np.asarray(past_state, np.float64),
                               input.astype(np.float64)], axis=2)

    @staticmethod
    def _convolve(padded, weight, bias, length) -> np.ndarray:
        k = weight.shape[2]
        taps = weight[:, 0].astype(np.float64)
        conv = sum(taps[None, :, j, None] * padded[:, :, j:j + length] for j in range(k))
        return conv if bias is None else conv + np.asarray(bias, np.float64)[None, :, None]

    def forward(self, input, weight, bias=None, past_state=None):
        input, weight = np.asarray(input), np.asarray(weight)
        activation = self._activation()
        padded = self._padded(input, weight, bias, past_state)
        conv = self._convolve(padded, weight, bias, input.shape[2])
        output = conv * sigmoid(conv) if activation != "none" else conv
        present = padded[:, :, padded.shape[2] - (weight.shape[2] - 1):]
        return output.astype(input.dtype), present.astype(input.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        input, weight = np.asarray(fwd_inputs[0]), np.asarray(fwd_inputs[1])
        bias = fwd_inputs[2] if len(fwd_inputs) > 2 else None
        past_state = fwd_inputs[3] if len(fwd_inputs) > 3 else None
        padded = self._padded(input, weight, bias, past_state)
        length, k = input.shape[2], weight.shape[2]
        d_conv = np.zeros(input.shape) if grads[0] is None else np.asarray(grads[0], np.float64)
        if self._activation() != "none":
            conv = self._convolve(padded, weight, bias, length)
            s = sigmoid(conv)
            d_conv = d_conv * (s + conv * s * (1.0 - s))
        d_padded = np.zeros(padded.shape)
        if len(grads) > 1 and grads[1] is not None:
            d_padded[:, :, padded.shape[2] - (k - 1):] += np.asarray(grads[1], np.float64)
        taps = weight[:, 0].astype(np.float64)
        d_weight = np.zeros((weight.shape[0], 1, k))
        for j in range(k):
            d_padded[:, :, j:j + length] += taps[None, :, j, None] * d_conv
            d_weight[:, 0, j] = (d_conv * padded[:, :, j:j + length]).sum(axis=(0, 2))
        result = [d_padded[:, :, k - 1:].astype(input.dtype), d_weight.astype(weight.dtype)]
        if len(fwd_inputs) > 2:
            result.append(None if bias is None else
                          d_conv.sum(axis=(0, 2)).astype(np.asarray(bias).dtype))
        if len(fwd_inputs) > 3:
            result.append(None if past_state is None else
                          d_padded[:, :, :k - 1].astype(np.asarray(past_state).dtype))
        return result
