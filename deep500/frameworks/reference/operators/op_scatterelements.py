"""ScatterElements: a copy of ``data`` where the element at position i of ``indices``,
with its ``axis`` coordinate replaced by indices[i], is replaced by (or, with
``reduction`` add/mul/max/min, combined with) updates[i].
https://onnx.ai/onnx/operators/onnx__ScatterElements.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_index import (IndexedScatter,
                                                                     elements_index)
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import ShapeError


@register("ScatterElements")
class ScatterElements(IndexedScatter):
    defaults = {"axis": 0, "reduction": "none"}

    def index(self, data, indices, updates):
        if np.shape(indices) != np.shape(updates):
            raise ShapeError(f"{self.op_type}: indices {np.shape(indices)} and updates "
                             f"{np.shape(updates)} must have the same shape")
        return elements_index(self.op_type, data.shape, indices, self.attr("axis"))
