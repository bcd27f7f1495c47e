"""Window geometry that the conv and pooling families read alike: the number of spatial
dimensions of a node and its ONNX pads, resolved by
``deep500.utils.onnx_interop.window`` (https://onnx.ai/onnx/operators/onnx__Conv.html).
"""
from __future__ import annotations

from deep500.utils.onnx_interop.window import resolve_pads


def spatial_rank(visitor, op, kernel_name=None) -> int:
    """Spatial dimensions of a conv/pool node: from kernel_shape, W or X."""
    kernel = op.attributes.get("kernel_shape")
    if kernel:
        return len(kernel)
    for name in (kernel_name, op.inputs[0]):
        rank = visitor._rank(name) if name else None
        if rank is not None:
            return rank - 2
    raise visitor.node_error(op, "the number of spatial dimensions is unknown (no "
                             "kernel_shape, and neither W nor X has a known rank); "
                             "give kernel_shape or run ONNX shape inference on the "
                             "model")


def onnx_pads(visitor, op, rank, kernel, strides, dilations):
    """(static ONNX pads [begin..., end...], or a function of the input's spatial shape
    giving them): :func:`deep500.utils.onnx_interop.window.resolve_pads`."""
    auto_pad = op.attributes.get("auto_pad") or "NOTSET"

    def pads_of(spatial):
        begin, end = resolve_pads(op.op_type, spatial, kernel, strides=strides,
                                  dilations=dilations, pads=op.attributes.get("pads"),
                                  auto_pad=auto_pad)
        return list(begin) + list(end)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        return pads_of([None] * rank), None
    x_shape = visitor._shape(op.inputs[0])
    if x_shape is not None:
        return pads_of(x_shape[2:]), None
    return None, pads_of


__all__ = ["onnx_pads", "spatial_rank"]
