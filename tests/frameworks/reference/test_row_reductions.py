"""The row reductions of ``_op_common_rows`` and the operators built on them: Softmax
along the last axis (exp(x)/Σ directly where nothing can overflow, max-subtracted rows
where their sum is small) and LayerNormalization's row form, each against a float64
evaluation of the spec's formula."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators._op_common_rows import (as_rows, row_maxima,
                                                                     row_sums)
from deep500.frameworks.reference.operators._op_common_softmax import softmax
from deep500.frameworks.reference.operators.registry import create_operator

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("n", [1, 5, 32, 33, 100])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_maxima_and_sums_match_numpy(n, dtype):
    x = RNG.standard_normal((2, 7, n)).astype(dtype)
    x[0, 1, n // 2] = np.nan
    rows = as_rows(x)
    np.testing.assert_array_equal(row_maxima(rows), np.max(rows, axis=1))
    # float32 sums of up to 100 terms of size ~1: a few ulp of the largest partial sum
    np.testing.assert_allclose(row_sums(rows), np.sum(rows.astype(np.float64), axis=1),
                               rtol=0, atol=n * np.finfo(dtype).eps * 4)


def _softmax64(x, axis=-1):
    """The max-subtracted spec formula in extended precision (the rounding of x - max,
    |x - max| up to ~90 in these tests, stays far below float64's eps)."""
    x = x.astype(np.longdouble)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_of_masked_attention_scores(dtype):
    x = (3 * RNG.standard_normal((4, 2, 8, 32))).astype(dtype)
    x[..., 5] = -1e9                  # masked keys
    x[0, 0, 0] = -1e9                 # a fully masked row: uniform, as max-subtracted
    x[0, 0, 1] = -60 + RNG.standard_normal(32)   # sums below 1: redone max-subtracted
    x[1, 0, 2, :4] = 80               # large but not overflowing
    got = softmax(x, 3)
    assert got.dtype == dtype
    # exp and a 32-term sum in the input's precision: a few eps, relative (where long
    # double is only double, the reference's own rounding of x - max: ~50 eps of float64)
    exact = np.finfo(np.longdouble).eps < np.finfo(np.float64).eps or dtype == np.float32
    np.testing.assert_allclose(got, _softmax64(x),
                               rtol=(8 if exact else 100) * np.finfo(dtype).eps,
                               atol=np.finfo(dtype).tiny)
    np.testing.assert_allclose(got[0, 0, 0], np.full(32, 1 / 32))


def test_softmax_where_exp_would_overflow_and_with_nan():
    x = RNG.standard_normal((3, 16)).astype(np.float32)
    x[1, 3] = 200                      # exp overflows float32: the max-subtracted path
    got = softmax(x, 1)
    np.testing.assert_allclose(got, _softmax64(x), rtol=8 * np.finfo(np.float32).eps,
                               atol=1e-38)
    x[1, 3] = np.nan
    got = softmax(x, 1)
    assert np.isnan(got[1]).all() and not np.isnan(got[[0, 2]]).any()
    x[1, 3] = -np.inf                  # a zero weight, not a NaN
    np.testing.assert_allclose(softmax(x, 1), _softmax64(x), rtol=1e-6, atol=1e-38)


def test_softmax_along_another_axis():
    x = RNG.standard_normal((3, 5, 4)).astype(np.float32)
    np.testing.assert_allclose(softmax(x, 1), _softmax64(x, axis=1), rtol=1e-6)


@pytest.mark.parametrize("axis, scale_shape", [(-1, (16,)), (1, (3, 16)), (1, (16,))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_normalization_rows_match_the_spec(axis, scale_shape, dtype, with_bias):
    x = (2 * RNG.standard_normal((4, 3, 16)) + 1).astype(dtype)
    scale = RNG.standard_normal(scale_shape).astype(dtype)
    bias = RNG.standard_normal(scale_shape).astype(dtype) if with_bias else None
    op = create_operator("LayerNormalization", axis=axis, epsilon=1e-5,
                         stash_type=1 if dtype == np.float32 else 11)
    y, mean, inv_std = op.forward(x, scale, bias) if with_bias else op.forward(x, scale)
    axes = tuple(range(axis % 3, 3))
    x64 = x.astype(np.float64)
    mean64 = x64.mean(axis=axes, keepdims=True)
    inv64 = 1 / np.sqrt(((x64 - mean64) ** 2).mean(axis=axes, keepdims=True) + 1e-5)
    y64 = (x64 - mean64) * inv64 * scale + (0 if bias is None else bias)
    assert y.dtype == mean.dtype == inv_std.dtype == dtype
    assert mean.shape == inv_std.shape == mean64.shape
    # two-pass statistics over <= 48 terms, then 3 roundings per output: tens of eps
    tolerance = 64 * np.finfo(dtype).eps
    np.testing.assert_allclose(mean, mean64, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(inv_std, inv64, rtol=tolerance)
    np.testing.assert_allclose(y, y64, rtol=tolerance, atol=tolerance * np.abs(y64).max())
