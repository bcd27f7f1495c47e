"""GRU: a one-layer gated recurrent unit (gates z, r, h in that order in W, R and B),
with linear_before_reset, any direction and layout, sequence lengths and clipping;
backward by backpropagation through time.
    zt = f(Xt·Wzᵀ + Ht-1·Rzᵀ + Wbz + Rbz),  rt = f(Xt·Wrᵀ + Ht-1·Rrᵀ + Wbr + Rbr)
    ht = g(Xt·Whᵀ + (rt ⊙ Ht-1)·Rhᵀ + Rbh + Wbh)     (linear_before_reset = 0)
    ht = g(Xt·Whᵀ + rt ⊙ (Ht-1·Rhᵀ + Rbh) + Wbh)     (linear_before_reset ≠ 0)
    Ht = (1 - zt) ⊙ ht + zt ⊙ Ht-1
https://onnx.ai/onnx/operators/onnx__GRU.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_recurrent import (RecurrentOp,
                                                                          clip_mask,
                                                                          through_clip)
from deep500.frameworks.reference.operators.registry import register


class _GRUCell:
    def __init__(self, R, Rb, activations, clip, linear_before_reset):
        H = R.shape[1]
        self.H, self.R, self.clip, self.lbr = H, R, clip, linear_before_reset
        self.Rzr, self.Rh = R[:2 * H], R[2 * H:]
        self.Rb = np.zeros(3 * H, R.dtype) if Rb is None else Rb
        self.f, self.g = activations
        self.dR = np.zeros_like(R)
        self.dRb = np.zeros(3 * H, R.dtype)

    def step(self, xa, h, c):
        H = self.H
        azr, czr = clip_mask(xa[:, :2 * H] + h @ self.Rzr.T + self.Rb[:2 * H], self.clip)
        zr = self.f(azr)
        z, r = zr[:, :H], zr[:, H:]
        if self.lbr:
            q = h @ self.Rh.T + self.Rb[2 * H:]
            ah = xa[:, 2 * H:] + r * q
        else:
            q = None
            ah = xa[:, 2 * H:] + (r * h) @ self.Rh.T + self.Rb[2 * H:]
        ah, ch = clip_mask(ah, self.clip)
        hh = self.g(ah)
        return (1 - z) * hh + z * h, None, (h, azr, czr, zr, q, ah, ch, hh)

    def step_back(self, dh, dc, cache):
        H = self.H
        h, azr, czr, zr, q, ah, ch, hh = cache
        z, r = zr[:, :H], zr[:, H:]
        dah = through_clip(dh * (1 - z) * self.g.derivative(ah, hh), ch)
        dh_prev = dh * z
        if self.lbr:
            dq = dah * r
            dr = dah * q
            self.dR[2 * H:] += dq.T @ h
            dh_prev += dq @ self.Rh
        else:
            dq = dah
            self.dR[2 * H:] += dq.T @ (r * h)
            drh = dq @ self.Rh
            dr = drh * h
            dh_prev += drh * r
        self.dRb[2 * H:] += dq.sum(axis=0)
        dzr = np.concatenate([dh * (h - hh), dr], axis=1)
        dazr = through_clip(dzr * self.f.derivative(azr, zr), czr)
        self.dR[:2 * H] += dazr.T @ h
        self.dRb[:2 * H] += dazr.sum(axis=0)
        dh_prev += dazr @ self.Rzr
        return np.concatenate([dazr, dah], axis=1), dh_prev, None


@register("GRU")
class GRU(RecurrentOp):
    gates = 3
    default_activations = ("Sigmoid", "Tanh")
    defaults = {**RecurrentOp.common_defaults, "linear_before_reset": 0}

    def make_cell(self, W, R, Rb, P, activations):
        return _GRUCell(R, Rb, activations, self.attr("clip"),
                        bool(self.attr("linear_before_reset")))
