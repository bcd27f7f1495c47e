"""ONNX's recurrent-operator attributes (RNN, GRU, LSTM), once for every executor: the
directions, and which activation functions a node names with which alpha and beta.

``activations`` lists one function per gate group and direction (LSTM: f, g, h; GRU:
f, g; RNN: f), case-insensitive, from ONNX's list; ``activation_alpha`` and
``activation_beta`` are consumed in order by the functions that take an alpha (resp. a
beta), as onnxruntime does, and the others keep the defaults of the ONNX operator of
the same name. https://onnx.ai/onnx/operators/onnx__LSTM.html,
https://onnx.ai/onnx/operators/onnx__GRU.html, https://onnx.ai/onnx/operators/onnx__RNN.html
"""
from __future__ import annotations

from dataclasses import dataclass

from deep500.utils.errors import ShapeError, UnsupportedError

DIRECTIONS = ("forward", "reverse", "bidirectional")

#: name (lower case) -> (default alpha, default beta); None where the function takes none.
ACTIVATION_PARAMETERS = {
    "relu": (None, None), "tanh": (None, None), "sigmoid": (None, None),
    "affine": (1.0, 0.0), "leakyrelu": (0.01, None), "thresholdedrelu": (1.0, None),
    "scaledtanh": (1.0, 1.0), "hardsigmoid": (0.2, 0.5), "elu": (1.0, None),
    "softsign": (None, None), "softplus": (None, None),
}

#: The functions a node without ``activations`` uses, per direction.
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"),
                       "RNN": ("Tanh",)}


@dataclass(frozen=True)
class ActivationSpec:
    """One activation function of a cell: its name as the node gives it, and the alpha
    and beta it is applied with (None where it takes none)."""
    name: str
    alpha: float | None
    beta: float | None

    @property
    def key(self) -> str:
        return self.name.lower()


def activation_specs(op_type: str, names, alphas, betas, num_directions: int,
                     defaults: tuple | None = None) -> list[list[ActivationSpec]]:
    """Per direction, the activation functions of a node's ``activations`` attribute
    (``defaults``, by default ONNX's for ``op_type``, per direction when absent)."""
    defaults = tuple(defaults or DEFAULT_ACTIVATIONS[op_type])
    per_direction = len(defaults)
    names = list(defaults) * num_directions if names is None else [
        n.decode() if isinstance(n, bytes) else str(n) for n in names]
    if len(names) == per_direction and num_directions == 2:
        names = names * 2      # one list for both directions
    elif len(names) == 2 * per_direction and num_directions == 1:
        # RNN's schema default ["Tanh", "Tanh"] names both possible directions.
        names = names[:per_direction]
    if len(names) != per_direction * num_directions:
        raise ShapeError(f"{op_type}: activations={names} must name {per_direction} "
                         f"function(s) per direction ({per_direction * num_directions} for "
                         f"{num_directions} direction(s))")
    unknown = [n for n in names if n.lower() not in ACTIVATION_PARAMETERS]
    if unknown:
        raise UnsupportedError(f"{op_type}: unknown activation function(s) {unknown}; "
                               f"ONNX allows {sorted(ACTIVATION_PARAMETERS)} "
                               f"(case-insensitive)")
    alphas, betas = list(alphas or ()), list(betas or ())
    specs = []
    for name in names:
        default_alpha, default_beta = ACTIVATION_PARAMETERS[name.lower()]
        alpha = alphas.pop(0) if default_alpha is not None and alphas else default_alpha
        beta = betas.pop(0) if default_beta is not None and betas else default_beta
        specs.append(ActivationSpec(name, alpha, beta))
    return [specs[d * per_direction:(d + 1) * per_direction] for d in range(num_directions)]
