"""DenseNet-BC (Huang, Liu, van der Maaten, Weinberger, "Densely Connected Convolutional
Networks", CVPR 2017, Sec. 3 and Table 1), DenseNet-121 by default, for ImageNet inputs.

* Stem: 7×7/2 convolution with 2k filters (k = ``growth``, 32), BN, ReLU, 3×3/2 max
  pooling.
* Four dense blocks of 6, 12, 24 and 16 layers (``blocks``). A layer is the bottleneck
  BN → ReLU → 1×1 convolution (4k filters, ``bn_size`` = 4) → BN → ReLU → 3×3
  convolution (k filters, pad 1), and its k new maps are concatenated (``Concat`` on the
  channel axis) to everything before them in the block.
* Between blocks a transition layer with compression θ = 0.5: BN → ReLU → 1×1
  convolution to ⌊θ·m⌋ of its m maps → 2×2/2 average pooling.
* After the last block BN → ReLU → global average pooling → fully connected layer.

Convolutions have no biases (each is followed by batch normalisation). At 224×224 with
1000 classes this is torchvision's ``densenet121`` layer for layer: 7,978,856
parameters (1024 maps reach the classifier). Dropout is not included (the paper uses it
only without data augmentation, on CIFAR). Global average pooling takes any input size
whose maps survive the stem and the three transitions (32×32 leaves 1×1 maps at the
last block). ``growth`` (with the stem's 2k filters following it unless
``init_features`` says otherwise) shrinks the model for fast tests.
"""
from __future__ import annotations

import onnx

from deep500.networks._builder import GraphBuilder
from deep500.utils.errors import Deep500Error

DENSENET121_BLOCKS = (6, 12, 24, 16)


def dense_layer(b: GraphBuilder, x: str, growth: int, bn_size: int, name: str) -> str:
    """x with the k = ``growth`` maps of BN-ReLU-Conv1×1(bn_size·k)-BN-ReLU-Conv3×3(k)
    of x concatenated after it."""
    y = b.conv(b.bn_relu(x, f"{name}.norm1"), bn_size * growth, 1, name=f"{name}.conv1")
    y = b.conv(b.bn_relu(y, f"{name}.norm2"), growth, 3, 1, 1, name=f"{name}.conv2")
    return b.concat([x, y], name=f"{name}.concat")


def transition(b: GraphBuilder, x: str, channels: int, name: str) -> str:
    """BN → ReLU → 1×1 convolution to ``channels`` maps → 2×2/2 average pooling."""
    y = b.conv(b.bn_relu(x, f"{name}.norm"), channels, 1, name=f"{name}.conv")
    return b.average_pool(y, 2, 2, name=f"{name}.pool")


def densenet(input_shape=(3, 224, 224), classes: int = 1000, growth: int = 32,
             blocks=DENSENET121_BLOCKS, bn_size: int = 4, compression: float = 0.5,
             init_features: int | None = None, *, batch_size="N", dtype: str = "float32",
             seed: int = 0, name: str = "densenet121") -> onnx.ModelProto:
    """DenseNet-BC with ``blocks`` layers per dense block (DenseNet-121 by default)."""
    blocks = tuple(int(n) for n in blocks)
    if not blocks or min(blocks) < 1:
        raise Deep500Error(f"DenseNet blocks must be positive layer counts, e.g. "
                           f"{DENSENET121_BLOCKS}, not {blocks}")
    if growth < 1 or bn_size < 1:
        raise Deep500Error(f"DenseNet growth and bn_size must be at least 1, not "
                           f"{growth} and {bn_size}")
    if not 0 < compression <= 1:
        raise Deep500Error(f"DenseNet compression must be in (0, 1], not {compression}")
    b = GraphBuilder(name, input_shape, batch_size, dtype, seed)
    x = b.conv(b.input, init_features or 2 * growth, 7, 2, 3, name="conv0")
    x = b.maxpool(b.bn_relu(x, "norm0"), 3, 2, 1, name="pool0")
    for index, layers in enumerate(blocks, start=1):
        for layer in range(1, layers + 1):
            x = dense_layer(b, x, growth, bn_size, f"denseblock{index}.layer{layer}")
        if index < len(blocks):
            x = transition(b, x, max(1, int(compression * b.channels(x))),
                           f"transition{index}")
    x = b.global_average_pool(b.bn_relu(x, "norm5"))
    x = b.gemm(b.flatten(x), classes, name="fc")
    return b.build(x, doc=f"DenseNet-BC (Huang et al. 2017), blocks {list(blocks)}, growth "
                          f"{growth}, compression {compression}, for input "
                          f"{tuple(input_shape)}, {classes} classes")
