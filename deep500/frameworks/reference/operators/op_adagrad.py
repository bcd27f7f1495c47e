"""Adagrad (domain ai.onnx.preview.training): one AdaGrad step (Duchi, Hazan & Singer,
JMLR 12, 2011) per variable, with learning rate r = R / (1 + T·decay_factor)::

    G' = norm_coefficient·X + G      H_new = H + G'²      X_new = X − r·G' / (√H_new + ε)

Inputs R, T, X..., G..., H...; outputs X_new..., H_new....
https://onnx.ai/onnx/operators/onnx_aionnxpreviewtraining_Adagrad.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_training import OptimizerStep
from deep500.frameworks.reference.operators.registry import register


@register("Adagrad", domain="ai.onnx.preview.training")
class Adagrad(OptimizerStep):
    defaults = {"decay_factor": 0.0, "epsilon": 1e-6, "norm_coefficient": 0.0}
    groups = 3

    def step(self, r, t, X, G, H):
        rate = r / (1.0 + t * self.attr("decay_factor"))
        gradient = self.regularized(X, G)
        H_new = H + gradient * gradient
        return X - rate * gradient / (np.sqrt(H_new) + self.attr("epsilon")), H_new
