"""Wide residual networks WRN-d-k (Zagoruyko and Komodakis, "Wide Residual Networks",
BMVC 2016, Table 1), for CIFAR-sized inputs.

A 3×3 convolution with 16 filters, three groups of n = (d − 4) / 6 pre-activation blocks
B(3,3) with 16k, 32k and 64k filters (stride 2 at the start of groups 2 and 3), then
BN → ReLU → global average pooling → fully connected layer. A block computes
o = relu(BN(x)), y = conv3×3(relu(BN(conv3×3/stride(o)))), and returns y + x, or
y + conv1×1/stride(o) where the shape changes (as the authors' code does). Dropout
between the convolutions is not included (the paper's main results are without it).
"""
from __future__ import annotations

import onnx

from deep500.networks._builder import GraphBuilder
from deep500.utils.errors import Deep500Error


def preact_block(b: GraphBuilder, x: str, channels: int, stride: int, name: str) -> str:
    """Pre-activation basic block B(3,3) of a wide ResNet."""
    o = b.bn_relu(x, f"{name}.preact")
    y = b.conv(o, channels, 3, stride, 1, name=f"{name}.conv1")
    y = b.bn_relu(y, f"{name}.mid")
    y = b.conv(y, channels, 3, 1, 1, name=f"{name}.conv2")
    if stride == 1 and b.channels(x) == channels:
        shortcut = x
    else:
        shortcut = b.conv(o, channels, 1, stride, 0, name=f"{name}.shortcut")
    return b.add(y, shortcut, name=f"{name}.add")


def wide_resnet(depth: int = 16, width: int = 4, input_shape=(3, 32, 32),
                classes: int = 10, *, batch_size="N", dtype: str = "float32",
                seed: int = 0, name: str | None = None) -> onnx.ModelProto:
    """WRN-``depth``-``width`` (depth = 6n + 4) with ``classes`` logits."""
    if depth < 10 or (depth - 4) % 6:
        raise Deep500Error(f"wide ResNet depth must be 6n+4 (e.g. 16, 28, 40), not {depth}")
    if width < 1:
        raise Deep500Error(f"wide ResNet width factor must be at least 1, not {width}")
    n = (depth - 4) // 6
    b = GraphBuilder(name or f"wrn{depth}_{width}", input_shape, batch_size, dtype, seed)
    x = b.conv(b.input, 16, 3, 1, 1, name="conv1")
    for group, (channels, stride) in enumerate(
            zip((16 * width, 32 * width, 64 * width), (1, 2, 2)), start=1):
        for index in range(n):
            x = preact_block(b, x, channels, stride if index == 0 else 1,
                             f"group{group}.{index}")
    x = b.bn_relu(x, "final")
    x = b.gemm(b.flatten(b.global_average_pool(x)), classes, name="fc")
    return b.build(x, doc=f"WRN-{depth}-{width} (Zagoruyko & Komodakis 2016)")
