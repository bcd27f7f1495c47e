"""Softmax (opset 13): Y = exp(X) / sum(exp(X)) along one axis; dX = Y·(dY - Σ dY·Y).
https://onnx.ai/onnx/operators/onnx__Softmax.html"""
from deep500.frameworks.reference.operators._op_common_softmax import (AlongAxis, softmax,
                                                                        softmax_backward)
from deep500.frameworks.reference.operators.registry import register


@register("Softmax")
class Softmax(AlongAxis):
    function, gradient = staticmethod(softmax), staticmethod(softmax_backward)
