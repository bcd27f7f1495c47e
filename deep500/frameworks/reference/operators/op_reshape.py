"""Reshape: the data with the shape given by the int64 ``shape`` input, where 0 copies the
input's dimension (unless allowzero=1) and one -1 is inferred.
https://onnx.ai/onnx/operators/onnx__Reshape.html"""
import math

import numpy as np

from deep500.frameworks.reference.operators._op_common_reshape import ShapeChange
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import ShapeError


@register("Reshape")
class Reshape(ShapeChange):
    defaults = {"allowzero": 0}

    def output_shape(self, data_shape: tuple, shape) -> tuple:
        """The output shape that ``shape`` (the second input) gives an input of
        ``data_shape``."""
        requested = [int(d) for d in np.asarray(shape, dtype=np.int64).reshape(-1)]
        where = f"{self.op_type} of shape {tuple(data_shape)} to {requested}"
        if requested.count(-1) > 1:
            raise ShapeError(f"{where}: at most one dimension can be -1")
        if any(d < -1 for d in requested):
            raise ShapeError(f"{where}: dimensions must be >= -1")
        if self.attr("allowzero"):
            if 0 in requested and -1 in requested:
                raise ShapeError(f"{where}: with allowzero=1 the shape cannot contain both "
                                 f"0 and -1")
        else:
            for i, d in enumerate(requested):
                if d == 0:
                    if i >= len(data_shape):
                        raise ShapeError(f"{where}: 0 at position {i} copies a dimension the "
                                         f"input does not have")
                    requested[i] = data_shape[i]
        size = math.prod(data_shape)
        if -1 in requested:
            known = math.prod(d for d in requested if d != -1)
            if known == 0 or size % known:
                raise ShapeError(f"{where}: {size} elements cannot fill the -1 dimension")
            requested[requested.index(-1)] = size // known
        if math.prod(requested) != size:
            raise ShapeError(f"{where}: {size} elements cannot take a shape of "
                             f"{math.prod(requested)} elements")
        return tuple(requested)
