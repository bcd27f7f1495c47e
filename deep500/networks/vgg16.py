"""VGG-16, configuration D of Simonyan & Zisserman, "Very Deep Convolutional Networks for
Large-Scale Image Recognition", ICLR 2015 (Table 1), as the paper gives it for 224×224
ImageNet inputs.

Thirteen 3×3 convolutions (stride 1, pad 1, with biases), each followed by ReLU, with
64, 64, M, 128, 128, M, 256, 256, 256, M, 512, 512, 512, M, 512, 512, 512, M channels
(M = MaxPool 2×2/2), then Flatten → FC 4096 → ReLU → FC 4096 → ReLU → FC (classes).
At 224×224 the last pool leaves 7×7 maps, so the first classifier layer takes
512·7·7 = 25,088 inputs and the model has torchvision ``vgg16``'s 138,357,544
parameters (its 7×7 adaptive average pool is the identity at this size).

Left out, and only this:

* dropout (the zoo's models are deterministic);
* the softmax (``output`` is the logits; ``loss=`` attaches one).

Other input sizes are taken as they are (no adaptive pooling, which is not an ONNX
operator): the first classifier layer takes 512·h·w inputs of the h×w maps the last
pool leaves (512 for 32×32). For fast tests ``width`` scales every convolution's
channels (``round(c·width)``, at least 1) and ``hidden`` sets the two hidden classifier
layers' units (4,096 in the paper). Initial weights as :mod:`deep500.networks._builder`
draws them (convolution biases 0).
"""
from __future__ import annotations

import onnx

from deep500.networks._builder import GraphBuilder
from deep500.networks.vgg11 import vgg_classifier, vgg_features
from deep500.utils.errors import Deep500Error

CONFIG_D = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
            512, 512, 512, "M")


def vgg16(input_shape=(3, 224, 224), classes: int = 1000, hidden: int = 4096,
          width: float = 1.0, *, batch_size="N", dtype: str = "float32", seed: int = 0,
          name: str = "vgg16") -> onnx.ModelProto:
    """VGG-16 (configuration D) for a (batch, C, H, W) input; see the module."""
    if not width > 0:
        raise Deep500Error(f"VGG-16 width must be positive, not {width!r}")
    b = GraphBuilder(name, input_shape, batch_size, dtype, seed)
    x = vgg_classifier(b, vgg_features(b, b.input, CONFIG_D, width), hidden, classes)
    return b.build(x, doc=f"VGG-16 (Simonyan & Zisserman 2015, configuration D) for input "
                          f"{tuple(input_shape)}, width {width}, hidden {hidden}, "
                          f"{classes} classes")
