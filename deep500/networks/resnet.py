"""Residual networks (He, Zhang, Ren, Sun, "Deep Residual Learning for Image
Recognition", CVPR 2016).

* CIFAR ResNets (Sec. 4.2), depth 6n+2 (20, 32, 44, 56, 110): a 3×3 convolution with 16
  filters, three stages of n basic blocks with 16, 32 and 64 filters (stride 2 at the
  start of stages 2 and 3), global average pooling and a fully connected layer. Where a
  block changes the shape, the shortcut is a 1×1 projection with batch normalisation
  (option B) instead of the paper's zero padding (option A), which adds 0.9% of the
  parameters of ResNet-20.
* ImageNet ResNets (Table 1), depth 18 and 34 (basic blocks, [2, 2, 2, 2] and
  [3, 4, 6, 3]), 50 and 101 (bottleneck blocks, expansion 4, [3, 4, 6, 3] and
  [3, 4, 23, 3]): a 7×7/2 convolution with 64 filters, 3×3/2 max pooling, four stages
  with 64, 128, 256 and 512 base filters (stride 2 at the start of stages 2–4), global
  average pooling, a fully connected layer; shape-changing shortcuts are 1×1 projections
  (option B), so at 224×224 and 1000 classes the counts are torchvision's (ResNet-50
  25,557,032, ResNet-101 44,549,160 parameters). A bottleneck block that downsamples
  does so in its first 1×1 convolution, as the paper does ("downsampling is performed
  by conv3_1, conv4_1, and conv5_1 with a stride of 2"; the authors' released models):
  3.86 and 7.57 billion multiply-adds at 224×224, Table 1's 3.8 and 7.6. With
  ``stride_in_3x3=True`` the 3×3 convolution takes the stride instead ("ResNet v1.5",
  as torchvision does: the same parameters, 4.09 and 7.80 billion multiply-adds).
  ``width`` scales every convolution's channels (``round(c·width)``, at least 1), for
  fast tests of the same graph at a fraction of the size.

Every convolution is followed by inference-form batch normalisation. Global average
pooling makes any input resolution work, as long as it is not pooled below 1×1.

With identity batch-norm statistics nothing normalises the forward pass, so the
activations' variance roughly doubles per residual block (ResNet-110's logits reach
~1e9 at initialisation). ``zero_init_residual=True`` starts the scale of each block's
last batch normalisation at 0, so that every block is the identity at initialisation
(Goyal et al., "Accurate, Large Minibatch SGD", 2017, Sec. 5.1).
"""
from __future__ import annotations

import onnx

from deep500.networks._builder import GraphBuilder
from deep500.utils.errors import Deep500Error

CIFAR_DEPTHS = (20, 32, 44, 56, 110)
IMAGENET_DEPTHS = {18: ("basic", (2, 2, 2, 2)), 34: ("basic", (3, 4, 6, 3)),
                   50: ("bottleneck", (3, 4, 6, 3)), 101: ("bottleneck", (3, 4, 23, 3))}


def _shortcut(b: GraphBuilder, x: str, channels: int, stride: int, name: str) -> str:
    if stride == 1 and b.channels(x) == channels:
        return x
    return b.conv_bn(x, channels, 1, stride, 0, relu=False, name=f"{name}.downsample")


def basic_block(b: GraphBuilder, x: str, channels: int, stride: int, name: str,
                residual_scale: float = 1.0, stride_in_3x3: bool = False) -> str:
    """relu(BN(conv3×3(relu(BN(conv3×3/stride(x))))) + shortcut(x)); the last BN's scale
    starts at ``residual_scale`` (``stride_in_3x3`` is for the bottleneck block's
    signature: both convolutions here are 3×3 and the first takes the stride)."""
    y = b.conv_bn(x, channels, 3, stride, 1, name=f"{name}.conv1")
    y = b.conv_bn(y, channels, 3, 1, 1, relu=False, name=f"{name}.conv2",
                  bn_scale=residual_scale)
    y = b.add(y, _shortcut(b, x, channels, stride, name), name=f"{name}.add")
    return b.relu(y, name=f"{name}.relu")


def bottleneck_block(b: GraphBuilder, x: str, channels: int, stride: int, name: str,
                     residual_scale: float = 1.0, stride_in_3x3: bool = False) -> str:
    """relu(1×1 (4·channels) ∘ 3×3 (channels) ∘ 1×1/stride (channels) of x + shortcut),
    the stride on the 3×3 convolution instead with ``stride_in_3x3``; the last BN's
    scale starts at ``residual_scale``."""
    first, middle = (1, stride) if stride_in_3x3 else (stride, 1)
    y = b.conv_bn(x, channels, 1, first, 0, name=f"{name}.conv1")
    y = b.conv_bn(y, channels, 3, middle, 1, name=f"{name}.conv2")
    y = b.conv_bn(y, 4 * channels, 1, 1, 0, relu=False, name=f"{name}.conv3",
                  bn_scale=residual_scale)
    y = b.add(y, _shortcut(b, x, 4 * channels, stride, name), name=f"{name}.add")
    return b.relu(y, name=f"{name}.relu")


BLOCKS = {"basic": basic_block, "bottleneck": bottleneck_block}


def _stages(b: GraphBuilder, x: str, block: str, widths, counts, strides,
            zero_init_residual: bool, stride_in_3x3: bool = False) -> str:
    scale = 0.0 if zero_init_residual else 1.0
    for stage, (channels, count, stride) in enumerate(zip(widths, counts, strides), start=1):
        for index in range(count):
            x = BLOCKS[block](b, x, channels, stride if index == 0 else 1,
                              f"layer{stage}.{index}", scale, stride_in_3x3)
    return x


def _head(b: GraphBuilder, x: str, classes: int) -> str:
    return b.gemm(b.flatten(b.global_average_pool(x)), classes, name="fc")


def cifar_resnet(depth: int = 20, input_shape=(3, 32, 32), classes: int = 10, *,
                 batch_size="N", dtype: str = "float32", seed: int = 0,
                 zero_init_residual: bool = False, name: str | None = None
                 ) -> onnx.ModelProto:
    """CIFAR ResNet-``depth`` (depth = 6n + 2) with ``classes`` logits."""
    if depth < 8 or (depth - 2) % 6:
        raise Deep500Error(f"CIFAR ResNet depth must be 6n+2 (e.g. {CIFAR_DEPTHS}), "
                           f"not {depth}")
    n = (depth - 2) // 6
    b = GraphBuilder(name or f"resnet{depth}", input_shape, batch_size, dtype, seed)
    x = b.conv_bn(b.input, 16, 3, 1, 1, name="conv1")
    x = _stages(b, x, "basic", (16, 32, 64), (n, n, n), (1, 2, 2), zero_init_residual)
    return b.build(_head(b, x, classes),
                   doc=f"CIFAR ResNet-{depth} (He et al. 2016), option-B shortcuts")


def imagenet_resnet(depth: int = 18, input_shape=(3, 224, 224), classes: int = 1000, *,
                    width: float = 1.0, stride_in_3x3: bool = False, batch_size="N",
                    dtype: str = "float32", seed: int = 0, zero_init_residual: bool = False,
                    name: str | None = None) -> onnx.ModelProto:
    """ImageNet ResNet-``depth`` (18, 34, 50 or 101) with ``classes`` logits."""
    if depth not in IMAGENET_DEPTHS:
        raise Deep500Error(f"ImageNet ResNet depth must be one of "
                           f"{sorted(IMAGENET_DEPTHS)}, not {depth}")
    if not width > 0:
        raise Deep500Error(f"ResNet width must be positive, not {width!r}")
    block, counts = IMAGENET_DEPTHS[depth]
    stem, *widths = (max(1, round(c * width)) for c in (64, 64, 128, 256, 512))
    b = GraphBuilder(name or f"resnet{depth}", input_shape, batch_size, dtype, seed)
    x = b.conv_bn(b.input, stem, 7, 2, 3, name="conv1")
    x = b.maxpool(x, 3, 2, 1, name="maxpool")
    x = _stages(b, x, block, widths, counts, (1, 2, 2, 2), zero_init_residual,
                stride_in_3x3)
    where = ("; stride in the 3×3 convolutions (v1.5)" if stride_in_3x3
             and block == "bottleneck" else "")
    return b.build(_head(b, x, classes),
                   doc=f"ImageNet ResNet-{depth} (He et al. 2016), {block} blocks"
                       + (f", width {width}" if width != 1 else "") + where)
