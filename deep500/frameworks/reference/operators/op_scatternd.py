"""ScatterND: a copy of ``data`` with slices data[indices[i]] replaced by (or, with
``reduction`` add/mul/max/min, combined with) updates[i].
https://onnx.ai/onnx/operators/onnx__ScatterND.html"""
from deep500.frameworks.reference.operators._op_common_index import IndexedScatter, nd_index
from deep500.frameworks.reference.operators.registry import register


@register("ScatterND")
class ScatterND(IndexedScatter):
    defaults = {"reduction": "none"}

    def index(self, data, indices, updates):
        return nd_index(self.op_type, data.shape, indices)
