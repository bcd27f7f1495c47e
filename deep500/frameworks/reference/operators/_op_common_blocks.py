"""Shared by DepthToSpace and SpaceToDepth: a rearrangement written as reshape, transpose,
reshape, whose gradient is the inverse rearrangement.
https://onnx.ai/onnx/operators/onnx__DepthToSpace.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp
from deep500.utils.errors import ShapeError


class BlockRearrangement(ReferenceOp):
    """Subclasses name the axis ``permutations`` of the modes (DCR, CRD) and implement
    ``split_and_output(n, c, h, w, b, mode)`` -> (split shape, output shape), raising
    where the blocksize does not divide what it must."""
    defaults = {"blocksize": None, "mode": "DCR"}
    permutations: dict = {}

    def split_and_output(self, n, c, h, w, b, mode) -> tuple:
        raise NotImplementedError

    def plan(self, shape) -> tuple:
        """(split shape, permutation, output shape) of the rearrangement."""
        mode = self.attr("mode")
        if mode not in self.permutations:
            raise ShapeError(f"{self.op_type}: mode must be 'DCR' or 'CRD', got {mode!r}")
        split, output = self.split_and_output(*shape, int(self.attr("blocksize")), mode)
        return split, self.permutations[mode], output

    def checked_shape(self, x) -> tuple:
        shape, b = np.shape(x), int(self.attr("blocksize"))
        if len(shape) != 4:
            raise ShapeError(f"{self.op_type}: the input must be 4-D (N, C, H, W), got shape "
                             f"{shape}")
        if b < 1:
            raise ShapeError(f"{self.op_type}: blocksize must be positive, got {b}")
        return shape

    def forward(self, input):
        input = np.asarray(input)
        split, permutation, output = self.plan(self.checked_shape(input))
        return input.reshape(split).transpose(permutation).reshape(output)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        input = np.asarray(fwd_inputs[0])
        if grads[0] is None or not np.issubdtype(input.dtype, np.floating):
            return [np.zeros_like(input)]
        split, permutation, _ = self.plan(input.shape)
        transposed = [split[p] for p in permutation]
        dX = np.asarray(grads[0]).reshape(transposed).transpose(np.argsort(permutation))
        return [dX.reshape(input.shape)]
