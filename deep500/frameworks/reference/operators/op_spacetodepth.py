"""SpaceToDepth: moves blocks of blocksize x blocksize spatial positions into the
channels, (N, C, H, W) -> (N, C·b², H/b, W/b), the new channels ordered depth-column-row
(DCR, default) or column-row-depth (CRD); the inverse of DepthToSpace in the same mode.
https://onnx.ai/onnx/operators/onnx__SpaceToDepth.html"""
from deep500.frameworks.reference.operators._op_common_blocks import BlockRearrangement
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import ShapeError


@register("SpaceToDepth")
class SpaceToDepth(BlockRearrangement):
    permutations = {"DCR": (0, 3, 5, 1, 2, 4), "CRD": (0, 1, 3, 5, 2, 4)}

    def split_and_output(self, n, c, h, w, b, mode):
        if h % b or w % b:
            raise ShapeError(f"{self.op_type}: height ({h}) and width ({w}) must be "
                             f"divisible by blocksize ({b})")
        return (n, c, h // b, b, w // b, b), (n, c * b * b, h // b, w // b)
