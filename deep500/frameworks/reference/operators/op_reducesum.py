"""ReduceSum: sum of the elements along ``axes`` (all if empty, unless
noop_with_empty_axes); the gradient is dY at every element.
https://onnx.ai/onnx/operators/onnx__ReduceSum.html"""
from deep500.frameworks.reference.operators._op_common_reduce import SumOfTerms
from deep500.frameworks.reference.operators.registry import register


@register("ReduceSum")
class ReduceSum(SumOfTerms):
    """Σ x: the terms are the elements themselves."""
