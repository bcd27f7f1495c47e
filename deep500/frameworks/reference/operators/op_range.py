"""Range: start + i·delta for i < max(ceil((limit - start) / delta), 0), from the scalar
inputs start, limit and delta. https://onnx.ai/onnx/operators/onnx__Range.html"""
import math

import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


@register("Range")
class Range(ReferenceOp):
    # stash_type only concerns float16/bfloat16, which are computed in float32 here anyway.
    defaults = {"stash_type": 1}

    def forward(self, start, limit, delta):
        values = [np.asarray(v) for v in (start, limit, delta)]
        if any(v.size != 1 for v in values):
            raise ShapeError(f"{self.op_type}: start, limit and delta must be scalars, got "
                             f"shapes {[v.shape for v in values]}")
        dtype = values[0].dtype
        start, limit, delta = (v.reshape(()) for v in values)
        if delta == 0:
            raise ShapeError(f"{self.op_type}: delta must not be 0")
        if np.issubdtype(dtype, np.integer):
            start, limit, delta = int(start), int(limit), int(delta)
            count = max(-((start - limit) // delta), 0)   # exact integer ceil division
            return (start + np.arange(count, dtype=np.int64) * delta).astype(dtype)
        work = np.dtype(np.float32) if dtype.itemsize < 4 else dtype
        start, limit, delta = (work.type(v) for v in (start, limit, delta))
        count = max(math.ceil((limit - start) / delta), 0)
        return (start + np.arange(count).astype(work) * delta).astype(dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None, None, None]
