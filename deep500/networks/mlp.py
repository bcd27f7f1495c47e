"""Multilayer perceptron: Flatten → (Gemm → Relu) per hidden layer → Gemm (logits)."""
from __future__ import annotations

import onnx

from deep500.networks._builder import GraphBuilder


def mlp(input_shape=(1, 28, 28), hidden=(128, 64), classes: int = 10, *,
        batch_size="N", dtype: str = "float32", seed: int = 0,
        name: str = "mlp") -> onnx.ModelProto:
    """A fully connected classifier of a (batch, *input_shape) input with one ReLU layer
    per entry of ``hidden`` and ``classes`` logits."""
    b = GraphBuilder(name, input_shape, batch_size, dtype, seed)
    x = b.flatten(b.input)
    for index, units in enumerate(hidden, start=1):
        x = b.relu(b.gemm(x, int(units), name=f"fc{index}"), name=f"relu{index}")
    x = b.gemm(x, classes, name=f"fc{len(hidden) + 1}")
    return b.build(x, doc=f"MLP {tuple(input_shape)} → {tuple(hidden)} → {classes}")
