"""DepthToSpace: moves blocks of blocksize x blocksize channels into the spatial
dimensions, (N, C, H, W) -> (N, C/b², H·b, W·b), channels read depth-column-row (DCR,
default) or column-row-depth (CRD). https://onnx.ai/onnx/operators/onnx__DepthToSpace.html"""
from deep500.frameworks.reference.operators._op_common_blocks import BlockRearrangement
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import ShapeError


@register("DepthToSpace")
class DepthToSpace(BlockRearrangement):
    permutations = {"DCR": (0, 3, 4, 1, 5, 2), "CRD": (0, 1, 4, 2, 5, 3)}

    def split_and_output(self, n, c, h, w, b, mode):
        if c % (b * b):
            raise ShapeError(f"{self.op_type}: channels ({c}) must be divisible by "
                             f"blocksize² ({b * b})")
        depth = c // (b * b)
        split = (n, b, b, depth, h, w) if mode == "DCR" else (n, depth, b, b, h, w)
        return split, (n, depth, h * b, w * b)
