"""Checks of framework operators wrapped as Deep500 operators (``custom_op_from_native``)
against the reference operators: outputs, and gradients both against the reference's
backward and against central finite differences. ``d5pt.test_nativeop_forward`` and
``d5tf.test_nativeop_forward`` (and ``_gradient``) wrap a framework function first and
call these.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from deep500.lv0_operators.custom_op import CustomOp, as_tuple
from deep500.lv0_operators.op_validation import test_op_forward, test_op_gradient
from deep500.utils.errors import Deep500Error
from deep500.utils.metric import TestMetric
from deep500.utils.validation_result import OpTestResult

# (rtol, atol) for comparing two implementations; atol is scaled by max(1, max|reference|).
_TOLERANCES = {np.dtype(np.float16): (1e-2, 1e-3), np.dtype(np.float32): (1e-4, 1e-5),
               np.dtype(np.float64): (1e-10, 1e-12)}


# Reference operators by ONNX name come from a factory registered from above (the
# framework registry registers the reference framework's when ``deep500.frameworks`` is
# imported): level 0 knows no framework.
_reference_factory: Callable[[str], CustomOp] | None = None


def set_reference_factory(factory: Callable[[str], CustomOp] | None) -> None:
    """Register ``factory(op_type) -> CustomOp``, used for ``reference_op`` given by
    name."""
    global _reference_factory
    _reference_factory = factory


def _reference(reference_op) -> CustomOp:
    if isinstance(reference_op, str):
        if _reference_factory is None:
            raise Deep500Error(f"reference_op={reference_op!r} names a reference operator, "
                               f"but no reference framework is registered; import "
                               f"deep500.frameworks.reference (or pass a d5.CustomOp)")
        return _reference_factory(reference_op)
    if isinstance(reference_op, CustomOp):
        return reference_op
    raise Deep500Error(f"reference_op must be a d5.CustomOp or the name of a reference "
                       f"operator (d5ref.operator_names()), got "
                       f"{type(reference_op).__name__}")


def _compare(what: str, got, want, rtol, atol) -> dict:
    """Whether ``got`` matches ``want``: same shape, |got − want| <= atol·max(1,
    max|want|) + rtol·|want| elementwise (exact for integers and booleans)."""
    got, want = np.asarray(got), np.asarray(want)
    entry = {"tensor": what, "shape": list(want.shape), "dtype": str(want.dtype)}
    if got.shape != want.shape:
        return {**entry, "passed": False, "got_shape": list(got.shape)}
    r, a = _TOLERANCES.get(want.dtype, (0.0, 0.0))
    r = r if rtol is None else rtol
    a = a if atol is None else atol
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    scale = float(np.max(np.abs(want64))) if want64.size else 0.0
    error = np.abs(got64 - want64)
    passed = bool(np.all(error <= a * max(scale, 1.0) + r * np.abs(want64)))
    return {**entry, "passed": passed, "rtol": r, "atol": a,
            "max_abs_error": float(error.max()) if error.size else 0.0,
            "max_abs_reference": scale}


def test_nativeop_forward(op: CustomOp, inputs: Sequence[np.ndarray], reference_outputs=None,
                          metrics: Sequence[TestMetric] = (), *, reference_op=None,
                          rtol: float | None = None, atol: float | None = None
                          ) -> OpTestResult:
    """Run a framework operator on ``inputs`` (through ``d5.test_op_forward``, so
    ``metrics`` time the call on the framework's tensors) and compare its outputs with
    the reference.

    Args:
        op: the framework operator as a ``d5.CustomOp`` (``custom_op_from_native``,
            ``native_operator``).
        reference_outputs: the expected outputs; when None and ``reference_op`` is given
            (a ``d5.CustomOp`` or a reference operator's ONNX name, e.g. ``"MatMul"``),
            they are ``reference_op.forward(*inputs)``.
        rtol, atol: an output passes when it has the reference's shape and
            |y − y_ref| <= atol·max(1, max|y_ref|) + rtol·|y_ref| elementwise. Defaults by
            the reference's dtype: float32 (1e-4, 1e-5), float64 (1e-10, 1e-12), integers
            exact.

    Returns the OpTestResult; ``passed`` is None without reference outputs (it only
    measures), and ``details["outputs"]`` holds the comparison per output.
    """
    inputs = list(inputs)
    if reference_outputs is None and reference_op is not None:
        reference_outputs = _reference(reference_op).forward(*inputs)
    result = test_op_forward(op, inputs, reference_outputs, metrics)
    if reference_outputs is None:
        return result
    want = as_tuple(reference_outputs)
    got = tuple(result.outputs)
    checks = [_compare(f"output {i}", g, w, rtol, atol)
              for i, (g, w) in enumerate(zip(got, want)) if w is not None]
    count_ok = len(got) == len(want)
    result.passed = count_ok and all(c["passed"] for c in checks)
    result.details["outputs"] = checks
    if not count_ok:
        result.details["error"] = f"{len(got)} outputs, the reference has {len(want)}"
    return result


def test_nativeop_gradient(op: CustomOp, inputs: Sequence[np.ndarray], reference_op=None,
                           metrics: Sequence[TestMetric] = (), *, grads=None,
                           rtol: float | None = None, atol: float | None = None,
                           finite_differences: bool | dict = True,
                           seed: int = 0) -> OpTestResult:
    """Check a framework operator's backward (its autodiff) two ways.

    * Against ``reference_op`` (a ``d5.CustomOp`` or a reference operator's ONNX name),
      when given: both backward passes get the same upstream gradients (``grads``, or
      standard-normal ones seeded by ``seed`` for float outputs, None for integer ones)
      and the forward outputs of their own operator. The input gradients are compared as
      in ``test_nativeop_forward`` (``rtol``/``atol``, defaults by dtype); ``metrics``
      (norm metrics) measure the difference per input.
    * Against central finite differences of its own forward (``d5.test_op_gradient``,
      with its own dtype-dependent tolerances), when ``finite_differences`` is True or a
      dict of ``d5.test_op_gradient`` options (``eps``, ``rtol``, ``atol``, ``wrt``...).
      Without a reference, ``metrics`` measure this comparison instead.

    Returns one OpTestResult that passed when every check that ran passed;
    ``details["reference"]`` (per input) and ``details["finite_differences"]`` hold them.
    """
    if reference_op is None and not finite_differences:
        raise Deep500Error("test_nativeop_gradient needs a reference_op, finite "
                           "differences, or both")
    inputs = [np.array(x, copy=True, order="C") if x is not None else None for x in inputs]
    op.check_inputs(inputs)
    details, metric_results, passed = {"seed": seed}, [], True
    if reference_op is not None:
        reference = _reference(reference_op)
        outputs = as_tuple(op.forward(*inputs))
        ref_outputs = as_tuple(reference.forward(*inputs))
        if grads is None:
            rng = np.random.default_rng(seed)
            grads = [rng.standard_normal(np.shape(o)).astype(np.asarray(o).dtype)
                     if np.issubdtype(np.asarray(o).dtype, np.floating) else None
                     for o in ref_outputs]
        grads = list(grads)
        got = list(as_tuple(op.backward(grads, inputs, outputs)))
        want = list(as_tuple(reference.backward(grads, inputs, ref_outputs)))
        checks = []
        for index in range(len(inputs)):
            g = got[index] if index < len(got) else None
            w = want[index] if index < len(want) else None
            if w is None:
                continue
            if g is None:
                checks.append({"tensor": f"input {index}", "passed": False,
                               "error": "no gradient, the reference has one"})
                continue
            checks.append(_compare(f"input {index}", g, w, rtol, atol))
            for metric in metrics:
                metric.reset()
                measured = metric.measure(None, [g], [w])
                measured.conditions["input"] = index
                metric_results.append(measured)
        details["reference"] = checks
        passed &= all(c["passed"] for c in checks)
    if finite_differences:
        options = finite_differences if isinstance(finite_differences, dict) else {}
        numeric = test_op_gradient(op, inputs, **{
            "seed": seed, "metrics": () if reference_op is not None else metrics,
            **options})
        details["finite_differences"] = numeric.details["inputs"]
        passed &= bool(numeric.passed)
        conditions = numeric.conditions
        if reference_op is None:
            metric_results = numeric.metrics
    else:
        conditions = op.conditions()
    return OpTestResult("gradient", op.name, conditions, metric_results, bool(passed),
                        details)


# Library functions named test_*: keep pytest from collecting them where imported.
test_nativeop_forward.__test__ = False
test_nativeop_gradient.__test__ = False
