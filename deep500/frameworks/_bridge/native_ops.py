"""What a bridge's native operators share: ONNX operators as one framework call each (a
table of builders by ONNX name, behind the bridge's ``native_operator``), and a function
of the framework's tensors as a ``d5.CustomOp`` (the bridge's ``custom_op_from_native``).

A bridge hands over its framework's name, its builders and its operator class.
"""
from __future__ import annotations

from typing import Callable

from deep500.utils.errors import Deep500Error, UnsupportedError
from deep500.utils.tensor_desc import TensorDescriptor


class NativeOperators:
    """A bridge's builders of ONNX operators by name: ``build(attributes)`` returns what
    the bridge's operator class takes (a function of its tensors, or the class's keyword
    arguments)."""

    def __init__(self, framework: str):
        self.framework = framework   # in error messages: "PyTorch"
        self._builders: dict[str, Callable[[dict], object]] = {}

    def builder(self, op_type: str) -> Callable:
        """Decorator: register ``build(attributes)`` for the ONNX operator ``op_type``."""
        def register(build):
            self._builders[op_type] = build
            return build
        return register

    def without_attributes(self, built: dict[str, object]) -> None:
        """Register operators whose build ignores the attributes: ``{op_type: what
        build returns}``."""
        for op_type, value in built.items():
            self._builders[op_type] = lambda attributes, value=value: value

    def build(self, op_type: str, attributes: dict):
        """What the builder of ``op_type`` returns for ``attributes``."""
        if op_type not in self._builders:
            raise UnsupportedError(f"No {self.framework} native wrapper for {op_type!r}; "
                                   f"available: {', '.join(self.names())}")
        return self._builders[op_type](attributes)

    def names(self) -> list[str]:
        """The ONNX operators with a builder, sorted."""
        return sorted(self._builders)


def native_function_options(fn: Callable, tensors: str, name: str | None,
                            input_descriptors=None, output_descriptors=None) -> dict:
    """The keyword arguments of a bridge's operator class wrapping ``fn``, a function of
    ``tensors`` ("torch tensors"): its name (``name``, else the function's), and the
    descriptors as lists (one ``TensorDescriptor`` or a sequence of them; None when not
    given). A Deep500Error when ``fn`` is not callable."""
    if not callable(fn):
        raise Deep500Error(f"custom_op_from_native takes a function of {tensors}, got "
                           f"{type(fn).__name__}")
    return {"op_type": name or getattr(fn, "__name__", None) or type(fn).__name__,
            "input_descriptors": _descriptor_list(input_descriptors),
            "output_descriptors": _descriptor_list(output_descriptors)}


def _descriptor_list(descriptors) -> list | None:
    if descriptors is None or isinstance(descriptors, TensorDescriptor):
        return None if descriptors is None else [descriptors]
    return list(descriptors)


__all__ = ["NativeOperators", "native_function_options"]
