"""AlexNet (Krizhevsky, Sutskever, Hinton, "ImageNet Classification with Deep
Convolutional Neural Networks", NeurIPS 2012) in torchvision's single-tower layout,
adapted to CIFAR-sized 32×32 inputs.

torchvision: Conv 11×11/4 pad 2 (64) → Relu → MaxPool 3×3/2 → Conv 5×5 pad 2 (192) →
Relu → MaxPool 3×3/2 → Conv 3×3 pad 1 (384) → Relu → Conv 3×3 pad 1 (256) → Relu →
Conv 3×3 pad 1 (256) → Relu → MaxPool 3×3/2 → AdaptiveAvgPool 6×6 → Dropout → Gemm 4096
→ Relu → Dropout → Gemm 4096 → Relu → Gemm (classes).

Adapted here, and only here:

* the first convolution is 3×3/1 pad 1 instead of 11×11/4 pad 2, which would leave
  7×7 maps of a 32×32 input and pool them away (32 → 32 → 15 → 15 → 7 → 7 → 3);
* the 6×6 adaptive average pool is left out (it is not an ONNX operator and a 32×32
  input gives 3×3 maps), so the first classifier layer takes 256·h·w inputs (2,304);
* the dropout layers are left out (the zoo's models are deterministic);
* the two hidden classifier layers have ``hidden`` units (4,096 as torchvision).

Convolutions have biases; initial weights as :mod:`deep500.networks._builder` draws them.
"""
from __future__ import annotations

import onnx

from deep500.networks._builder import GraphBuilder

# (channels, kernel, pad, max pool after) of the five convolutions
FEATURES = ((64, 3, 1, True), (192, 5, 2, True), (384, 3, 1, False), (256, 3, 1, False),
            (256, 3, 1, True))


def alexnet(input_shape=(3, 32, 32), classes: int = 10, hidden: int = 4096, *,
            batch_size="N", dtype: str = "float32", seed: int = 0,
            name: str = "alexnet") -> onnx.ModelProto:
    """AlexNet for a (batch, C, H, W) input (32×32 by default; see the module)."""
    b = GraphBuilder(name, input_shape, batch_size, dtype, seed)
    x = b.input
    pools = 0
    for index, (channels, kernel, pad, pool) in enumerate(FEATURES, start=1):
        x = b.relu(b.conv(x, channels, kernel, 1, pad, bias=True, name=f"conv{index}"),
                   name=f"relu{index}")
        if pool:
            pools += 1
            x = b.maxpool(x, 3, 2, name=f"pool{pools}")
    x = b.flatten(x)
    x = b.relu(b.gemm(x, hidden, name="fc1"), name="relu6")
    x = b.relu(b.gemm(x, hidden, name="fc2"), name="relu7")
    x = b.gemm(x, classes, name="fc3")
    return b.build(x, doc=f"AlexNet (32×32 adaptation) for input {tuple(input_shape)}, "
                          f"hidden {hidden}, {classes} classes")
