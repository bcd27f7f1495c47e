"""Errors a user can cause. Each says what was wrong, where, and what to do."""


class Deep500Error(Exception):
    """Base class of every error that a user's input or environment can cause."""


class UnsupportedError(Deep500Error):
    """A feature, operator, dtype or device that Deep500 does not support."""


class ShapeError(Deep500Error):
    """Tensors whose shapes or dtypes do not match what an operator expects."""


class RecipeError(Deep500Error):
    """A recipe that cannot run: names the key and the problem."""


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
