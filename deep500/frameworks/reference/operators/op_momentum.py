"""Momentum (domain ai.onnx.preview.training): one step of gradient descent with
momentum per variable; with G' = norm_coefficient·X + G and β' = β for T > 0, else 1::

    V_new = α·V + β'·G'
    X_new = X − R·V_new                 (mode "standard", Polyak 1964)
    X_new = X − R·(G' + α·V_new)        (mode "nesterov", Sutskever et al., ICML 2013)

Inputs R, T, X..., G..., V...; outputs X_new..., V_new....
https://onnx.ai/onnx/operators/onnx_aionnxpreviewtraining_Momentum.html"""
from deep500.frameworks.reference.operators._op_common_training import OptimizerStep
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import Deep500Error


@register("Momentum", domain="ai.onnx.preview.training")
class Momentum(OptimizerStep):
    defaults = {"alpha": None, "beta": None, "mode": None, "norm_coefficient": None}
    groups = 3

    def step(self, r, t, X, G, V):
        alpha, mode = self.attr("alpha"), self.attr("mode")
        if mode not in ("standard", "nesterov"):
            raise Deep500Error(f"{self.op_type}: mode={mode!r} is not 'standard' or "
                               f"'nesterov'")
        gradient = self.regularized(X, G)
        V_new = alpha * V + (self.attr("beta") if t > 0 else 1.0) * gradient
        direction = V_new if mode == "standard" else gradient + alpha * V_new
        return X - r * direction, V_new
