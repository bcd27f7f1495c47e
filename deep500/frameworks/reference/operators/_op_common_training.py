"""What the optimizer-step operators of domain ai.onnx.preview.training (Adagrad, Adam,
Momentum) share: their inputs are R (learning rate), T (update count), then groups of
one tensor per optimized variable (X..., G..., and the states), and each group's
tensors are updated alike; the gradient gains the L2 term norm_coefficient·X.
https://onnx.ai/onnx/operators/onnx_aionnxpreviewtraining_Adam.html

The operators compute one step of an optimizer: their outputs are new values of their
inputs, not functions anything is differentiated through, so they have no backward.
"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp
from deep500.utils.errors import ShapeError


class OptimizerStep(ReferenceOp):
    """Subclasses set ``groups`` (how many tensors each variable takes: X, G and the
    states) and write ``step(r, t, X, G, *states)`` returning (X_new, *states_new)."""
    domain = "ai.onnx.preview.training"
    groups = 0

    def forward(self, R, T, *tensors):
        if not tensors or len(tensors) % self.groups:
            raise ShapeError(f"{self.op_type}: after R and T, the inputs come in {self.groups} "
                             f"groups of one tensor per variable; got {len(tensors)} tensors")
        count = len(tensors) // self.groups
        per_variable = [tensors[k::count] for k in range(count)]
        r, t = float(np.asarray(R).reshape(-1)[0]), int(np.asarray(T).reshape(-1)[0])
        # In float64, each output then in the element type of its variable's X.
        steps = [[np.asarray(value, np.asarray(variable[0]).dtype) for value in
                  self.step(r, t, *(np.asarray(x, np.float64) for x in variable))]
                 for variable in per_variable]
        # Outputs: every variable's X_new, then every variable's first state, ...
        return tuple(step[k] for k in range(self.groups - 1) for step in steps)

    def step(self, r: float, t: int, X, G, *states) -> tuple:
        raise NotImplementedError

    def regularized(self, X, G):
        return self.attr("norm_coefficient") * X + G

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None] * len(fwd_inputs)
