"""Col2Im: rearrange column blocks (N, C·∏block_shape, L) back into a multidimensional
image (N, C, *image_shape), summing where blocks overlap — the adjoint of the im2col
that strided, dilated, padded sliding blocks of that image would give.
https://onnx.ai/onnx/operators/onnx__Col2Im.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_im2col import (col2im, im2col,
                                                                       pad_spatial,
                                                                       window_geometry)
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Col2Im")
class Col2Im(ReferenceOp):
    defaults = {"dilations": None, "pads": None, "strides": None}

    def _geometry(self, cols, image_shape, block_shape):
        image_shape = [int(v) for v in np.asarray(image_shape).ravel()]
        block_shape = [int(v) for v in np.asarray(block_shape).ravel()]
        if len(image_shape) != len(block_shape) or not image_shape:
            raise ShapeError(f"Col2Im: image_shape {image_shape} and block_shape "
                             f"{block_shape} must have the same, non-zero length")
        if cols.ndim != 3:
            raise ShapeError(f"Col2Im: input must be 3-D (N, C·prod(block_shape), L), got "
                             f"shape {list(cols.shape)}")
        K = int(np.prod(block_shape))
        if cols.shape[1] % K:
            raise ShapeError(f"Col2Im: input axis 1 ({cols.shape[1]}) must be a multiple of "
                             f"prod(block_shape)={K}")
        geometry = window_geometry("Col2Im", image_shape, block_shape,
                                   strides=self.attr("strides"),
                                   dilations=self.attr("dilations"), pads=self.attr("pads"))
        blocks = int(np.prod(geometry.output))
        if cols.shape[2] != blocks:
            raise ShapeError(f"Col2Im: input has {cols.shape[2]} blocks (axis 2); image_shape "
                             f"{image_shape}, block_shape {block_shape} and the strides, "
                             f"dilations and pads give {blocks} ({list(geometry.output)})")
        return geometry, K

    def forward(self, input, image_shape, block_shape):
        cols = np.asarray(input)
        geometry, K = self._geometry(cols, image_shape, block_shape)
        N, C = cols.shape[0], cols.shape[1] // K
        return col2im(cols.reshape((N, C, K) + geometry.output), geometry)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        cols = np.asarray(fwd_inputs[0])
        if not np.issubdtype(cols.dtype, np.floating):
            return [None, None, None]
        geometry, _ = self._geometry(cols, fwd_inputs[1], fwd_inputs[2])
        dcols = im2col(pad_spatial(grads[0], geometry), geometry)
        return [dcols.reshape(cols.shape), None, None]
