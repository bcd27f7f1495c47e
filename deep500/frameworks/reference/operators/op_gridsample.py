"""GridSample: Y[n, c, *o] = X[n, c] sampled at grid[n, *o] (normalised coordinates in
[-1, 1], last axis ordered x, y[, z], i.e. the spatial axes reversed), by nearest,
(multi-)linear or (multi-)cubic (Keys, a = -0.75) interpolation, with padding modes
zeros, border and reflection, for 2-D and 3-D (any spatial rank) inputs. Backward: with
respect to X, and to grid for linear and cubic modes (nearest is piecewise constant).
https://onnx.ai/onnx/operators/onnx__GridSample.html"""
import itertools

import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError, UnsupportedError

MODES = {"nearest": "nearest", "linear": "linear", "cubic": "cubic",
         "bilinear": "linear", "bicubic": "cubic"}   # opset 16 names
PADDING_MODES = ("zeros", "border", "reflection")
_A = -0.75


def _reflect(x, low, high):
    """x reflected by the near border until it lies in [low, high], and d(result)/dx."""
    span = high - low
    below, above = x < low, x > high
    distance = np.where(below, low - x, np.where(above, x - high, 0))
    flips = np.floor(distance / span) if span > 0 else np.zeros_like(distance)
    rest = distance - flips * span
    even = flips % 2 == 0
    from_low = np.where(even, low + rest, high - rest)
    from_high = np.where(even, high - rest, low + rest)
    result = np.where(below, from_low, np.where(above, from_high, x))
    slope = np.where(below | above, np.where(even, -1.0, 1.0), 1.0)
    return result, slope


def _keys(d):
    d = np.abs(d)
    return np.where(d <= 1, ((_A + 2) * d - (_A + 3)) * d * d + 1,
                    np.where(d < 2, (((d - 5) * d + 8) * d - 4) * _A, 0.0))


def _keys_slope(d):
    """d/dd of the Keys kernel at d >= 0."""
    return np.where(d <= 1, (3 * (_A + 2) * d - 2 * (_A + 3)) * d,
                    np.where(d < 2, _A * ((3 * d - 10) * d + 8), 0.0))


@register("GridSample")
class GridSample(ReferenceOp):
    defaults = {"align_corners": 0, "mode": "linear", "padding_mode": "zeros"}

    def _settings(self, X, grid):
        mode = self.attr("mode")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        padding = self.attr("padding_mode")
        padding = padding.decode() if isinstance(padding, bytes) else padding
        if mode not in MODES:
            raise UnsupportedError(f"GridSample: mode={mode!r} is not one of {sorted(MODES)}")
        if padding not in PADDING_MODES:
            raise UnsupportedError(f"GridSample: padding_mode={padding!r} is not one of "
                                   f"{PADDING_MODES}")
        if X.ndim < 3:
            raise ShapeError(f"GridSample: X must be (N, C, *spatial), got shape "
                             f"{list(X.shape)}")
        rank = X.ndim - 2
        if grid.ndim != X.ndim or grid.shape[0] != X.shape[0] or grid.shape[-1] != rank:
            raise ShapeError(f"GridSample: grid must have shape (N={X.shape[0]}, "
                             f"*output_spatial ({rank} axes), {rank}), got "
                             f"{list(grid.shape)} for X of shape {list(X.shape)}")
        if not np.issubdtype(grid.dtype, np.floating):
            raise ShapeError(f"GridSample: grid must be floating-point, got {grid.dtype}")
        return MODES[mode], padding, bool(self.attr("align_corners"))

    def _taps(self, X, grid):
        """Per spatial axis, a list of (index, weight, d weight / d grid) taps, each an
        array shaped like the output positions (N, *O); weight 0 for taps that read
        zero padding."""
        mode, padding, align = self._settings(X, grid)
        rank = X.ndim - 2
        axes = []
        for axis in range(rank):
            size = X.shape[2 + axis]
            g = grid[..., rank - 1 - axis]
            scale = (size - 1) / 2 if align else size / 2
            x = ((g + 1) * (size - 1) / 2 if align else ((g + 1) * size - 1) / 2)
            x = np.asarray(x, np.float64)
            slope = np.full(x.shape, scale)
            low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
            if mode == "nearest":
                x = np.rint(x)
            outside = (x < low) | (x > high)
            if padding == "border":
                slope = np.where(outside, 0.0, slope)
                x = np.where(outside, np.clip(x, 0, size - 1), x)
            elif padding == "reflection":
                reflected, flip = _reflect(x, low, high)
                slope = slope * flip
                x = reflected
            if mode == "nearest":
                offsets, base = [0], np.trunc(x)
                weights = [np.ones_like(x)]
                slopes = [np.zeros_like(x)]
            else:
                base = np.floor(x)
                t = x - base
                if mode == "linear":
                    offsets, weights, slopes = [0, 1], [1 - t, t], [-np.ones_like(t),
                                                                   np.ones_like(t)]
                else:
                    offsets = [-1, 0, 1, 2]
                    weights = [_keys(t + 1), _keys(t), _keys(1 - t), _keys(2 - t)]
                    slopes = [_keys_slope(t + 1), _keys_slope(t), -_keys_slope(1 - t),
                              -_keys_slope(2 - t)]
            taps = []
            for offset, w, dw in zip(offsets, weights, slopes):
                index = base + offset
                if padding == "zeros":
                    valid = (index >= 0) & (index < size)
                    w, dw = np.where(valid, w, 0.0), np.where(valid, dw, 0.0)
                    index = np.clip(index, 0, size - 1)
                elif padding == "border":
                    index = np.clip(index, 0, size - 1)
                else:
                    index = np.trunc(_reflect(index, low, high)[0])
                taps.append((index.astype(np.int64), w, dw * slope))
            axes.append(taps)
        return axes

    def forward(self, X, grid):
        X, grid = np.asarray(X), np.asarray(grid)
        axes = self._taps(X, grid)
        out_spatial = grid.shape[1:-1]
        n = np.arange(X.shape[0]).reshape((-1,) + (1,) * len(out_spatial))
        Y = np.zeros((X.shape[0],) + out_spatial + (X.shape[1],))
        for combo in itertools.product(*axes):
            weight = np.prod([w for _, w, _ in combo], axis=0)
            values = X[(n, slice(None)) + tuple(i for i, _, _ in combo)]   # (N, *O, C)
            Y += weight[..., None] * values
        return np.ascontiguousarray(np.moveaxis(Y, -1, 1).astype(X.dtype))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        X, grid = np.asarray(fwd_inputs[0]), np.asarray(fwd_inputs[1])
        axes = self._taps(X, grid)
        out_spatial = grid.shape[1:-1]
        rank = X.ndim - 2
        n = np.arange(X.shape[0]).reshape((-1,) + (1,) * len(out_spatial))
        dY = np.moveaxis(np.asarray(grads[0], np.float64), 1, -1)      # (N, *O, C)
        dX = np.zeros(X.shape, np.float64)
        dgrid = np.zeros(grid.shape, np.float64)
        for combo in itertools.product(*axes):
            weights = [w for _, w, _ in combo]
            index = (n, slice(None)) + tuple(i for i, _, _ in combo)
            np.add.at(dX, index, np.prod(weights, axis=0)[..., None] * dY)
            along = (X[index] * dY).sum(axis=-1)      # dY · X at this tap, (N, *O)
            for axis, (_, _, dw) in enumerate(combo):
                others = np.prod([w for j, w in enumerate(weights) if j != axis], axis=0) \
                    if rank > 1 else 1.0
                dgrid[..., rank - 1 - axis] += along * others * dw
        dX = dX.astype(X.dtype) if np.issubdtype(X.dtype, np.floating) else None
        return [dX, dgrid.astype(grid.dtype)]
