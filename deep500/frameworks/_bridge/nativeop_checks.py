"""A bridge's ``test_nativeop_forward`` and ``test_nativeop_gradient``: a ``d5.CustomOp``,
or a function of the framework's tensors, checked against the reference operators by
level 0 (``deep500.lv0_operators.nativeop_validation``: outputs against the reference's,
gradients against its backward and finite differences).

A bridge hands over how a function of its tensors becomes a ``d5.CustomOp`` on NumPy
arrays (its ``custom_op_from_native``) and what its tensors are called in messages.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from deep500.lv0_operators import nativeop_validation
from deep500.lv0_operators.custom_op import CustomOp
from deep500.utils.errors import Deep500Error
from deep500.utils.metric import TestMetric
from deep500.utils.validation_result import OpTestResult


def as_custom_op(op_or_fn, from_native: Callable[[Callable], CustomOp],
                 tensors: str) -> CustomOp:
    """``op_or_fn`` as it is when it is a ``d5.CustomOp``; a function of ``tensors``
    wrapped by ``from_native``."""
    if isinstance(op_or_fn, CustomOp):
        return op_or_fn
    if callable(op_or_fn):
        return from_native(op_or_fn)
    raise Deep500Error(f"Expected a d5.CustomOp or a function of {tensors}, got "
                       f"{type(op_or_fn).__name__}")


def nativeop_checks(from_native: Callable[[Callable], CustomOp], tensors: str,
                    module: str) -> tuple[Callable, Callable]:
    """``(test_nativeop_forward, test_nativeop_gradient)`` of the bridge module
    ``module``, whose functions of ``tensors`` ("torch tensors") become ``d5.CustomOp``s
    through ``from_native``."""

    def test_nativeop_forward(op_or_fn, inputs: Sequence[np.ndarray],
                              reference_outputs=None, metrics: Sequence[TestMetric] = (),
                              **options) -> OpTestResult:
        return nativeop_validation.test_nativeop_forward(
            as_custom_op(op_or_fn, from_native, tensors), inputs, reference_outputs,
            metrics, **options)

    def test_nativeop_gradient(op_or_fn, inputs: Sequence[np.ndarray], reference_op=None,
                               metrics: Sequence[TestMetric] = (),
                               **options) -> OpTestResult:
        return nativeop_validation.test_nativeop_gradient(
            as_custom_op(op_or_fn, from_native, tensors), inputs, reference_op, metrics,
            **options)

    test_nativeop_forward.__doc__ = (
        f"``d5.CustomOp`` or function of {tensors} (the bridge's ``custom_op`` included) "
        f"checked against the reference's outputs; see "
        f"``nativeop_validation.test_nativeop_forward`` for the options (``reference_op``, "
        f"``rtol``, ``atol``) and the pass rule.")
    test_nativeop_gradient.__doc__ = (
        f"The backward of a ``d5.CustomOp`` or function of {tensors} checked against the "
        f"reference's backward and finite differences; see "
        f"``nativeop_validation.test_nativeop_gradient`` for the options.")
    for function in (test_nativeop_forward, test_nativeop_gradient):
        function.__module__, function.__qualname__ = module, function.__name__
        # Library functions named test_*: keep pytest from collecting them where imported.
        function.__test__ = False
    return test_nativeop_forward, test_nativeop_gradient


__all__ = ["as_custom_op", "nativeop_checks"]
