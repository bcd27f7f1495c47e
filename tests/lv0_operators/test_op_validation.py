"""Level-0 validation functions: ``test_op_forward`` (measured forward runs, metrics,
conditions) and ``test_op_gradient`` (backward against finite differences, in the
full-Jacobian and the random-projection regime)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import deep500 as d5
from deep500.utils.errors import Deep500Error, ShapeError
from deep500.utils.metric import MetricResult, TestMetric
from deep500.utils.threads import thread_conditions


# -- operators ----------------------------------------------------------------------------
class Counted:
    """Wraps a function and counts its calls."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = 0
        self.__name__ = getattr(fn, "__name__", "counted")

    def __call__(self, *args):
        self.calls += 1
        return self.fn(*args)


def cube_op(factor: float = 1.0, **kwargs) -> d5.CustomPythonOp:
    """y = x³ elementwise; ``factor`` != 1 makes the backward wrong by that factor."""
    def cube(x):
        return x ** 3

    def cube_grad(grads, inputs, outputs):
        (x,) = inputs
        return [(factor * 3 * x ** 2 * grads[0]).astype(x.dtype)]
    return d5.CustomPythonOp(Counted(cube), cube_grad, name="cube", **kwargs)


def matmul_op(transposed_grad: bool = False) -> d5.CustomPythonOp:
    """C = A @ B; ``transposed_grad`` returns dAᵀ and dBᵀ (wrong, same shape if square)."""
    def matmul(a, b):
        return a @ b

    def matmul_grad(grads, inputs, outputs):
        a, b = inputs
        da, db = grads[0] @ b.T, a.T @ grads[0]
        return [da.T, db.T] if transposed_grad else [da, db]
    return d5.CustomPythonOp(matmul, matmul_grad, name="matmul")


def sincos_op(factor: float = 1.0) -> d5.CustomPythonOp:
    """Two float outputs (sin x·y, cos x); gradient None for the second input when unused."""
    def sincos(x, y):
        return np.sin(x) * y, np.cos(x)

    def sincos_grad(grads, inputs, outputs):
        x, y = inputs
        dx = np.zeros_like(x)
        dy = None
        if grads[0] is not None:
            dx += grads[0] * np.cos(x) * y
            dy = grads[0] * np.sin(x)
        if grads[1] is not None:
            dx -= factor * grads[1] * np.sin(x)
        return [dx, dy]
    return d5.CustomPythonOp(sincos, sincos_grad, name="sincos")


def value_and_argmax_op(seen: list) -> d5.CustomPythonOp:
    """Outputs (x², argmax of x along the last axis): the integer output gets no
    upstream gradient (None); ``seen`` records the upstream gradients received."""
    def value_and_argmax(x):
        return x ** 2, np.argmax(x, axis=-1)

    def grad(grads, inputs, outputs):
        seen.append(grads)
        return [2 * inputs[0] * grads[0]]
    return d5.CustomPythonOp(value_and_argmax, grad, name="value_and_argmax")


def scale_by_int_op() -> d5.CustomPythonOp:
    """y = x · k with an integer tensor k; backward returns a (meaningless) gradient for k
    too, which must not be checked."""
    def scale(x, k):
        return x * k

    def scale_grad(grads, inputs, outputs):
        x, k = inputs
        return [grads[0] * k, np.ones_like(k)]
    return d5.CustomPythonOp(scale, scale_grad, name="scale_by_int")


def rng_inputs(seed, *shapes, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


class EventMetric(TestMetric):
    """Records begin/end into a shared event log; optionally asks for outputs."""

    def __init__(self, label, log, reruns=1, measures_time=False, requires_outputs=False):
        self.label, self.log, self.reruns = label, log, reruns
        self.measures_time, self.requires_outputs = measures_time, requires_outputs
        self.outputs_seen = []

    def begin(self, inputs=None):
        self.log.append(f"begin:{self.label}")

    def end(self, outputs=None):
        self.log.append(f"end:{self.label}")
        if self.requires_outputs:
            self.outputs_seen.append(outputs)

    def measure(self, inputs, outputs, reference_outputs):
        return MetricResult(self.label, {"ends": self.log.count(f"end:{self.label}")},
                            primary="ends")


# -- test_op_forward ----------------------------------------------------------------------
def test_forward_metrics_in_order_with_values():
    op = cube_op()
    (x,) = rng_inputs(0, (3, 4))
    expected = x ** 3
    reference = 1.5 * expected  # relative error |y − 1.5y| / |1.5y| = 1/3 in every norm
    metrics = [d5.L2Error(), d5.WallclockTime(reruns=4, warmup=1, ci_warn_fraction=np.inf),
               d5.MaxError()]
    result = d5.test_op_forward(op, [x], [reference], metrics=metrics)

    assert [m.metric for m in result.metrics] == ["L2Error", "WallclockTime", "MaxError"]
    assert result.test == "forward" and result.passed is None
    assert result.operator == "python:cube"
    np.testing.assert_array_equal(result.outputs[0], expected)
    assert result["L2Error"].value == pytest.approx(1 / 3, rel=1e-12)
    assert result["MaxError"].value == pytest.approx(1 / 3, rel=1e-12)
    timing = result["WallclockTime"]
    assert len(timing.samples) == 4 and all(s > 0 for s in timing.samples)
    with pytest.raises(KeyError):
        result["L1Error"]
    assert "measured" in str(result)


def test_forward_exact_reference_gives_zero_error():
    op = cube_op()
    (x,) = rng_inputs(1, (5,))
    result = d5.test_op_forward(op, [x], [x ** 3], metrics=[d5.L2Error(), d5.L1Error()])
    assert result["L2Error"].value == 0.0
    assert result["L1Error"].summary["absolute"] == 0.0


@pytest.mark.parametrize("reruns, warmup, extra, expected_calls", [
    (4, 1, None, 5),     # WallclockTime alone: reruns + warmup
    (3, 0, 7, 7),        # another metric needs more runs than the timer
    (6, 2, 2, 8),        # the timer needs the most
])
def test_forward_runs_measured_call_max_reruns_times(reruns, warmup, extra, expected_calls):
    op = cube_op()
    (x,) = rng_inputs(2, (4,))
    metrics = [d5.WallclockTime(reruns=reruns, warmup=warmup, ci_warn_fraction=np.inf)]
    if extra is not None:
        metrics.append(EventMetric("extra", [], reruns=extra))
    d5.test_op_forward(op, [x], metrics=metrics)
    assert op._forward_fn.calls == expected_calls


def test_forward_without_metrics_runs_once():
    op = cube_op()
    (x,) = rng_inputs(3, (2, 2))
    result = d5.test_op_forward(op, [x])
    assert op._forward_fn.calls == 1
    assert result.metrics == []
    np.testing.assert_array_equal(result.outputs[0], x ** 3)


def test_forward_brackets_runs_with_timers_innermost_and_numpy_outputs():
    log = []

    def forward(x):
        log.append("call")
        return x + 1.0
    op = d5.CustomPythonOp(forward, name="plus_one")
    plain = EventMetric("plain", log, reruns=2, requires_outputs=True)
    timer = EventMetric("timer", log, reruns=1, measures_time=True)
    (x,) = rng_inputs(4, (3,))
    result = d5.test_op_forward(op, [x], metrics=[timer, plain])
    one_run = ["begin:plain", "begin:timer", "call", "end:timer", "end:plain"]
    assert log == one_run * 2
    # Results keep the order the metrics were given in, not the bracketing order.
    assert [m.metric for m in result.metrics] == ["timer", "plain"]
    assert len(plain.outputs_seen) == 2
    for outputs in plain.outputs_seen:
        assert isinstance(outputs, tuple) and isinstance(outputs[0], np.ndarray)
        np.testing.assert_array_equal(outputs[0], x + 1.0)


def test_forward_conditions_and_json():
    op = cube_op()
    (x,) = rng_inputs(5, (3, 4), dtype=np.float32)
    metrics = [d5.WallclockTime(reruns=1, warmup=0), d5.L2Error()]  # 1 sample: NaN CI
    result = d5.test_op_forward(op, [x], [x ** 3], metrics=metrics)
    cond = result.conditions
    assert cond["framework"] == "python"
    assert cond["op_type"] == "cube"
    assert cond["attributes"] == {}
    assert cond["inputs"] == [{"dtype": "float32", "shape": [3, 4], "layout": None}]
    assert "OMP_NUM_THREADS" in cond["threads"]
    assert cond["threads"] == thread_conditions()
    # Every metric result carries the measurement conditions too.
    for metric_result in result.metrics:
        assert metric_result.conditions["op_type"] == "cube"
        assert metric_result.conditions["inputs"] == cond["inputs"]
    assert result["WallclockTime"].conditions["device"] == str(op.device)
    assert cond["device"] == str(op.device)

    as_dict = result.to_dict()
    text = json.dumps(as_dict, allow_nan=False)  # NaN (1-sample CI) must not leak
    back = json.loads(text)
    assert back["test"] == "forward"
    assert back["subject"] == "python:cube"
    assert [m["metric"] for m in back["metrics"]] == ["WallclockTime", "L2Error"]
    assert back["conditions"]["inputs"][0]["shape"] == [3, 4]
    assert back["metrics"][1]["summary"]["relative"] == 0.0


def test_forward_missing_reference_with_accuracy_metric_raises():
    op = cube_op()
    (x,) = rng_inputs(6, (3,))
    with pytest.raises(Deep500Error, match="reference"):
        d5.test_op_forward(op, [x], None, metrics=[d5.L2Error()])
    # A metric that needs no reference is fine without one.
    result = d5.test_op_forward(op, [x], None,
                                metrics=[d5.WallclockTime(reruns=2, warmup=0,
                                                          ci_warn_fraction=np.inf)])
    assert len(result["WallclockTime"].samples) == 2


@pytest.mark.parametrize("inputs", [
    [np.zeros((2, 3))],                                 # too few inputs
    [np.zeros((2, 3)), np.zeros((3, 4)), np.zeros(1)],  # too many
    [np.zeros((2, 3)), np.zeros((4, 4))],               # wrong shape
    [np.zeros((2, 3)), np.zeros((3, 4), np.float32)],   # wrong dtype
], ids=["too_few", "too_many", "shape", "dtype"])
def test_forward_checks_declared_descriptors_before_running(inputs):
    forward = Counted(lambda a, b: a @ b)
    op = d5.CustomPythonOp(forward, input_descriptors=[d5.tensordesc(np.float64, (2, 3)),
                                                       d5.tensordesc(np.float64, (3, 4))])
    timer = d5.WallclockTime(reruns=2, warmup=0)
    with pytest.raises(ShapeError):
        d5.test_op_forward(op, inputs, metrics=[timer])
    assert forward.calls == 0
    with pytest.raises(ShapeError):
        d5.test_op_gradient(op, inputs)
    assert forward.calls == 0
    # Matching inputs pass the check.
    good = [np.ones((2, 3)), np.ones((3, 4))]
    result = d5.test_op_forward(op, good, [np.full((2, 4), 3.0)], metrics=[d5.MaxError()])
    assert result["MaxError"].value == 0.0 and forward.calls == 1


# -- test_op_gradient: correct operators pass -------------------------------------------------
REGIMES = {"full_jacobian": {}, "random_projections": {"full_jacobian_max_elements": 0}}


def correct_cases(dtype):
    rng = np.random.default_rng(10)
    x = (rng.standard_normal((3, 4)) + 0.5).astype(dtype)
    return {
        "cube": (cube_op(), [x]),
        "matmul": (matmul_op(), rng_inputs(11, (3, 4), (4, 5), dtype=dtype)),
        "sincos": (sincos_op(), rng_inputs(12, (2, 3), (2, 3), dtype=dtype)),
    }


@pytest.mark.parametrize("regime", sorted(REGIMES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("case", ["cube", "matmul", "sincos"])
def test_gradient_passes_on_correct_ops(case, dtype, regime):
    op, inputs = correct_cases(dtype)[case]
    originals = [x.copy() for x in inputs]
    result = d5.test_op_gradient(op, inputs, metrics=[d5.L2Error()], **REGIMES[regime])
    assert result.passed is True, result.details
    assert result.test == "gradient"
    checked = [entry["input"] for entry in result.details["inputs"]]
    assert checked == list(range(len(inputs)))
    default_eps = 1e-6 if dtype == np.float64 else 1e-2
    for entry in result.details["inputs"]:
        assert entry["method"] == regime
        assert entry["eps"] == default_eps
        assert entry["passed"] is True
        assert entry["max_abs_numeric"] > 0
    # One L2Error per checked input, small relative error.
    assert [m.conditions["input"] for m in result.metrics] == checked
    limit = 1e-6 if dtype == np.float64 else 2e-2
    assert all(m.value < limit for m in result.metrics), [m.value for m in result.metrics]
    # The caller's arrays are left alone.
    for x, original in zip(inputs, originals):
        np.testing.assert_array_equal(x, original)
    json.dumps(result.to_dict(), allow_nan=False)


@pytest.mark.parametrize("regime", sorted(REGIMES))
def test_gradient_of_fortran_ordered_input(regime):
    """A transposed (Fortran-ordered) input is perturbed like any other."""
    (x,) = rng_inputs(13, (4, 3))
    result = d5.test_op_gradient(cube_op(), [x.T], **REGIMES[regime])
    assert result.passed is True, result.details


def test_gradient_regime_is_chosen_by_size():
    (x,) = rng_inputs(14, (4, 5))  # 20 elements
    assert d5.test_op_gradient(cube_op(), [x], full_jacobian_max_elements=20) \
        .details["inputs"][0]["method"] == "full_jacobian"
    assert d5.test_op_gradient(cube_op(), [x], full_jacobian_max_elements=19) \
        .details["inputs"][0]["method"] == "random_projections"


def test_gradient_integer_output_gets_no_upstream_gradient():
    seen = []
    op = value_and_argmax_op(seen)
    (x,) = rng_inputs(15, (3, 4))
    for regime in REGIMES.values():
        result = d5.test_op_gradient(op, [x], **regime)
        assert result.passed is True, result.details
    assert seen and all(grads[1] is None and grads[0] is not None for grads in seen)


def test_gradient_none_for_an_input_skips_it_unless_asked():
    def forward(x, mask):
        return x * mask

    def backward(grads, inputs, outputs):
        return [grads[0] * inputs[1], None]  # mask treated as non-differentiable
    op = d5.CustomPythonOp(forward, backward, name="masked")
    x, mask = rng_inputs(16, (3, 3), (3, 3))
    result = d5.test_op_gradient(op, [x, mask])
    assert result.passed is True
    assert [entry["input"] for entry in result.details["inputs"]] == [0]
    with pytest.raises(Deep500Error, match=r"no gradient for inputs \[1\]"):
        d5.test_op_gradient(op, [x, mask], wrt=[0, 1])


@pytest.mark.parametrize("regime", sorted(REGIMES))
def test_gradient_integer_inputs_are_skipped(regime):
    (x,) = rng_inputs(17, (3, 4))
    k = np.arange(12, dtype=np.int64).reshape(3, 4) - 5
    result = d5.test_op_gradient(scale_by_int_op(), [x, k], **REGIMES[regime])
    assert result.passed is True, result.details
    assert [entry["input"] for entry in result.details["inputs"]] == [0]


def test_gradient_wrt_restricts_checked_inputs():
    a, b = rng_inputs(18, (2, 3), (3, 2))
    result = d5.test_op_gradient(matmul_op(), [a, b], wrt=[1])
    assert [entry["input"] for entry in result.details["inputs"]] == [1]
    assert result.passed is True


def test_gradient_details_record_explicit_eps_and_seed():
    (x,) = rng_inputs(19, (2, 2))
    result = d5.test_op_gradient(cube_op(), [x], eps=1e-5, seed=3, rtol=1e-4, atol=1e-5)
    assert result.passed is True
    assert result.details["inputs"][0]["eps"] == 1e-5
    assert result.details["seed"] == 3
    assert result.details["inputs"][0]["rtol"] == 1e-4
    assert result.details["inputs"][0]["atol"] == 1e-5
    # Defaults by dtype are recorded as applied, not as "None".
    default = d5.test_op_gradient(cube_op(), [x])
    assert default.details["inputs"][0]["rtol"] == 1e-5
    assert default.details["inputs"][0]["atol"] == 1e-6
    assert result.conditions["inputs"] == [{"dtype": "float64", "shape": [2, 2],
                                            "layout": None}]


# -- test_op_gradient: wrong backwards fail ------------------------------------------------
@pytest.mark.parametrize("regime", sorted(REGIMES))
def test_gradient_fails_when_off_by_one_percent(regime):
    (x,) = rng_inputs(20, (3, 4))
    result = d5.test_op_gradient(cube_op(factor=1.01), [x], metrics=[d5.L2Error()],
                                 **REGIMES[regime])
    assert result.passed is False
    entry = result.details["inputs"][0]
    assert entry["passed"] is False and entry["method"] == regime
    # The analytic gradient is 1.01 times the numeric one, in either regime.
    assert result["L2Error"].value == pytest.approx(0.01, rel=0.05)


@pytest.mark.parametrize("regime", sorted(REGIMES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gradient_fails_on_transposed_gradient(dtype, regime):
    a, b = rng_inputs(21, (4, 4), (4, 4), dtype=dtype)
    result = d5.test_op_gradient(matmul_op(transposed_grad=True), [a, b], **REGIMES[regime])
    assert result.passed is False
    assert [entry["passed"] for entry in result.details["inputs"]] == [False, False]


@pytest.mark.parametrize("regime", sorted(REGIMES))
def test_gradient_float32_tolerances_still_catch_ten_percent(regime):
    (x,) = rng_inputs(22, (3, 4), dtype=np.float32)
    assert d5.test_op_gradient(cube_op(), [x], **REGIMES[regime]).passed is True
    assert d5.test_op_gradient(cube_op(factor=1.1), [x], **REGIMES[regime]).passed is False


@pytest.mark.parametrize("regime", sorted(REGIMES))
def test_gradient_fails_when_one_of_two_outputs_is_wrong(regime):
    x, y = rng_inputs(23, (2, 3), (2, 3))
    result = d5.test_op_gradient(sincos_op(factor=1.05), [x, y], **REGIMES[regime])
    assert result.passed is False
    by_input = {entry["input"]: entry["passed"] for entry in result.details["inputs"]}
    assert by_input == {0: False, 1: True}  # only x's gradient involves the cos output


def test_gradient_wrong_shape_raises_shape_error():
    def backward(grads, inputs, outputs):
        return [np.sum(3 * inputs[0] ** 2 * grads[0], axis=0)]
    op = d5.CustomPythonOp(lambda x: x ** 3, backward, name="bad_shape")
    (x,) = rng_inputs(24, (3, 4))
    with pytest.raises(ShapeError, match="shape"):
        d5.test_op_gradient(op, [x])
