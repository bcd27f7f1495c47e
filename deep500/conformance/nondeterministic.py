"""Operators whose ONNX node tests no implementation can be held to: they draw random
numbers, and ONNX specifies the distribution, not the generator.

ONNX's expected outputs come from NumPy's generator (the test generators call
``numpy.random``), seeded or not. The specifications name no algorithm ("Seed to the random
generator, if not specified we will auto generate one"), and ONNX's own Bernoulli test says
"the generator operator is non-deterministic and may not produce the same values in
different implementations even if a seed is specified"
(``onnx/backend/test/case/node/bernoulli.py``). What the expected outputs can still fix is
the shape, the dtype and the support of the values (0 or 1 for Bernoulli, 0 or
``x / (1 - ratio)`` for Dropout), not the values themselves: a case that compares values
can pass only by sharing NumPy's generator and its call order.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper

RANDOM_OPERATORS = {
    "Bernoulli": "draws each output from Bernoulli(p = input)",
    "Multinomial": "draws class indices from the input's distribution",
    "RandomNormal": "draws from a normal distribution",
    "RandomNormalLike": "draws from a normal distribution",
    "RandomUniform": "draws from a uniform distribution",
    "RandomUniformLike": "draws from a uniform distribution",
}
_DROPOUT_REASON = "keeps each element with probability 1 - ratio (training_mode true)"


def random_reason(model: onnx.ModelProto, values: dict) -> str:
    """Why the model's outputs are random ('' when they are not): the first node that
    draws, by :data:`RANDOM_OPERATORS`, or a Dropout in training mode with a ratio above 0
    (its ratio and training_mode read from ``values``, ``{name: array}`` of the fed inputs,
    the initializers and Constant nodes; one that cannot be read counts as random)."""
    constants = dict(values)
    constants.update({t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer})
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = onnx.numpy_helper.to_array(node.attribute[0].t)
    for node in model.graph.node:
        if node.op_type in RANDOM_OPERATORS:
            return f"{node.op_type} {RANDOM_OPERATORS[node.op_type]}"
        if node.op_type == "Dropout" and _dropout_draws(node, constants):
            return f"Dropout {_DROPOUT_REASON}"
    return ""


def _dropout_draws(node: onnx.NodeProto, constants: dict) -> bool:
    """Dropout (opset 12 on) draws its mask when training_mode (input 2) is true and the
    ratio (input 1, default 0.5) is above 0; earlier opsets run it as identity in
    inference."""
    inputs = list(node.input) + ["", ""]
    if not inputs[2]:
        return False
    training = constants.get(inputs[2])
    ratio = constants.get(inputs[1]) if inputs[1] else np.float32(0.5)
    if training is None or ratio is None:
        return True
    return bool(np.asarray(training)) and float(np.asarray(ratio)) > 0.0
