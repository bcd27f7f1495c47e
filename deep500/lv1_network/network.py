"""The Level-1 network interface: a framework's computation graph, its tensors by ONNX
name, its parameters, and the graph API visitors build it with."""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from deep500.utils.errors import Deep500Error

GRADIENT_SUFFIX = ".grad"


def gradient_name(parameter: str) -> str:
    """The name under which the gradient of ``parameter`` is returned and stored."""
    return parameter + GRADIENT_SUFFIX


class Network:
    """Base class of framework networks.

    Tensors are named as in the ONNX model. Parameters are the trainable tensors
    (floating-point initializers); ``gradient(y)`` lists ``(parameter, gradient name)``
    pairs whose values ``inference_and_backprop`` fills in.
    """

    def __init__(self, name: str):
        self.name = name
        self.outputs: list[str] = []

    # -- tensors -----------------------------------------------------------------
    def feed_tensor(self, name: str, value: np.ndarray, is_param: bool = False) -> None:
        raise NotImplementedError

    def fetch_tensor(self, name: str) -> np.ndarray:
        raise NotImplementedError

    def fetch_tensors(self, names: Iterable[str]) -> list[np.ndarray]:
        return [self.fetch_tensor(n) for n in names]

    def get_params(self) -> list[str]:
        raise NotImplementedError

    def gradient(self, y: str = "loss") -> list[tuple[str, str]]:
        return [(p, gradient_name(p)) for p in self.get_params()]

    # -- graph ---------------------------------------------------------------------
    def add_node(self, op) -> None:
        """Add an operation (an ``OnnxOperation``) to the graph."""
        raise NotImplementedError

    def remove_node(self, name: str) -> None:
        raise NotImplementedError

    def add_output(self, name: str) -> None:
        if name not in self.outputs:
            self.outputs.append(name)

    def _unknown_tensor(self, name: str, known: Sequence[str]) -> Deep500Error:
        sample = ", ".join(sorted(known)[:10])
        return Deep500Error(f"Network '{self.name}' has no tensor {name!r} (some known: "
                            f"{sample}{', ...' if len(known) > 10 else ''})")
