"""RNN: a one-layer simple recurrent network, Ht = f(Xt·Wiᵀ + Ht-1·Riᵀ + Wbi + Rbi), in
any direction and layout, with sequence lengths and clipping; backward by
backpropagation through time. https://onnx.ai/onnx/operators/onnx__RNN.html"""
from deep500.frameworks.reference.operators._op_common_recurrent import (RecurrentCell,
                                                                          RecurrentOp,
                                                                          clip_mask,
                                                                          through_clip)
from deep500.frameworks.reference.operators.registry import register


class _RNNCell(RecurrentCell):
    def __init__(self, R, Rb, activations, clip):
        super().__init__(R, Rb)
        (self.f,), self.clip = activations, clip

    def step(self, xa, h, c):
        a, cm = clip_mask(self.preactivation(xa, h), self.clip)
        y = self.f(a)
        return y, None, (a, cm, y, h)

    def step_back(self, dh, dc, cache):
        a, cm, y, h = cache
        return (*self.preactivation_back(through_clip(dh * self.f.derivative(a, y), cm), h),
                None)


@register("RNN")
class RNN(RecurrentOp):
    gates = 1
    default_activations = ("Tanh",)
    defaults = dict(RecurrentOp.common_defaults)

    def make_cell(self, W, R, Rb, P, activations):
        return _RNNCell(R, Rb, activations, self.attr("clip"))
