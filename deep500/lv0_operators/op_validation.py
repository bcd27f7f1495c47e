"""Level-0 validation: an operator's forward outputs against reference outputs, and its
backward against central finite differences.

Gradient check: with upstream gradients g (one per output, seeded random), backward
returns the vector-Jacobian product Jᵀg. For small tensors the full Jacobian is built
both ways (column by column from central differences, row by row from backward with
unit upstream gradients); for large ones, random directions v are compared through
gᵀJv = (L(x + εv) − L(x − εv)) / 2ε with L(x) = Σ g·f(x), against ⟨Jᵀg, v⟩.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from deep500.lv0_operators.custom_op import CustomOp, as_tuple
from deep500.utils.errors import Deep500Error, ShapeError
from deep500.utils.metric import TestMetric, require_reference, run_measured
from deep500.utils.tensor_desc import TensorDescriptor
from deep500.utils.threads import thread_conditions
from deep500.utils.validation_result import OpTestResult


def _measurement_conditions(op: CustomOp, inputs: Sequence[np.ndarray]) -> dict:
    conditions = op.conditions()
    conditions["inputs"] = [TensorDescriptor.from_numpy(np.asarray(x)).to_dict()
                            if x is not None else None for x in inputs]
    conditions["threads"] = thread_conditions()
    return conditions


def test_op_forward(op: CustomOp, inputs: Sequence[np.ndarray],
                    reference_outputs: Sequence[np.ndarray] | None = None,
                    metrics: Sequence[TestMetric] = ()) -> OpTestResult:
    """Run ``op`` on ``inputs`` as often as ``metrics`` need and measure it.

    The timed call is the operator on the framework's own tensors (``op.native_call``);
    conversions to and from NumPy stay outside the clock. Accuracy metrics compare the
    last outputs with ``reference_outputs``.
    """
    inputs = list(inputs)
    op.check_inputs(inputs)
    shapes = [np.shape(x) if x is not None else None for x in inputs]
    for metric in metrics:
        metric.reset()
        if hasattr(metric, "set_operator"):
            metric.set_operator(op.op_type, shapes, op.attributes)
        if getattr(metric, "measures_time", False) and op.device.is_gpu:
            metric.set_device(op.device)
    call, to_numpy = op.native_call(inputs)
    outputs = to_numpy(run_measured(call, metrics, to_numpy))
    if reference_outputs is not None:
        reference_outputs = as_tuple(reference_outputs)
    conditions = _measurement_conditions(op, inputs)
    results = []
    for metric in metrics:
        require_reference(metric, reference_outputs, f"test_op_forward of {op.name}")
        result = metric.measure(inputs, outputs, reference_outputs)
        result.conditions = {**conditions, **result.conditions}
        results.append(result)
    return OpTestResult("forward", op.name, conditions, results, outputs=outputs)


def _is_float(array) -> bool:
    return np.issubdtype(np.asarray(array).dtype, np.floating)


def _default_eps(dtype) -> float:
    return 1e-6 if np.dtype(dtype) == np.float64 else 1e-2


def _default_tolerances(dtype) -> tuple[float, float]:
    """(rtol, atol relative to the largest numeric gradient) for central differences."""
    return (1e-5, 1e-6) if np.dtype(dtype) == np.float64 else (2e-2, 5e-3)


def test_op_gradient(op: CustomOp, inputs: Sequence[np.ndarray], eps: float | None = None,
                     metrics: Sequence[TestMetric] = (), *, rtol: float | None = None,
                     atol: float | None = None, wrt: Sequence[int] | None = None,
                     seed: int = 0, full_jacobian_max_elements: int = 512,
                     projections: int = 8) -> OpTestResult:
    """Check ``op.backward`` against central finite differences of ``op.forward``.

    Args:
        eps: finite-difference step (default 1e-6 for float64, 1e-2 for float32).
        metrics: norm metrics (L2Error, MaxError, ...) comparing analytic with numeric
            gradients, per checked input.
        rtol, atol: pass if |analytic − numeric| <= atol·max|numeric| + rtol·|numeric|
            elementwise (defaults by dtype).
        wrt: indices of inputs to check; default every floating-point input.
        full_jacobian_max_elements: build full Jacobians when an input and all outputs
            have at most this many elements; otherwise use random projections.
        projections: number of random directions for large tensors.
    """
    # Copies, since inputs are perturbed in place, in C order: the finite differences
    # perturb through a flat view (reshape(-1)), which for a Fortran-ordered copy (e.g.
    # of a transposed array) would be a copy. None marks an omitted optional input.
    inputs = [np.array(x, copy=True, order="C") if x is not None else None for x in inputs]
    op.check_inputs(inputs)
    rng = np.random.default_rng(seed)
    outputs = as_tuple(op.forward(*inputs))
    output_is_float = [_is_float(o) for o in outputs]
    upstream = [rng.standard_normal(np.shape(o)).astype(np.asarray(o).dtype) if f else None
                for o, f in zip(outputs, output_is_float)]
    analytic = list(as_tuple(op.backward(upstream, inputs, outputs)))
    if len(analytic) < len(inputs):
        analytic += [None] * (len(inputs) - len(analytic))
    if wrt is None:
        wrt = [i for i, x in enumerate(inputs) if _is_float(x) and analytic[i] is not None]
    missing = [i for i in wrt if analytic[i] is None]
    if missing:
        raise Deep500Error(f"{op.name}.backward returned no gradient for inputs {missing}")

    def scalar_loss(values) -> float:
        outs = as_tuple(op.forward(*values))
        return float(sum(np.sum(np.asarray(o, np.float64) * g.astype(np.float64))
                         for o, g in zip(outs, upstream) if g is not None))

    total_out = sum(np.size(o) for o, f in zip(outputs, output_is_float) if f)
    per_input, metric_results, passed = [], [], True
    for index in wrt:
        x = inputs[index]
        if np.shape(analytic[index]) != np.shape(x):
            raise ShapeError(f"{op.name}.backward: gradient of input {index} has shape "
                             f"{np.shape(analytic[index])}, the input has {np.shape(x)}")
        step = eps if eps is not None else _default_eps(x.dtype)
        if x.size <= full_jacobian_max_elements and total_out <= full_jacobian_max_elements:
            method = "full_jacobian"
            got, expected = _full_jacobians(op, inputs, index, outputs, output_is_float,
                                            step)
        else:
            method = "random_projections"
            got, expected = _projections(inputs, index, analytic[index], scalar_loss, step,
                                         projections, rng)
        r, a = _default_tolerances(x.dtype)
        r = rtol if rtol is not None else r
        a = atol if atol is not None else a
        scale = float(np.max(np.abs(expected))) if expected.size else 0.0
        error = np.abs(got - expected)
        ok = bool(np.all(error <= a * max(scale, 1e-12) + r * np.abs(expected)))
        passed &= ok
        per_input.append({"input": index, "method": method, "eps": step, "passed": ok,
                          "rtol": r, "atol": a, "max_abs_error": float(error.max()) if error.size else 0.0,
                          "max_abs_numeric": scale})
        for metric in metrics:
            metric.reset()
            result = metric.measure(None, [got], [expected])
            result.conditions["input"] = index
            metric_results.append(result)
    conditions = _measurement_conditions(op, inputs)
    return OpTestResult("gradient", op.name, conditions, metric_results, passed,
                        {"inputs": per_input, "seed": seed})


def _full_jacobians(op, inputs, index, outputs, output_is_float, step):
    """(analytic, numeric) Jacobians of all float outputs w.r.t. input ``index``."""
    x = inputs[index]
    float_outputs = [i for i, f in enumerate(output_is_float) if f]
    sizes = [np.size(outputs[i]) for i in float_outputs]
    numeric = np.zeros((sum(sizes), x.size))
    flat = x.reshape(-1)
    for col in range(x.size):
        original = flat[col]
        # Copies: an operator may return views of its inputs, which change with them.
        flat[col] = original + step
        plus = [np.array(o, np.float64) for o in as_tuple(op.forward(*inputs))]
        flat[col] = original - step
        minus = [np.array(o, np.float64) for o in as_tuple(op.forward(*inputs))]
        flat[col] = original
        # Divide by the step actually taken after rounding to the input's dtype.
        actual = float(x.dtype.type(original + step)) - float(x.dtype.type(original - step))
        numeric[:, col] = np.concatenate(
            [(plus[i] - minus[i]).ravel() for i in float_outputs]) / actual
    analytic = np.zeros_like(numeric)
    row = 0
    for position, out_index in enumerate(float_outputs):
        for element in range(sizes[position]):
            grads = [np.zeros(np.shape(o), np.asarray(o).dtype) if f else None
                     for o, f in zip(outputs, output_is_float)]
            grads[out_index].reshape(-1)[element] = 1
            grad_x = as_tuple(op.backward(grads, inputs, outputs))[index]
            analytic[row] = np.asarray(grad_x, np.float64).ravel()
            row += 1
    return analytic, numeric


def _projections(inputs, index, analytic_grad, scalar_loss, step, count, rng):
    """(analytic, numeric) directional derivatives along random unit directions."""
    x = inputs[index]
    original = x.copy()
    got, expected = [], []
    for _ in range(count):
        direction = rng.standard_normal(x.shape)
        direction /= np.linalg.norm(direction) or 1.0
        x[...] = original + step * direction
        plus_step = x.astype(np.float64) - original
        plus = scalar_loss(inputs)
        x[...] = original - step * direction
        minus = scalar_loss(inputs)
        x[...] = original
        # Use the perturbation as stored in the input's dtype.
        taken = np.sum(plus_step * direction)
        expected.append((plus - minus) / (2.0 * taken))
        got.append(float(np.sum(np.asarray(analytic_grad, np.float64) * direction)))
    return np.array(got), np.array(expected)
