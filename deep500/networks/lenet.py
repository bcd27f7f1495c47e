"""LeNet-5 style convolutional network (LeCun et al., "Gradient-based learning applied to
document recognition", Proc. IEEE 1998), with ReLU and max pooling as commonly used:

Conv 5×5 (6) → Relu → MaxPool 2×2 → Conv 5×5 (16) → Relu → MaxPool 2×2 → Flatten →
Gemm (120) → Relu → Gemm (84) → Relu → Gemm (classes).

LeNet-5 sees 28×28 maps after its first convolution and 10×10 after its second (on a
32×32 input). A convolution whose unpadded output would be smaller than that is padded
by 2 ("same" size) instead, so 1×28×28 MNIST follows the usual padded first layer,
3×32×32 CIFAR the original, and 1×8×8 digits stays valid (8 → 4 → 2).
"""
from __future__ import annotations

import onnx

from deep500.networks._builder import GraphBuilder

_LENET_MAPS = (28, 10)  # LeNet-5's feature map sizes after C1 and C3


def _pad_for(size: int, target: int) -> int:
    return 0 if size - 4 >= target else 2


def lenet(input_shape=(1, 28, 28), classes: int = 10, *, batch_size="N",
          dtype: str = "float32", seed: int = 0, name: str = "lenet") -> onnx.ModelProto:
    """LeNet-5 on a (batch, C, H, W) input with ``classes`` logits."""
    b = GraphBuilder(name, input_shape, batch_size, dtype, seed)
    x = b.input
    for index, (channels, target) in enumerate(zip((6, 16), _LENET_MAPS), start=1):
        _, height, width = b.shapes[x]
        pad = (_pad_for(height, target), _pad_for(width, target))
        x = b.conv(x, channels, 5, 1, pad, bias=True, name=f"conv{index}")
        x = b.maxpool(b.relu(x, name=f"relu{index}"), 2, name=f"pool{index}")
    x = b.flatten(x)
    x = b.relu(b.gemm(x, 120, name="fc1"), name="relu3")
    x = b.relu(b.gemm(x, 84, name="fc2"), name="relu4")
    x = b.gemm(x, classes, name="fc3")
    return b.build(x, doc=f"LeNet-5 for input {tuple(input_shape)}, {classes} classes")
