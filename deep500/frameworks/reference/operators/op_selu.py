"""Selu: Y = gamma·(alpha·exp(X) - alpha) for X <= 0, gamma·X otherwise.
https://onnx.ai/onnx/operators/onnx__Selu.html (Klambauer et al., Self-Normalizing Neural
Networks, 2017)"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_activation import Unary
from deep500.frameworks.reference.operators.registry import register


@register("Selu")
class Selu(Unary):
    defaults = {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}

    def _forward(self, X):
        alpha, gamma = self.scalar("alpha", X), self.scalar("gamma", X)
        return np.where(X <= 0, gamma * alpha * np.expm1(X), gamma * X)

    def _backward(self, dY, X, Y):
        alpha, gamma = self.scalar("alpha", X), self.scalar("gamma", X)
        return dY * np.where(X <= 0, gamma * alpha * np.exp(X), gamma)
