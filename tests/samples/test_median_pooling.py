"""The median pooling sample (samples/median_pooling): the C++ operator's forward pass
against NumPy, its documented median and tie-break rules, its gradient against finite
differences, its shape errors, and the whole sample script run as a user runs it.

Shapes are chosen so that the tests and the script's own checks share compiled
operators (one build per shape, dtype and window in the session cache)."""
import importlib.util
import os
import runpy
import sys

import numpy as np
import pytest

import deep500 as d5
import deep500.frameworks.reference as d5ref

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE = os.path.join(REPO_ROOT, "samples", "median_pooling")
SCRIPT = os.path.join(SAMPLE, "run.py")


@pytest.fixture(scope="module")
def sample():
    """The sample script as a module; builds go to the tests' session cache
    (tests/conftest.py), shared with the script's own run."""
    spec = importlib.util.spec_from_file_location("median_pooling_sample", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def median_pooling(sample, dtype, shape, kernel=2, stride=2):
    return d5ref.custom_op(sample.compile_median_pooling(dtype, shape, kernel, stride))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
# (2, 3, 9, 7) with a 2x2 window: the script's forward shape (an odd width: the last
# column is dropped).
# (2, 2, 6, 5) with a 3x3 window, stride 1: the finite-difference test's float64 shape.
@pytest.mark.parametrize("kernel, stride, shape", [(2, 2, (2, 3, 9, 7)),
                                                   (3, 1, (2, 2, 6, 5)),
                                                   (4, 3, (2, 1, 11, 9))])
def test_forward_matches_numpy(sample, dtype, kernel, stride, shape):
    op = median_pooling(sample, dtype, shape, kernel, stride)
    x = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    out = op(x)
    assert out.dtype == np.dtype(dtype)
    assert out.shape == sample.pooled_shape(shape, kernel, stride)
    np.testing.assert_array_equal(out, sample.median_pool_numpy(x, kernel, stride))


# The rule tests run on the script's gradient shape (2, 3, 6, 6), float64, 2x2 window:
# built once for the finite-difference test and the script.
RULES_SHAPE = (2, 3, 6, 6)


def test_even_window_takes_the_lower_median_and_nan_ranks_last(sample):
    op = median_pooling(sample, "float64", RULES_SHAPE)
    x = np.random.default_rng(3).standard_normal(RULES_SHAPE)
    x[0, 0, :2, :4] = [[4.0, 1.0, np.nan, 7.0],
                       [2.0, 3.0, 5.0, 6.0]]
    # windows {4, 1, 2, 3} -> 2 (of 1 2 3 4); {nan, 7, 5, 6} -> 6 (of 5 6 7 nan)
    np.testing.assert_array_equal(op(x)[0, 0, 0, :2], [2.0, 6.0])


def test_gradient_goes_to_the_median_and_ties_to_the_first_in_window_order(sample):
    op = median_pooling(sample, "float64", RULES_SHAPE)
    x = np.zeros(RULES_SHAPE)
    x[0, 1] = np.arange(36).reshape(6, 6)[::-1]  # distinct values in channel 1
    out = op(x)
    grad = np.arange(1.0, 1.0 + out.size).reshape(out.shape)
    (dx,) = op.backward([grad], [x], [out])
    # every other channel is all ties: each window's first (top-left) element receives it
    for n, c in np.ndindex(*RULES_SHAPE[:2]):
        if (n, c) != (0, 1):
            expected = np.zeros(RULES_SHAPE[2:])
            expected[::2, ::2] = grad[n, c]
            np.testing.assert_array_equal(dx[n, c], expected)
    # channel 1: each output's gradient lands on the one element equal to it
    for i in range(3):
        for j in range(3):
            window = x[0, 1, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
            dwindow = dx[0, 1, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
            np.testing.assert_array_equal(dwindow, (window == out[0, 1, i, j]) * grad[0, 1, i, j])


# (2, 3, 6, 6) with a 2x2 window: the script's gradient shape.
@pytest.mark.parametrize("kernel, stride, shape", [(2, 2, (2, 3, 6, 6)),
                                                   (3, 1, (2, 2, 6, 5))])
def test_gradient_matches_finite_differences(sample, kernel, stride, shape):
    op = median_pooling(sample, "float64", shape, kernel, stride)
    x = sample.distinct_values(shape, np.float64, np.random.default_rng(2))
    result = d5.test_op_gradient(op, [x])
    assert result.passed, result.details


def test_wrong_output_shape_is_explained(sample):
    descriptor = d5.compile_custom_cppop(
        "median_pooling", os.path.join(SAMPLE, "median_pooling.cpp"),
        [d5.tensordesc("float32", (1, 1, 8, 8))], [d5.tensordesc("float32", (1, 1, 3, 3))])
    with pytest.raises(d5.CppOperatorError, match=r"input 1x1x8x8 gives output 1x1x4x4, "
                                                  r"not 1x1x3x3"):
        d5ref.custom_op(descriptor)


def test_sample_exits_1_when_a_check_fails(sample, monkeypatch, capsys):
    monkeypatch.setattr(sample, "median_pool_numpy", lambda x, k, s: np.zeros(
        sample.pooled_shape(x.shape, k, s), x.dtype))
    assert sample.main(["--frameworks"]) == 1
    assert "FAILED: forward float32 matches NumPy" in capsys.readouterr().out


@pytest.mark.slow
def test_sample_script_runs_and_trains_in_both_frameworks(sample, monkeypatch, capsys):
    """The script as ``python samples/median_pooling/run.py --steps 5`` runs it (as
    ``__main__``, its arguments from sys.argv, its exit status from sys.exit), in this
    process: a new interpreter would spend most of the test importing PyTorch and
    TensorFlow again."""
    monkeypatch.setattr(sys, "argv", [SCRIPT, "--steps", "5"])
    monkeypatch.chdir(REPO_ROOT)
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(SCRIPT, run_name="__main__")
    out, err = capsys.readouterr()
    assert exited.value.code == 0, out + err
    for line in ("[PASS] forward float32 matches NumPy",
                 "[PASS] forward float64 matches NumPy",
                 "[PASS] gradient float64 matches finite differences",
                 "[PASS] pytorch: custom_op forward matches NumPy",
                 "[PASS] pytorch: gradients reach the conv layer through the C++ op",
                 "[PASS] pytorch: training lowers the held-out loss",
                 "[PASS] tensorflow: custom_op forward matches NumPy",
                 "[PASS] tensorflow: gradients reach the conv layer through the C++ op",
                 "[PASS] tensorflow: training lowers the held-out loss",
                 "== Summary: 9/9 checks passed ==", "ALL CHECKS PASSED"):
        assert line in out, out + err
