"""VGG-11, configuration A of Simonyan & Zisserman, "Very Deep Convolutional Networks for
Large-Scale Image Recognition", ICLR 2015 (Table 1), in torchvision's layout, adapted to
CIFAR-sized 32×32 inputs.

torchvision ``vgg11``: Conv 3×3 pad 1 + Relu with 64, M, 128, M, 256, 256, M, 512, 512,
M, 512, 512, M channels (M = MaxPool 2×2/2) → AdaptiveAvgPool 7×7 → Dropout → Gemm 4096 →
Relu → Dropout → Gemm 4096 → Relu → Gemm (classes). No batch normalisation (that is
``vgg11_bn``).

Adapted here, and only here:

* the 7×7 adaptive average pool is left out (it is not an ONNX operator, and a 32×32
  input is pooled five times to 1×1), so the first classifier layer takes 512·h·w
  inputs (512 for 32×32 instead of 25,088 for 224×224);
* the dropout layers are left out (the zoo's models are deterministic);
* the two hidden classifier layers have ``hidden`` units (4,096 as torchvision).

Convolutions have biases; initial weights as :mod:`deep500.networks._builder` draws them.
"""
from __future__ import annotations

import onnx

from deep500.networks._builder import GraphBuilder

CONFIG_A = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


def vgg_features(b: GraphBuilder, x, config, width: float = 1.0):
    """A VGG configuration's convolutions (3×3, stride 1, pad 1, with biases, each
    followed by ReLU; ``round(c·width)`` channels, at least 1) and 2×2/2 max pools
    ("M"), named conv1.., relu1.., pool1.."""
    convs = pools = 0
    for layer in config:
        if layer == "M":
            pools += 1
            x = b.maxpool(x, 2, 2, name=f"pool{pools}")
        else:
            convs += 1
            x = b.relu(b.conv(x, max(1, round(layer * width)), 3, 1, 1, bias=True,
                              name=f"conv{convs}"), name=f"relu{convs}")
    return x


def vgg_classifier(b: GraphBuilder, x, hidden: int, classes: int):
    """Flatten → FC ``hidden`` → ReLU → FC ``hidden`` → ReLU → FC ``classes``."""
    x = b.flatten(x)
    x = b.relu(b.gemm(x, hidden, name="fc1"), name="fc1.relu")
    x = b.relu(b.gemm(x, hidden, name="fc2"), name="fc2.relu")
    return b.gemm(x, classes, name="fc3")


def vgg11(input_shape=(3, 32, 32), classes: int = 10, hidden: int = 4096, *,
          batch_size="N", dtype: str = "float32", seed: int = 0,
          name: str = "vgg11") -> onnx.ModelProto:
    """VGG-11 for a (batch, C, H, W) input (32×32 by default; see the module)."""
    b = GraphBuilder(name, input_shape, batch_size, dtype, seed)
    x = vgg_classifier(b, vgg_features(b, b.input, CONFIG_A), hidden, classes)
    return b.build(x, doc=f"VGG-11 (32×32 adaptation) for input {tuple(input_shape)}, "
                          f"hidden {hidden}, {classes} classes")
