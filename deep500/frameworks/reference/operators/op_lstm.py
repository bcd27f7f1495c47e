"""LSTM: a one-layer long short-term memory network (gates i, o, f, c in that order in W,
R and B; peepholes P for i, o, f), with input_forget, any direction and layout,
sequence lengths and clipping; backward by backpropagation through time.
    it = f(Xt·Wiᵀ + Ht-1·Riᵀ + Pi ⊙ Ct-1 + Wbi + Rbi)
    ft = f(Xt·Wfᵀ + Ht-1·Rfᵀ + Pf ⊙ Ct-1 + Wbf + Rbf)     (1 - it with input_forget)
    ct = g(Xt·Wcᵀ + Ht-1·Rcᵀ + Wbc + Rbc)
    Ct = ft ⊙ Ct-1 + it ⊙ ct
    ot = f(Xt·Woᵀ + Ht-1·Roᵀ + Po ⊙ Ct + Wbo + Rbo)
    Ht = ot ⊙ h(Ct)
https://onnx.ai/onnx/operators/onnx__LSTM.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_recurrent import (RecurrentCell,
                                                                          RecurrentOp,
                                                                          clip_mask,
                                                                          through_clip)
from deep500.frameworks.reference.operators.registry import register


class _LSTMCell(RecurrentCell):
    def __init__(self, R, Rb, P, activations, clip, input_forget):
        super().__init__(R, Rb)
        H = R.shape[1]
        self.H, self.clip, self.input_forget = H, clip, input_forget
        zero = np.zeros(H, R.dtype)
        self.Pi, self.Po, self.Pf = (zero, zero, zero) if P is None else (P[:H], P[H:2 * H],
                                                                          P[2 * H:])
        self.f, self.g, self.h = activations
        self.dP = np.zeros(3 * H, R.dtype)

    def step(self, xa, h, c):
        H = self.H
        a = self.preactivation(xa, h)
        ai, ao, af, ac = (a[:, k * H:(k + 1) * H] for k in range(4))
        ai, ci = clip_mask(ai + self.Pi * c, self.clip)
        i = self.f(ai)
        if self.input_forget:
            af, cf = None, None
            fg = 1 - i
        else:
            af, cf = clip_mask(af + self.Pf * c, self.clip)
            fg = self.f(af)
        ac, cc = clip_mask(ac, self.clip)
        g = self.g(ac)
        c_new = fg * c + i * g
        ao, co = clip_mask(ao + self.Po * c_new, self.clip)
        o = self.f(ao)
        hc = self.h(c_new)
        return o * hc, c_new, (h, c, ai, ci, i, af, cf, fg, ac, cc, g, c_new, ao, co, o, hc)

    def step_back(self, dh, dc, cache):
        h, c, ai, ci, i, af, cf, fg, ac, cc, g, c_new, ao, co, o, hc = cache
        dao = through_clip(dh * hc * self.f.derivative(ao, o), co)
        dcn = dc + dh * o * self.h.derivative(c_new, hc) + dao * self.Po
        di = dcn * g
        if self.input_forget:
            di = di - dcn * c
            daf = np.zeros_like(dao)
        else:
            daf = through_clip(dcn * c * self.f.derivative(af, fg), cf)
        dai = through_clip(di * self.f.derivative(ai, i), ci)
        dac = through_clip(dcn * i * self.g.derivative(ac, g), cc)
        dc_prev = dcn * fg + dai * self.Pi + daf * self.Pf
        H = self.H
        self.dP[:H] += (dai * c).sum(axis=0)
        self.dP[H:2 * H] += (dao * c_new).sum(axis=0)
        self.dP[2 * H:] += (daf * c).sum(axis=0)
        da, dh_prev = self.preactivation_back(np.concatenate([dai, dao, daf, dac], axis=1), h)
        return da, dh_prev, dc_prev


@register("LSTM")
class LSTM(RecurrentOp):
    gates = 4
    has_cell = True
    default_activations = ("Sigmoid", "Tanh", "Tanh")
    defaults = {**RecurrentOp.common_defaults, "input_forget": 0}

    def make_cell(self, W, R, Rb, P, activations):
        return _LSTMCell(R, Rb, P, activations, self.attr("clip"),
                         bool(self.attr("input_forget")))
