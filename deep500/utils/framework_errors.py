"""Turning a framework's exceptions into Deep500 errors where an executor is built or run.

Executors convert at their boundary (``GraphExecutor.inference``,
``inference_and_backprop``, ``OnnxBaseVisitor.visit_model``), once per call, so the
per-operator loops pay nothing. A loop that knows which ONNX node raised says so by
:func:`tag_node` in an ``except`` clause around the whole loop (the loop variable still
names the failing step there). The framework's own message is kept in the Deep500
error's text and the original exception is its ``__cause__``.

Classes, by the exception's type (the first match wins):

* a framework's "tensors do not fit" errors (registered with :func:`register`: PyTorch's
  ``RuntimeError``, TensorFlow's ``InvalidArgumentError``) and ``ValueError`` (NumPy's
  broadcasting, reshape and matmul errors, NumPy's ``AxisError``), NumPy's
  ``UFuncTypeError`` (no kernel for these dtypes) → :class:`ShapeError`;
* ``NotImplementedError`` and a framework's "not implemented" errors →
  :class:`UnsupportedError`;
* anything else (``TypeError``, ``KeyError``, ``AttributeError``, ``IndexError`` raised
  while a malformed node is built or run) → :class:`ModelError`;

except an exception that an event's hook raised inside the run (tagged by
:func:`tag_event` where the executor calls the hook, e.g. an overlapped allreduce's
``GradientBuckets.gradient_ready``): that is the hook's failure, not the model's, and
becomes a :class:`Deep500Error` that names the hook.

``MemoryError``, ``KeyboardInterrupt`` and ``SystemExit`` are never converted.
"""
from __future__ import annotations

import numpy as np

from deep500.utils.errors import Deep500Error, ModelError, ShapeError, UnsupportedError

#: Passed on as they are: the machine's or the user's doing, not the model's.
NOT_CONVERTED = (MemoryError,)

_SHAPE: dict[str, tuple] = {}
_UNSUPPORTED: dict[str, tuple] = {}
_COMMON_SHAPE: tuple = (ValueError, np.exceptions.DTypePromotionError)
try:   # no public name: NumPy's "ufunc has no loop for these dtypes"
    from numpy._core._exceptions import UFuncTypeError as _UFuncTypeError
    _COMMON_SHAPE += (_UFuncTypeError,)
except ImportError:
    pass
_NODE_ATTRIBUTE = "deep500_node"
_EVENT_ATTRIBUTE = "deep500_event_hook"


def register(framework: str, shape: tuple = (), unsupported: tuple = ()) -> None:
    """Declare ``framework``'s exception types that mean "tensors whose shapes or dtypes
    do not fit an operator" (``shape``) and "a feature this framework lacks"
    (``unsupported``)."""
    _SHAPE[framework] = tuple(shape)
    _UNSUPPORTED[framework] = tuple(unsupported)


def tag_node(exc: BaseException, node) -> None:
    """Remember on ``exc`` the ONNX node (an ``OnnxOperation`` or a name) that raised it;
    the innermost tag wins."""
    if getattr(exc, _NODE_ATTRIBUTE, None) is None:
        try:
            setattr(exc, _NODE_ATTRIBUTE, node)
        except (AttributeError, TypeError):
            pass   # an exception type without attributes: reported without the node


def tag_event(exc: BaseException, hook: str) -> None:
    """Remember on ``exc`` that the event hook ``hook`` (``"GradientBuckets.gradient_ready"``)
    raised it, not the model's code."""
    if getattr(exc, _EVENT_ATTRIBUTE, None) is None:
        try:
            setattr(exc, _EVENT_ATTRIBUTE, hook)
        except (AttributeError, TypeError):
            pass


def name_node(exc: Deep500Error) -> Deep500Error:
    """``exc`` (raised inside an operator's code, where it may not know the node) with
    the tagged node's name added to its message, unless the message names it."""
    node = getattr(exc, _NODE_ATTRIBUTE, None)
    name = getattr(node, "name", node)
    if (isinstance(name, str) and exc.args and isinstance(exc.args[0], str)
            and f"'{name}'" not in exc.args[0]):
        kind = f" ({node.op_type})" if hasattr(node, "op_type") else ""
        exc.args = (f"At node '{name}'{kind}: {exc.args[0]}",) + exc.args[1:]
    return exc


def error_class(exc: BaseException, framework: str) -> type:
    """The Deep500 error class for ``exc`` raised by ``framework`` (see the module
    docstring)."""
    if isinstance(exc, _SHAPE.get(framework, ()) + _COMMON_SHAPE):
        return ShapeError
    if isinstance(exc, (NotImplementedError,) + _UNSUPPORTED.get(framework, ())):
        return UnsupportedError
    return ModelError


def convert(exc: Exception, framework: str, context: str, node=None) -> Deep500Error:
    """The Deep500 error for ``exc``, raised by ``framework`` (a key given to
    :func:`register`) in ``context`` (e.g. "The pytorch executor failed in inference of
    network 'lenet'"); ``node`` (or the node tagged on ``exc``) is named. The caller
    raises it ``from exc``."""
    hook = getattr(exc, _EVENT_ATTRIBUTE, None)
    if hook is not None:
        return Deep500Error(f"{context}: the event hook {hook} raised {type(exc).__name__}: "
                            f"{_text(exc)}. This is the hook's failure, not the model's: "
                            f"for the overlap of gradients with their allreduces "
                            f"(GradientBuckets), check the communicator and the scheme, "
                            f"or train with overlap=False")
    node = getattr(exc, _NODE_ATTRIBUTE, None) or node
    cls = error_class(exc, framework)
    if node is None:
        where = ""
    elif hasattr(node, "op_type"):
        where = f" at node '{node.name}' ({node.op_type})"
    else:
        where = f" at node '{node}'"
    text = _text(exc)
    advice = {
        ShapeError: "check the shapes and dtypes of the inputs fed (executor.input_specs) "
                    "and those the model gives the node's inputs",
        UnsupportedError: "run the model with another executor, or replace the node",
        ModelError: "the model is malformed there: for an ONNX model, load it with the "
                    "checker on (d5.parser.load_and_parse_model(path, check=True)) to "
                    "see why",
    }[cls]
    return cls(f"{context}{where}: {type(exc).__name__}: {text}. What to do: {advice}")


def _text(exc: BaseException) -> str:
    """The exception's message on one line, at most 1000 characters."""
    text = " ".join(str(exc).split()) or "(no message)"
    return text[:1000] + " ..." if len(text) > 1000 else text
