"""ONNX's rule for a list of axes (Squeeze, Unsqueeze, the reductions, Slice, Resize,
CenterCropPad, ...): each value lies in [-rank, rank), a negative one counting from the
end, and no axis is named twice.
https://onnx.ai/onnx/repo-docs/Broadcasting.html (axis conventions in each operator's page)
"""
from __future__ import annotations

import numpy as np

from deep500.utils.errors import ShapeError


def distinct_axes(op_type: str, axes, rank: int, what: str) -> list[int]:
    """The ``axes`` values as axes in [0, rank), in the order given, or a ShapeError that
    names ``op_type`` and says what was wrong for ``what`` ("an input of shape (2, 3)")."""
    axes = [int(a) for a in np.asarray(axes, np.int64).reshape(-1)]
    if any(not -rank <= a < rank for a in axes):
        raise ShapeError(f"{op_type}: axes {axes} must lie in [{-rank}, {rank - 1}] for "
                         f"{what}")
    normalised = [a % rank for a in axes]
    if len(set(normalised)) != len(normalised):
        raise ShapeError(f"{op_type}: axes {axes} name an axis twice")
    return normalised


__all__ = ["distinct_axes"]
