"""Adam (domain ai.onnx.preview.training): one Adam step (Kingma & Ba, ICLR 2015) per
variable; with G' = norm_coefficient·X + G::

    V_new = α·V + (1 − α)·G'          H_new = β·H + (1 − β)·G'²
    R' = R·√(1 − β^T) / (1 − α^T) for T > 0, else R
    X_new = (1 − norm_coefficient_post)·(X − R'·V_new / (√H_new + ε))

Inputs R, T, X..., G..., V..., H...; outputs X_new..., V_new..., H_new....
https://onnx.ai/onnx/operators/onnx_aionnxpreviewtraining_Adam.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_training import OptimizerStep
from deep500.frameworks.reference.operators.registry import register


@register("Adam", domain="ai.onnx.preview.training")
class Adam(OptimizerStep):
    defaults = {"alpha": 0.9, "beta": 0.999, "epsilon": 1e-6, "norm_coefficient": 0.0,
                "norm_coefficient_post": 0.0}
    groups = 4

    def step(self, r, t, X, G, V, H):
        alpha, beta = self.attr("alpha"), self.attr("beta")
        gradient = self.regularized(X, G)
        V_new = alpha * V + (1.0 - alpha) * gradient
        H_new = beta * H + (1.0 - beta) * gradient * gradient
        if t > 0:
            r = r * np.sqrt(1.0 - beta ** t) / (1.0 - alpha ** t)
        X_new = X - r * V_new / (np.sqrt(H_new) + self.attr("epsilon"))
        return (1.0 - self.attr("norm_coefficient_post")) * X_new, V_new, H_new
