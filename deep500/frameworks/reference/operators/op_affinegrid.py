"""AffineGrid: the sampling grid of a batch of affine transforms, as GridSample reads it.
For theta (N, 2, 3) and size (N, C, H, W) the grid is (N, H, W, 2) with
grid[n, h, w] = theta[n] · (x_w, y_h, 1); for theta (N, 3, 4) and size (N, C, D, H, W) it
is (N, D, H, W, 3) with theta[n] · (x_w, y_h, z_d, 1). The base coordinates of an axis of
length L are -1 + (2i + 1) / L (the centres of L cells spanning [-1, 1]), or with
``align_corners`` -1 + 2i / (L - 1) (the corners). For L = 1 with ``align_corners``
the spec is silent and implementations differ (PyTorch's affine_grid 0, onnx's
reference -1, onnxruntime 1.32 +1): the single cell's centre, 0, as PyTorch. Backward: the grid is linear in theta, so dtheta[n] = Σ dgrid · base^T.
https://onnx.ai/onnx/operators/onnx__AffineGrid.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


def _axis_coordinates(length: int, align_corners: bool, dtype) -> np.ndarray:
    i = np.arange(length, dtype=np.float64)
    if align_corners:
        coordinates = -1 + 2 * i / (length - 1) if length > 1 else np.zeros(1)
    else:
        coordinates = -1 + (2 * i + 1) / length
    return coordinates.astype(dtype)


@register("AffineGrid")
class AffineGrid(ReferenceOp):
    defaults = {"align_corners": 0}

    def _base(self, theta, size) -> tuple[np.ndarray, tuple]:
        """The homogeneous base coordinates (points, spatial rank + 1) and the spatial
        shape (D, H, W or H, W)."""
        theta = np.asarray(theta)
        size = [int(v) for v in np.asarray(size).reshape(-1)]
        if theta.ndim != 3 or theta.shape[1:] not in ((2, 3), (3, 4)):
            raise ShapeError(f"AffineGrid: theta must have shape (N, 2, 3) or (N, 3, 4), "
                             f"got {theta.shape}")
        spatial_rank = theta.shape[1]
        if len(size) != spatial_rank + 2:
            raise ShapeError(f"AffineGrid: size {size} must have {spatial_rank + 2} values "
                             f"(N, C and {spatial_rank} spatial extents) for theta of shape "
                             f"{theta.shape}")
        if size[0] != theta.shape[0]:
            raise ShapeError(f"AffineGrid: size's N ({size[0]}) differs from theta's "
                             f"({theta.shape[0]})")
        spatial = tuple(size[2:])
        if any(n < 1 for n in spatial):
            raise ShapeError(f"AffineGrid: spatial extents {list(spatial)} must be >= 1")
        align = bool(self.attr("align_corners"))
        axes = [_axis_coordinates(n, align, theta.dtype) for n in spatial]
        # meshgrid over (D,) H, W; the point's coordinates in (x, y[, z]) order: W first.
        mesh = np.meshgrid(*axes, indexing="ij")
        columns = [m.reshape(-1) for m in reversed(mesh)]
        columns.append(np.ones(columns[0].shape, theta.dtype))
        return np.stack(columns, axis=1), spatial

    def forward(self, theta, size):
        theta = np.asarray(theta)
        base, spatial = self._base(theta, size)
        grid = np.matmul(base, theta.swapaxes(1, 2))      # (N, points, spatial rank)
        return grid.reshape((theta.shape[0],) + spatial + (theta.shape[1],))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        theta = np.asarray(fwd_inputs[0])
        if grads[0] is None or not np.issubdtype(theta.dtype, np.floating):
            return [None, None]
        base, _ = self._base(theta, fwd_inputs[1])
        dgrid = np.asarray(grads[0]).reshape(theta.shape[0], -1, theta.shape[1])
        return [np.matmul(dgrid.swapaxes(1, 2), base).astype(theta.dtype, copy=False), None]
