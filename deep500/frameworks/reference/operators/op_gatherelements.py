"""GatherElements: output[i] = data[i with its ``axis`` coordinate replaced by
indices[i]]; the output has the shape of ``indices`` (the rank of ``data``). Negative
indices count from the end. https://onnx.ai/onnx/operators/onnx__GatherElements.html"""
from deep500.frameworks.reference.operators._op_common_index import (IndexedGather,
                                                                     elements_index)
from deep500.frameworks.reference.operators.registry import register


@register("GatherElements")
class GatherElements(IndexedGather):
    defaults = {"axis": 0}

    def index(self, shape, indices):
        return elements_index(self.op_type, shape, indices, self.attr("axis"))
