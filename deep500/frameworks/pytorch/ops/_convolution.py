"""ONNX's convolution as one torch call, for the conv family (Conv) and the quantization
family (ConvInteger, QLinearConv, which convolve shifted integers): the spatial rank,
strides, dilations, groups and pads (explicit, or auto_pad SAME from the input's shape)
read once from the node. https://onnx.ai/onnx/operators/onnx__Conv.html
"""
from __future__ import annotations

from deep500.frameworks.pytorch._torch_common import torch_pads
from deep500.frameworks.pytorch.ops._window import onnx_pads, spatial_rank
from deep500.utils.errors import require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional

_CONV = {1: torch.conv1d, 2: torch.conv2d, 3: torch.conv3d}


def convolution(visitor, op, weight: str):
    """``fn(x, w, b=None)``: the convolution of node ``op`` (of ``visitor``), whose
    weight is the tensor named ``weight``."""
    a = op.attributes
    rank = spatial_rank(visitor, op, weight)
    if rank not in _CONV:
        raise visitor.node_error(op, f"{rank}-D convolution is not supported (1-D to 3-D "
                                 f"are)")
    conv = _CONV[rank]
    strides = tuple(a.get("strides") or [1] * rank)
    dilations = tuple(a.get("dilations") or [1] * rank)
    group = a.get("group") or 1
    kernel = a.get("kernel_shape") or (visitor._shape(weight) or [None] * (rank + 2))[2:]
    pads, pads_of = onnx_pads(visitor, op, rank, kernel, strides, dilations)
    if pads_of is not None:
        if None in kernel:
            raise visitor.node_error(op, "auto_pad SAME needs the kernel shape: give "
                                     "kernel_shape or a W of known shape")

        def conv_same(x, w, b=None):
            explicit = torch_pads(pads_of(x.shape[2:]))
            return conv(F.pad(x, explicit), w, b, strides, 0, dilations, group)
        return conv_same
    if pads[:rank] == pads[rank:]:
        padding = tuple(pads[:rank])
        return lambda x, w, b=None: conv(x, w, b, strides, padding, dilations, group)
    explicit = torch_pads(pads)
    return lambda x, w, b=None: conv(F.pad(x, explicit), w, b, strides, 0, dilations, group)


__all__ = ["convolution"]
