"""Attributes of older ONNX opsets that later opsets take as inputs.

One table for every executor: a node of an older opset whose attribute became an input
(``axes`` of Squeeze or the Reduce operators, ``split`` of Split, ``starts``/``ends`` of
Slice, ``pads`` of Pad, ``min``/``max`` of Clip, ...) is rewritten so that the attribute
is a constant input at the position the newest opset gives it.
https://onnx.ai/onnx/repo-docs/Changelog.html
"""
from __future__ import annotations

import numpy as np

DATA = "data"
"""Dtype marker: the constant takes the dtype of the node's first input."""

_INT64 = np.int64

ATTRIBUTE_INPUTS: dict[str, dict[str, tuple]] = {
    "Clip": {"min": (1, DATA), "max": (2, DATA)},
    "Dropout": {"ratio": (1, np.float32)},
    "Pad": {"pads": (1, _INT64), "paddings": (1, _INT64), "value": (2, DATA)},
    "ReduceL1": {"axes": (1, _INT64)},
    "ReduceL2": {"axes": (1, _INT64)},
    "ReduceLogSum": {"axes": (1, _INT64)},
    "ReduceLogSumExp": {"axes": (1, _INT64)},
    "ReduceMax": {"axes": (1, _INT64)},
    "ReduceMean": {"axes": (1, _INT64)},
    "ReduceMin": {"axes": (1, _INT64)},
    "ReduceProd": {"axes": (1, _INT64)},
    "ReduceSum": {"axes": (1, _INT64)},
    "ReduceSumSquare": {"axes": (1, _INT64)},
    "Reshape": {"shape": (1, _INT64)},
    "Slice": {"starts": (1, _INT64), "ends": (2, _INT64), "axes": (3, _INT64)},
    "Split": {"split": (1, _INT64)},
    "Squeeze": {"axes": (1, _INT64)},
    "TopK": {"k": (1, _INT64)},
    "Unsqueeze": {"axes": (1, _INT64)},
    "Upsample": {"scales": (1, np.float32)},
}
"""{op_type: {attribute: (input position, dtype or DATA)}}."""
