"""GatherND: slices of ``data`` addressed by the last dimension of ``indices`` (k-tuples
of coordinates after the first ``batch_dims`` dimensions, which data and indices share);
output shape indices.shape[:-1] + data.shape[batch_dims + k:].
https://onnx.ai/onnx/operators/onnx__GatherND.html"""
from deep500.frameworks.reference.operators._op_common_index import IndexedGather, nd_index
from deep500.frameworks.reference.operators.registry import register


@register("GatherND")
class GatherND(IndexedGather):
    defaults = {"batch_dims": 0}

    def index(self, shape, indices):
        return nd_index(self.op_type, shape, indices, self.attr("batch_dims"))
