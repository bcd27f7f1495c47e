"""The training family in PyTorch: one optimizer step of Adagrad, Momentum (standard and
Nesterov) and Adam over any number of tensors, as the domain ai.onnx.preview.training
defines them (https://onnx.ai/onnx/operators/onnx_aionnxpreviewtraining_Adam.html and
its Adagrad and Momentum pages). Each node's inputs are R (the learning rate), T (the
update count), then the tensors X, their gradients G and their optimizer states, one
group after the other; its outputs are the new X, then the new states. The scalar
coefficients are computed in float64 from R and T; the tensors keep their type.
"""
from __future__ import annotations

import math

from deep500.frameworks.pytorch._torch_common import text
from deep500.utils.errors import require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


def _attribute(op, name: str, default: float) -> float:
    value = op.attributes.get(name)
    return default if value is None else float(value)


def _per_tensor(step, states: int):
    """``fn(R, T, X..., G..., S1..., S2...)`` applying ``step(r, t, x, g, *states)`` ->
    (x_new, *states_new) to each tensor, outputs grouped as ONNX orders them."""
    def run(r, t, *groups):
        count = len(groups) // (2 + states)
        columns = [groups[i * count:(i + 1) * count] for i in range(2 + states)]
        r, t = float(r.reshape(-1)[0]), int(t.reshape(-1)[0])
        results = [step(r, t, *row) for row in zip(*columns)]
        return tuple(result[k] for k in range(1 + states) for result in results)
    return run


def _adagrad(decay_factor, epsilon, norm_coefficient):
    def step(r, t, x, g, h):
        rate = r / (1 + t * decay_factor)
        g = norm_coefficient * x + g
        h_new = h + g * g
        return x - rate * g / (torch.sqrt(h_new) + epsilon), h_new
    return step


def _momentum(alpha, beta, norm_coefficient, nesterov: bool):
    def step(r, t, x, g, v):
        g = norm_coefficient * x + g
        v_new = alpha * v + (beta if t > 0 else 1.0) * g   # the first step takes all of g
        return x - r * (g + alpha * v_new if nesterov else v_new), v_new
    return step


def _adam(alpha, beta, epsilon, norm_coefficient, norm_coefficient_post):
    def step(r, t, x, g, v, h):
        g = norm_coefficient * x + g
        v_new = alpha * v + (1 - alpha) * g
        h_new = beta * h + (1 - beta) * g * g
        rate = r * math.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else r
        x_new = x - rate * (v_new / (torch.sqrt(h_new) + epsilon))
        return (1 - norm_coefficient_post) * x_new, v_new, h_new
    return step


class TrainingOps:
    """``visit_<op>`` of the training family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def visit_adagrad(self, op, network):
        """H += G'², X -= R/(1 + T·decay_factor)·G'/(√H + epsilon), G' = G +
        norm_coefficient·X."""
        step = _adagrad(_attribute(op, "decay_factor", 0.0),
                        _attribute(op, "epsilon", 1e-6),
                        _attribute(op, "norm_coefficient", 0.0))
        self._emit(op, _per_tensor(step, 1))

    def visit_momentum(self, op, network):
        """V = alpha·V + beta·G' (beta 1 at T = 0), X -= R·V, or with mode 'nesterov'
        X -= R·(G' + alpha·V); G' = G + norm_coefficient·X."""
        step = _momentum(_attribute(op, "alpha", 0.0), _attribute(op, "beta", 0.0),
                         _attribute(op, "norm_coefficient", 0.0),
                         text(op.attributes.get("mode"), "standard") == "nesterov")
        self._emit(op, _per_tensor(step, 1))

    def visit_adam(self, op, network):
        """V and H the running means of G' and G'² (G' = G + norm_coefficient·X), X -=
        R'·V/(√H + epsilon) with R' bias-corrected for T > 0, then scaled by
        1 - norm_coefficient_post."""
        step = _adam(_attribute(op, "alpha", 0.9), _attribute(op, "beta", 0.999),
                     _attribute(op, "epsilon", 1e-6), _attribute(op, "norm_coefficient", 0.0),
                     _attribute(op, "norm_coefficient_post", 0.0))
        self._emit(op, _per_tensor(step, 2))


__all__ = ["TrainingOps"]
