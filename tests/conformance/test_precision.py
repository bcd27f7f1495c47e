"""The tolerance a dtype is granted: its ULPs (numpy.spacing), ONNX's rtol/atol kept for
float32 and float64, and the comparison that uses them."""
import ml_dtypes
import numpy as np
import pytest

from deep500 import conformance as conf
from deep500.conformance.precision import (ROUNDING_ULPS, Tolerance, is_low_precision,
                                           machine_epsilon, spacing)

BF16 = np.dtype(ml_dtypes.bfloat16)
E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, BF16])
def test_spacing_is_numpys(dtype):
    info = np.finfo(dtype) if dtype is not BF16 else ml_dtypes.finfo(BF16)
    values = np.array([0.0, float(info.smallest_subnormal), float(info.tiny), 0.3, 1.0,
                       -1.5, 1000.0]).astype(dtype)
    expected = np.spacing(np.abs(values)).astype(np.float64)
    np.testing.assert_array_equal(spacing(values.astype(np.float64), dtype), expected)


def test_spacing_of_float8_counts_its_three_significand_bits():
    values = np.array([1.0, 1.125, 0.5, 448.0, 0.0], dtype=np.float64)
    np.testing.assert_array_equal(spacing(values, E4M3),
                                  [0.125, 0.125, 0.0625, 32.0, 2.0 ** -9])
    assert machine_epsilon(E4M3) == 0.125 and machine_epsilon(BF16) == 2.0 ** -7
    assert spacing(65504.0, np.float16) == 32.0    # numpy.spacing says inf there


def test_only_dtypes_narrower_than_float32_get_ulps():
    assert [is_low_precision(d) for d in (np.float16, BF16, E4M3, np.float32, np.float64,
                                          np.int8, np.bool_)] == [True] * 3 + [False] * 4
    attention = Tolerance(op_type="Attention", reduction_length=14)
    assert attention.ulps(np.float32) == 0 and attention.ulps(np.int32) == 0
    assert attention.ulps(BF16) == ROUNDING_ULPS + 28
    assert Tolerance(op_type="Relu").ulps(np.float16) == ROUNDING_ULPS
    assert Tolerance(op_type="Cast", reduction_length=3).ulps(BF16) == 0
    assert Tolerance().relative(np.float32) == 1e-3
    assert Tolerance().relative(BF16) == pytest.approx(ROUNDING_ULPS * 2.0 ** -7, rel=0)


def _bf16(values):
    return np.array(values, dtype=np.float32).astype(BF16)


def test_a_bfloat16_result_may_differ_by_its_ulps_but_float32_may_not():
    expected = _bf16([0.5, 0.75, 1.0])
    one_ulp_off = _bf16([0.5, 0.75, 1.0 + 2.0 ** -7])
    assert conf.assert_similar(expected, one_ulp_off, Tolerance(op_type="Relu")) is True
    with pytest.raises(conf.Mismatch):   # ONNX's fixed rtol=1e-3 is below one bf16 ULP
        conf.assert_similar(expected, one_ulp_off, Tolerance(op_type="Cast"))
    assert conf.assert_similar(expected, expected, Tolerance(op_type="Cast")) is False
    f32 = np.array([1.0], np.float32)
    with pytest.raises(conf.Mismatch):
        conf.assert_similar(f32, f32 * np.float32(1 + 2e-3), Tolerance(op_type="Relu"))


def test_summed_terms_widen_the_tolerance():
    expected = _bf16([1.0, 0.25])
    six_ulps_off = _bf16([1.0 + 6 * 2.0 ** -7, 0.25])
    with pytest.raises(conf.Mismatch) as error:
        conf.assert_similar(expected, six_ulps_off, Tolerance(op_type="MatMul"))
    assert error.value.kind == "values"
    assert error.value.max_ulp == pytest.approx(6.0, rel=1e-12)
    # 6 ULPs of 1 against the 4 ULPs (4 * 2^-7) granted at 1
    assert error.value.near_miss == pytest.approx(6 / (1e-7 * 2 ** 7 + 4), rel=1e-9)
    assert conf.assert_similar(expected, six_ulps_off,
                               Tolerance(op_type="MatMul", reduction_length=1))


def test_float8_results_are_judged_in_float8_ulps():
    expected = np.array([1.0, 2.0], dtype=np.float32).astype(E4M3)
    actual = np.array([1.125, 2.0], dtype=np.float32).astype(E4M3)
    assert conf.assert_similar(expected, actual, Tolerance(op_type="Mul"))
    with pytest.raises(conf.Mismatch):
        conf.assert_similar(expected, actual, Tolerance(op_type="QuantizeLinear"))


def test_values_far_from_zero_set_the_ulps_of_a_cancelled_element():
    expected = np.array([0.0, 64.0], np.float32)
    actual = np.array([1e-4, 64.0], np.float32)
    with pytest.raises(conf.Mismatch) as error:
        conf.assert_similar(expected, actual)
    # 1e-4 in ULPs of 64 (2^-17), not of 0 (a subnormal)
    assert error.value.max_ulp == pytest.approx(float(np.float32(1e-4)) * 2 ** 17, rel=1e-6)
    assert error.value.near_miss == pytest.approx(float(np.float32(1e-4)) / (1e-7 + 0.064),
                                                  rel=1e-6)


def test_nan_and_infinities_must_stay_in_place():
    expected = np.array([1.0, np.inf, np.nan], np.float16)
    conf.assert_similar(expected, expected.copy())
    with pytest.raises(conf.Mismatch) as error:
        conf.assert_similar(expected, np.array([1.0, -np.inf, np.nan], np.float16))
    assert error.value.kind == "nonfinite" and error.value.max_ulp is None


def test_the_message_shows_the_element_furthest_beyond_its_allowance():
    expected = np.array([0.0, 64.0, 1.0], np.float32)
    actual = np.array([1e-5, 64.01, 1.0], np.float32)
    with pytest.raises(conf.Mismatch, match=r"1 of 3 elements .* the worst at \[0\]: "
                       r"1e-05 \(actual\), 0.0 \(expected\); largest error 0.01"):
        conf.assert_similar(expected, actual)
