"""Errors a user can cause. Each says what was wrong, where, and what to do."""
from __future__ import annotations



class Deep500Error(Exception):
    """Base class of every error that a user's input or environment can cause."""


class UnsupportedError(Deep500Error):
    """A feature, operator, dtype or device that Deep500 does not support."""


class ShapeError(Deep500Error):
    """Tensors whose shapes or dtypes do not match what an operator expects."""


class RecipeError(Deep500Error):
    """A recipe that cannot run: names the key and the problem."""


class ModelError(Deep500Error):
    """An ONNX model that cannot be read, checked or run: says which file/node and why."""


class MissingDependencyError(Deep500Error):
    """An optional dependency (a framework, MPI, matplotlib) is not installed."""

    def __init__(self, module: str, extra: str, purpose: str):
        super().__init__(
            f"{purpose} needs the Python package '{module}', which is not installed. "
            f"Install it with: pip install 'deep500[{extra}]'")
        self.module = module
        self.extra = extra


def require(module: str, extra: str, purpose: str):
    """Import `module` or raise a MissingDependencyError naming the extra to install."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(module, extra, purpose) from exc


class CompilationError(Deep500Error):
    """A C++ operator that failed to configure, compile or link.

    ``first_errors`` holds the compiler's first error lines, ``log_path`` the full log.
    """

    def __init__(self, message: str, log_path: str | None = None,
                 first_errors: list[str] | None = None):
        super().__init__(message)
        self.log_path = log_path
        self.first_errors = list(first_errors or [])
