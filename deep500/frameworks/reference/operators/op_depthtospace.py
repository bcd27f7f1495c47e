"""DepthToSpace: moves blocks of blocksize x blocksize channels into the spatial
dimensions, (N, C, H, W) -> (N, C/b², H·b, W·b), channels read depth-column-row (DCR,
default) or column-row-depth (CRD). https://onnx.ai/onnx/operators/onnx__DepthToSpace.html"""
from deep500.frameworks.reference.operators._op_common_blocks import BlockRearrangement
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import ShapeError


@register("DepthToSpace")
class DepthToSpace(BlockRearrangement):
    defaults = {"blocksize": None, "mode": "DCR"}

    def plan(self, shape):
        n, c, h, w = shape
        b, mode = int(self.attr("blocksize")), self.attr("mode")
        if c % (b * b):
            raise ShapeError(f"{self.op_type}: channels ({c}) must be divisible by "
                             f"blocksize² ({b * b})")
        output = (n, c // (b * b), h * b, w * b)
        if mode == "DCR":
            return (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2), output
        if mode == "CRD":
            return (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3), output
        raise ShapeError(f"{self.op_type}: mode must be 'DCR' or 'CRD', got {mode!r}")
