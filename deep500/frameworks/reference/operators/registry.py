"""Registry of reference operators by ONNX name (``Conv``, ``Gemm``, ...).

An operator's ``op_*.py`` module is imported, and so registered, the first time the
operator is asked for; ``OPERATOR_MODULES`` names the module and the operator set of each,
so the names are known without importing any."""
from __future__ import annotations

import difflib
import importlib

from deep500.frameworks.reference.operators.operator_modules import OPERATOR_MODULES
from deep500.lv0_operators.custom_op import CustomOp
from deep500.utils.errors import Deep500Error, UnsupportedError

_OPERATORS: dict[str, type] = {}
_PACKAGE = __name__.rpartition(".")[0]


class ReferenceOp(CustomOp):
    """A NumPy operator following one ONNX operator's semantics.

    Subclasses set ``defaults`` (every attribute the operator takes, with its ONNX
    default) and implement ``forward`` and ``backward``. Attributes are read from
    ``self.attributes`` (or ``self.attr(name)``).
    """
    framework = "reference"
    domain = ""   # the ONNX operator set: "" for ai.onnx, else e.g. "ai.onnx.ml"
    defaults: dict = {}

    def __init__(self, **attributes):
        super().__init__()
        unknown = sorted(set(attributes) - set(self.defaults))
        if unknown:
            raise Deep500Error(f"{self.op_type} has no attributes {unknown}; it takes "
                               f"{sorted(self.defaults) or 'none'}")
        self._attributes = {**self.defaults, **attributes}

    @property
    def attributes(self) -> dict:
        return dict(self._attributes)

    def attr(self, name: str):
        return self._attributes[name]


def register(op_type: str, domain: str = ""):
    """Class decorator: make ``cls`` the reference implementation of ONNX ``op_type`` of
    operator set ``domain`` ("" for ai.onnx; operator names are unique across the
    domains Deep500 reads, so the registry is keyed by name)."""
    def decorate(cls):
        listed = OPERATOR_MODULES.get(op_type)
        # A listed name belongs to its module even before that module is imported.
        if op_type in _OPERATORS or (listed and cls.__module__ != f"{_PACKAGE}.{listed[0]}"):
            raise RuntimeError(f"Reference operator {op_type} registered twice")
        cls.op_type = op_type
        cls.domain = domain
        _OPERATORS[op_type] = cls
        return cls
    return decorate


def get_operator_class(op_type: str) -> type:
    """The reference class of ONNX operator ``op_type``."""
    if op_type not in _OPERATORS and op_type in OPERATOR_MODULES:
        importlib.import_module(f"{_PACKAGE}.{OPERATOR_MODULES[op_type][0]}")
    try:
        return _OPERATORS[op_type]
    except KeyError:
        names = operator_names()
        close = difflib.get_close_matches(op_type, names, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise UnsupportedError(f"The reference framework has no operator {op_type!r}.{hint} "
                               f"Supported: {', '.join(names)}") from None


def create_operator(op_type: str, **attributes) -> ReferenceOp:
    """An instance of the reference operator ``op_type`` with the given attributes."""
    return get_operator_class(op_type)(**attributes)


def operator_names() -> list[str]:
    return sorted(OPERATOR_MODULES.keys() | _OPERATORS.keys())


def operator_keys() -> list[tuple[str, str]]:
    """``(domain, op_type)`` of every reference operator ("" for ai.onnx)."""
    return sorted({(domain, name) for name, (_, domain) in OPERATOR_MODULES.items()}
                  | {(cls.domain, name) for name, cls in _OPERATORS.items()})
