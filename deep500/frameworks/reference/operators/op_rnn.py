"""RNN: a one-layer simple recurrent network, Ht = f(Xt·Wiᵀ + Ht-1·Riᵀ + Wbi + Rbi), in
any direction and layout, with sequence lengths and clipping; backward by
backpropagation through time. https://onnx.ai/onnx/operators/onnx__RNN.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_recurrent import (RecurrentOp,
                                                                          clip_mask,
                                                                          through_clip)
from deep500.frameworks.reference.operators.registry import register


class _RNNCell:
    def __init__(self, R, Rb, activations, clip):
        self.R, self.Rb, (self.f,), self.clip = R, Rb, activations, clip
        self.dR = np.zeros_like(R)
        self.dRb = np.zeros(R.shape[0], R.dtype)

    def step(self, xa, h, c):
        a = xa + h @ self.R.T
        if self.Rb is not None:
            a += self.Rb
        a, cm = clip_mask(a, self.clip)
        y = self.f(a)
        return y, None, (a, cm, y, h)

    def step_back(self, dh, dc, cache):
        a, cm, y, h = cache
        da = through_clip(dh * self.f.derivative(a, y), cm)
        self.dR += da.T @ h
        self.dRb += da.sum(axis=0)
        return da, da @ self.R, None


@register("RNN")
class RNN(RecurrentOp):
    gates = 1
    default_activations = ("Tanh",)
    defaults = dict(RecurrentOp.common_defaults)

    def make_cell(self, W, R, Rb, P, activations):
        return _RNNCell(R, Rb, activations, self.attr("clip"))
