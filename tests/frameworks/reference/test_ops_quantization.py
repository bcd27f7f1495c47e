"""Reference quantization operators (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv, BitCast) against onnx's
ReferenceEvaluator on one-node models, and against the operator pages where that
evaluator departs from them (https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html)."""
import numpy as np
import pytest
from onnx import TensorProto as TP

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError
from tests.frameworks.reference.onnx_oracle import onnx_run

ml_dtypes = pytest.importorskip("ml_dtypes")

INTEGERS = [np.int8, np.uint8, np.int16, np.uint16, ml_dtypes.int4, ml_dtypes.uint4,
            ml_dtypes.int2, ml_dtypes.uint2]
FLOAT8 = {TP.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
          TP.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
          TP.FLOAT8E5M2: ml_dtypes.float8_e5m2, TP.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz}


def run(op_type, inputs, **attributes):
    op = create_operator(op_type, **attributes)
    return op.forward(*inputs)


def assert_same(actual, expected):
    """Equal values and dtype (NaN equal to NaN; ml_dtypes values compared as float64)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(actual.astype(np.float64), expected.astype(np.float64))


def ties_and_extremes(rng, shape, scale):
    """Values whose quotient by ``scale`` (a power of two) is exactly k + 1/2 (ties for
    rounding), random values, and values far beyond every integer range."""
    x = (rng.integers(-40, 40, size=shape) + 0.5) * scale
    x = x.astype(np.float32)
    flat = x.reshape(-1)
    flat[::3] = rng.normal(0, 20, size=flat[::3].shape)
    flat[1::7] = 1e6
    flat[2::7] = -1e6
    return x


# QuantizeLinear ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", INTEGERS, ids=lambda t: np.dtype(t).name)
def test_quantize_per_tensor_integers_round_half_even_and_saturate(dtype):
    rng = np.random.default_rng(0)
    x = ties_and_extremes(rng, (4, 6), 0.5)
    zero = np.array(1 if np.dtype(dtype).name.startswith("u") else -1, dtype)
    inputs = [x, np.float32(0.5), zero]
    assert_same(run("QuantizeLinear", inputs), onnx_run("QuantizeLinear", inputs)[0])


def test_quantize_ties_go_to_even():
    y = run("QuantizeLinear", [np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5], np.float32),
                               np.float32(1), np.int8(0)])
    np.testing.assert_array_equal(y, [0, 2, 2, 0, -2, -2])


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, ml_dtypes.int4],
                         ids=lambda t: np.dtype(t).name)
def test_quantize_output_dtype_without_zero_point(dtype):
    x = ties_and_extremes(np.random.default_rng(1), (3, 5), 0.25)
    to = {np.int8: TP.INT8, np.uint16: TP.UINT16, ml_dtypes.int4: TP.INT4}[dtype]
    inputs = [x, np.float32(0.25)]
    got = run("QuantizeLinear", inputs, output_dtype=to)
    assert got.dtype == np.dtype(dtype)
    assert_same(got, onnx_run("QuantizeLinear", inputs, {"output_dtype": to})[0])
    assert run("QuantizeLinear", inputs).dtype == np.uint8   # neither: uint8


@pytest.mark.parametrize("to", sorted(FLOAT8), ids=lambda t: TP.DataType.Name(t))
@pytest.mark.parametrize("saturate", [1, 0])
def test_quantize_float8_saturation(to, saturate):
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.normal(0, 100, 40), [1e6, -1e6, np.inf, -np.inf, 0.0,
                                                 1e-9]]).astype(np.float32)
    zero = np.zeros((), FLOAT8[to])
    inputs = [x, np.float32(2.0), zero]
    got = run("QuantizeLinear", inputs, saturate=saturate)
    assert_same(got, onnx_run("QuantizeLinear", inputs, {"saturate": saturate})[0])
    limit = float(ml_dtypes.finfo(FLOAT8[to]).max)
    big = got[-6:-2].astype(np.float64)
    if saturate:
        np.testing.assert_array_equal(big, [limit, -limit, limit, -limit])
    else:
        assert not np.isfinite(big).any()


def test_quantize_float4_always_saturates():
    x = np.array([0.26, 0.75, 1.25, 5.0, 7.0, -100.0, np.inf], np.float32)
    inputs = [x, np.float32(1.0)]
    got = run("QuantizeLinear", inputs, output_dtype=TP.FLOAT4E2M1, saturate=0)
    assert_same(got, onnx_run("QuantizeLinear", inputs, {"output_dtype": TP.FLOAT4E2M1})[0])
    assert got.astype(np.float32)[-2:].tolist() == [-6.0, 6.0]


@pytest.mark.parametrize("axis", [1, -1, -3, 0])
def test_quantize_per_axis(axis):
    rng = np.random.default_rng(3)
    x = ties_and_extremes(rng, (3, 4, 5), 0.5)
    n = x.shape[axis]
    scale = (2.0 ** rng.integers(-3, 2, n)).astype(np.float32)
    zero = rng.integers(-5, 5, n).astype(np.int8)
    inputs = [x, scale, zero]
    assert_same(run("QuantizeLinear", inputs, axis=axis),
                onnx_run("QuantizeLinear", inputs, {"axis": axis})[0])


@pytest.mark.parametrize("axis,block", [(1, 2), (-1, 3), (0, 4), (-2, 5)])
def test_quantize_blocked_with_remainder(axis, block):
    rng = np.random.default_rng(4)
    x = ties_and_extremes(rng, (5, 7), 0.5)
    blocks_shape = list(x.shape)
    blocks_shape[axis] = -(-x.shape[axis] // block)
    scale = (2.0 ** rng.integers(-3, 2, blocks_shape)).astype(np.float32)
    zero = rng.integers(0, 9, blocks_shape).astype(np.uint8)
    inputs = [x, scale, zero]
    attributes = {"axis": axis, "block_size": block}
    assert_same(run("QuantizeLinear", inputs, **attributes),
                onnx_run("QuantizeLinear", inputs, attributes)[0])


def test_quantize_precision_and_scale_types():
    rng = np.random.default_rng(5)
    x = rng.normal(0, 30, 50).astype(np.float32)
    inputs = [x, np.float32(0.37), np.int16(3)]
    attributes = {"precision": TP.FLOAT16}
    assert_same(run("QuantizeLinear", inputs, **attributes),
                onnx_run("QuantizeLinear", inputs, attributes)[0])
    # float16 x with a float16 scale divide in float16; int32 x in the scale's type.
    half = [x.astype(np.float16), np.float16(0.37), np.uint8(128)]
    assert_same(run("QuantizeLinear", half), onnx_run("QuantizeLinear", half)[0])
    ints = [rng.integers(-1000, 1000, 20).astype(np.int32), np.float32(8.0), np.int8(0)]
    assert_same(run("QuantizeLinear", ints), onnx_run("QuantizeLinear", ints)[0])


def test_quantize_division_in_the_scale_type():
    """The page: the scale's type sets the division's precision unless ``precision``
    does. onnx's evaluator divides in NumPy's promoted type (float32 for a float32 x and
    a bfloat16 scale), which ``precision=FLOAT`` reproduces."""
    rng = np.random.default_rng(19)
    x = rng.normal(0, 20, 200).astype(np.float32)
    scale = np.array(0.37, ml_dtypes.bfloat16)
    inputs = [x, scale, np.int8(0)]
    in_bfloat16 = (x.astype(ml_dtypes.bfloat16) / scale).astype(np.float64)
    expected = np.clip(np.rint(in_bfloat16), -128, 127).astype(np.int8)
    assert_same(run("QuantizeLinear", inputs), expected)
    assert_same(run("QuantizeLinear", inputs, precision=TP.FLOAT),
                onnx_run("QuantizeLinear", inputs, {"precision": TP.FLOAT})[0])
    powers = [x, np.array(0.25, ml_dtypes.float8_e8m0fnu), np.int8(0)]   # exact: 2^-2
    assert_same(run("QuantizeLinear", powers), onnx_run("QuantizeLinear", powers)[0])


@pytest.mark.parametrize("to", [TP.FLOAT6E2M3, TP.FLOAT6E3M2])
def test_quantize_and_dequantize_float6(to):
    x = np.concatenate([np.random.default_rng(20).normal(0, 4, 40),
                        [1e9, -1e9, np.inf]]).astype(np.float32)
    inputs = [x, np.float32(0.5)]
    got = run("QuantizeLinear", inputs, output_dtype=to)
    assert_same(got, onnx_run("QuantizeLinear", inputs, {"output_dtype": to})[0])
    limit = float(ml_dtypes.finfo(got.dtype).max)
    assert got.astype(np.float64)[-3:].tolist() == [limit, -limit, limit]
    back = [got, np.float32(0.5)]
    assert_same(run("DequantizeLinear", back), onnx_run("DequantizeLinear", back)[0])


def test_quantize_has_no_gradient():
    op = create_operator("QuantizeLinear")
    x = np.ones(3, np.float32)
    assert op.backward([np.ones(3)], [x, np.float32(1), np.uint8(0)], [None]) == [None] * 3


@pytest.mark.parametrize("inputs,attributes,error,match", [
    ([np.ones((2, 3), np.float32), np.ones(3, np.float32)], {"axis": 2}, ShapeError, "axis=2"),
    ([np.ones((2, 3), np.float32), np.ones(2, np.float32)], {"axis": -1}, ShapeError,
     "per-axis"),
    ([np.ones((2, 6), np.float32), np.ones((2, 2), np.float32)], {"block_size": 2},
     ShapeError, r"\(2, 3\)"),
    ([np.ones((2, 6), np.float32), np.ones((2, 3), np.float32)], {}, ShapeError,
     "block_size"),
    ([np.ones(2, np.float32), np.float32(1), np.int8(0)], {"output_dtype": TP.UINT8},
     ShapeError, "agree"),
    ([np.ones(2, np.float32), np.float32(1)], {"output_dtype": TP.INT32},
     UnsupportedError, "cannot quantize"),
    ([np.ones(2, np.int64), np.float32(1)], {}, ShapeError, "x must be"),
])
def test_quantize_bad_input(inputs, attributes, error, match):
    with pytest.raises(error, match=match):
        run("QuantizeLinear", inputs, **attributes)
    with pytest.raises(Deep500Error, match="saturate"):
        create_operator("QuantizeLinear", saturate=2)


# DequantizeLinear -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", INTEGERS + [np.int32], ids=lambda t: np.dtype(t).name)
def test_dequantize_per_tensor(dtype):
    rng = np.random.default_rng(6)
    info = ml_dtypes.iinfo(dtype) if np.dtype(dtype).itemsize == 1 else np.iinfo(dtype)
    x = rng.integers(int(info.min), int(info.max) + 1, (3, 4)).astype(dtype)
    zero = None if dtype is np.int32 else np.array(int(info.max) // 2, dtype)
    inputs = [x, np.float32(0.0371)] + ([] if zero is None else [zero])
    assert_same(run("DequantizeLinear", inputs), onnx_run("DequantizeLinear", inputs)[0])


@pytest.mark.parametrize("dtype", list(FLOAT8.values()) + [ml_dtypes.float4_e2m1fn],
                         ids=lambda t: np.dtype(t).name)
def test_dequantize_floats(dtype):
    x = np.random.default_rng(7).normal(0, 3, 30).astype(dtype)
    inputs = [x, np.float32(0.5)]
    assert_same(run("DequantizeLinear", inputs), onnx_run("DequantizeLinear", inputs)[0])


@pytest.mark.parametrize("axis,block", [(1, 0), (-2, 0), (-1, 3), (0, 2)])
def test_dequantize_per_axis_and_blocked(axis, block):
    rng = np.random.default_rng(8)
    x = rng.integers(-128, 128, (4, 5, 7)).astype(np.int8)
    if block:
        shape = list(x.shape)
        shape[axis] = -(-x.shape[axis] // block)
    else:
        shape = [x.shape[axis]]
    scale = rng.uniform(0.01, 1, shape).astype(np.float32)
    zero = rng.integers(-9, 9, shape).astype(np.int8)
    attributes = {"axis": axis, "block_size": block}
    inputs = [x, scale, zero]
    assert_same(run("DequantizeLinear", inputs, **attributes),
                onnx_run("DequantizeLinear", inputs, attributes)[0])


def test_dequantize_bfloat16_and_e8m0_scales():
    x = np.random.default_rng(21).integers(-128, 128, 30).astype(np.int8)
    for inputs, attributes in (([x, np.array(0.37, ml_dtypes.bfloat16)], {}),
                               ([x, np.array(0.25, ml_dtypes.float8_e8m0fnu)],
                                {"output_dtype": TP.FLOAT}),
                               ([x, np.float32(0.37)], {"output_dtype": TP.BFLOAT16})):
        assert_same(run("DequantizeLinear", inputs, **attributes),
                    onnx_run("DequantizeLinear", inputs, attributes)[0])
    with pytest.raises(ShapeError, match="output_dtype"):
        run("DequantizeLinear", [x, np.array(0.25, ml_dtypes.float8_e8m0fnu)])


def test_dequantize_output_dtype():
    rng = np.random.default_rng(9)
    x = rng.integers(0, 256, 100).astype(np.uint8)
    inputs = [x, np.float32(0.0173), np.uint8(7)]
    got = run("DequantizeLinear", inputs, output_dtype=TP.FLOAT16)
    expected = onnx_run("DequantizeLinear", inputs, {"output_dtype": TP.FLOAT16})[0]
    assert got.dtype == np.float16
    assert_same(got, expected)


@pytest.mark.parametrize("axis,block", [(None, 0), (-1, 0), (1, 2), (0, 3)])
def test_dequantize_scale_gradient(axis, block):
    """y is linear in x_scale, so central differences in float64 are exact up to
    rounding (1e-9 relative)."""
    rng = np.random.default_rng(10)
    x = rng.integers(-128, 128, (5, 4)).astype(np.int8)
    if axis is None:
        shape, attributes = (), {}
    elif block:
        shape = list(x.shape)
        shape[axis] = -(-x.shape[axis] // block)
        attributes = {"axis": axis, "block_size": block}
    else:
        shape, attributes = (x.shape[axis],), {"axis": axis}
    scale = rng.uniform(0.1, 1, shape)
    zero = rng.integers(-5, 5, shape).astype(np.int8)
    op = create_operator("DequantizeLinear", **attributes)
    dy = rng.normal(size=x.shape)
    d_x, d_scale, d_zero = op.backward([dy], [x, scale, zero], [None])
    assert d_x is None and d_zero is None and d_scale.shape == np.shape(scale)
    numeric = np.zeros(np.shape(scale))
    for index in np.ndindex(np.shape(scale)):
        step = np.zeros(np.shape(scale))
        step[index] = 1e-3
        numeric[index] = np.sum(dy * (op.forward(x, scale + step, zero) -
                                      op.forward(x, scale - step, zero))) / 2e-3
    np.testing.assert_allclose(d_scale, numeric, rtol=1e-9)


def test_dequantize_float8_input_gradient():
    x = np.array([1.0, -2.0, 0.5], ml_dtypes.float8_e4m3fn)
    d_x, d_scale = create_operator("DequantizeLinear").backward(
        [np.ones(3, np.float32)], [x, np.float32(0.25)], [None])
    assert d_x.dtype == x.dtype and d_x.astype(np.float32).tolist() == [0.25] * 3
    np.testing.assert_allclose(d_scale, -0.5)


@pytest.mark.parametrize("inputs,attributes,error,match", [
    ([np.ones(2, np.int8), np.float32(1), np.uint8(0)], {}, ShapeError, "must match"),
    ([np.ones(2, np.float32), np.float32(1)], {}, ShapeError, "x has type"),
    ([np.ones((2, 3), np.int8), np.ones(3, np.float32), np.zeros(2, np.int8)], {"axis": 1},
     ShapeError, "same shape"),
    ([np.ones((2, 3), np.int8), np.ones(3, np.float32)], {"axis": -3}, ShapeError,
     "axis=-3"),
    ([np.ones(2, np.int8), np.float32(1)], {"output_dtype": TP.INT32}, ShapeError,
     "output type"),
])
def test_dequantize_bad_input(inputs, attributes, error, match):
    with pytest.raises(error, match=match):
        run("DequantizeLinear", inputs, **attributes)


# DynamicQuantizeLinear --------------------------------------------------------------------

@pytest.mark.parametrize("case", ["random", "positive", "negative", "zeros", "ties"])
def test_dynamic_quantize(case):
    rng = np.random.default_rng(11)
    x = {"random": rng.normal(0, 3, (4, 5)), "positive": rng.uniform(1, 9, 20),
         "negative": rng.uniform(-9, -1, 20), "zeros": np.zeros(6),
         "ties": np.array([0.0, 255.0, 0.5, 1.5, 2.5, 100.5])}[case].astype(np.float32)
    got = run("DynamicQuantizeLinear", [x])
    for actual, expected in zip(got, onnx_run("DynamicQuantizeLinear", [x], outputs=3)):
        assert_same(actual, expected)


def test_dynamic_quantize_rejects_float64():
    with pytest.raises(ShapeError, match="float32"):
        run("DynamicQuantizeLinear", [np.ones(3)])


# MatMulInteger and ConvInteger ------------------------------------------------------------

@pytest.mark.parametrize("a_type,b_type", [(np.uint8, np.int8), (np.int8, np.int8),
                                           (np.uint8, np.uint8)])
def test_matmul_integer(a_type, b_type):
    rng = np.random.default_rng(12)
    a = rng.integers(0, 128, (2, 3, 4)).astype(a_type)
    b = rng.integers(0, 128, (4, 5)).astype(b_type)
    for zeros in ([], [a_type(3)], [a_type(3), b_type(5)],
                  [rng.integers(0, 9, (2, 3, 1)).astype(a_type),
                   rng.integers(0, 9, (1, 5)).astype(b_type)]):
        inputs = [a, b] + zeros
        assert_same(run("MatMulInteger", inputs), onnx_run("MatMulInteger", inputs)[0])


def test_matmul_integer_vector_zero_points():
    """Per row of A (an M-vector) and per column of B (an N-vector), from the page."""
    rng = np.random.default_rng(13)
    a, b = rng.integers(0, 256, (3, 4)).astype(np.uint8), rng.integers(-128, 128, (4, 2))
    b = b.astype(np.int8)
    a_zero, b_zero = np.array([1, 2, 3], np.uint8), np.array([-4, 5], np.int8)
    expected = (a.astype(np.int64) - a_zero[:, None]) @ (b.astype(np.int64) - b_zero)
    assert_same(run("MatMulInteger", [a, b, a_zero, b_zero]), expected.astype(np.int32))
    with pytest.raises(ShapeError, match="per row"):
        run("MatMulInteger", [a, b, np.ones(4, np.uint8)])
    with pytest.raises(ShapeError, match="type"):
        run("MatMulInteger", [a.astype(np.int16), b])


@pytest.mark.parametrize("attributes", [{}, {"pads": [1, 0, 2, 1], "strides": [2, 1]},
                                        {"group": 2, "dilations": [2, 1]},
                                        {"auto_pad": "SAME_UPPER"}])
def test_conv_integer(attributes):
    rng = np.random.default_rng(14)
    x = rng.integers(0, 256, (2, 4, 7, 6)).astype(np.uint8)
    w = rng.integers(0, 256, (6, 4 // attributes.get("group", 1), 3, 2)).astype(np.uint8)
    for zeros in ([], [np.uint8(128)], [np.uint8(3), rng.integers(0, 9, 6).astype(np.uint8)]):
        inputs = [x, w] + zeros
        assert_same(run("ConvInteger", inputs, **attributes),
                    onnx_run("ConvInteger", inputs, attributes)[0])


def test_conv_integer_bad_zero_point():
    x, w = np.ones((1, 2, 3, 3), np.int8), np.ones((3, 2, 2, 2), np.int8)
    with pytest.raises(ShapeError, match="scalar"):
        run("ConvInteger", [x, w, np.zeros(2, np.int8)])
    with pytest.raises(ShapeError, match="output channel"):
        run("ConvInteger", [x, w, np.int8(0), np.zeros(2, np.int8)])


# QLinearMatMul and QLinearConv ------------------------------------------------------------

@pytest.mark.parametrize("a_type,b_type,y_type", [(np.uint8, np.uint8, np.uint8),
                                                  (np.int8, np.int8, np.int8),
                                                  (np.uint8, np.int8, np.int8)])
def test_qlinear_matmul(a_type, b_type, y_type):
    rng = np.random.default_rng(15)
    low = lambda t: -128 if t is np.int8 else 0   # noqa: E731
    a = rng.integers(low(a_type), low(a_type) + 256, (2, 3, 4)).astype(a_type)
    b = rng.integers(low(b_type), low(b_type) + 256, (4, 5)).astype(b_type)
    for per_row in (False, True):
        a_scale = (rng.uniform(0.01, 0.1, (2, 3, 1)) if per_row else
                   np.array(0.05)).astype(np.float32)
        a_zero = (rng.integers(0, 9, (2, 3, 1)) if per_row else np.array(4)).astype(a_type)
        b_scale = (rng.uniform(0.01, 0.1, (1, 5)) if per_row else
                   np.array(0.03)).astype(np.float32)
        b_zero = (rng.integers(0, 9, (1, 5)) if per_row else np.array(2)).astype(b_type)
        inputs = [a, a_scale, a_zero, b, b_scale, b_zero, np.float32(0.02), y_type(3)]
        assert_same(run("QLinearMatMul", inputs), onnx_run("QLinearMatMul", inputs)[0])


def test_qlinear_matmul_float8():
    """Float8 operands (opset 21), which onnx's evaluator does not run: the page's formula
    on exactly dequantized operands, saturated into float8."""
    rng = np.random.default_rng(16)
    f8 = ml_dtypes.float8_e4m3fn
    a, b = rng.normal(0, 4, (3, 4)).astype(f8), rng.normal(0, 4, (4, 2)).astype(f8)
    zero = np.zeros((), f8)
    y = run("QLinearMatMul", [a, np.float32(0.5), zero, b, np.float32(2.0), zero,
                              np.float32(0.01), zero])
    exact = a.astype(np.float64) @ b.astype(np.float64) * (0.5 * 2.0 / np.float32(0.01))
    limit = float(ml_dtypes.finfo(f8).max)
    assert_same(y, np.clip(exact, -limit, limit).astype(f8))


@pytest.mark.parametrize("attributes", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 2]},
                                        {"group": 2}])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_conv(attributes, dtype):
    rng = np.random.default_rng(17)
    low = -128 if dtype is np.int8 else 0
    x = rng.integers(low, low + 256, (2, 4, 6, 5)).astype(dtype)
    w = rng.integers(low, low + 256, (6, 4 // attributes.get("group", 1), 3, 3))
    w = w.astype(dtype)
    bias = rng.integers(-5000, 5000, 6).astype(np.int32)
    for w_scale in (np.float32(0.004), rng.uniform(0.001, 0.01, 6).astype(np.float32)):
        inputs = [x, np.float32(0.02), dtype(5), w, w_scale, dtype(0), np.float32(0.5),
                  dtype(7), bias]
        assert_same(run("QLinearConv", inputs, **attributes),
                    onnx_run("QLinearConv", inputs, attributes)[0])


def test_qlinear_conv_bad_bias_and_scale():
    x, w = np.ones((1, 2, 3, 3), np.uint8), np.ones((3, 2, 2, 2), np.uint8)
    inputs = [x, np.float32(1), np.uint8(0), w, np.float32(1), np.uint8(0), np.float32(1),
              np.uint8(0)]
    with pytest.raises(ShapeError, match="bias"):
        run("QLinearConv", inputs + [np.zeros(3, np.int64)])
    inputs[1] = np.ones(2, np.float32)
    with pytest.raises(ShapeError, match="x_scale must be a scalar"):
        run("QLinearConv", inputs)


def test_quantized_operators_have_no_gradients():
    a = np.ones((2, 2), np.uint8)
    op = create_operator("MatMulInteger")
    assert op.backward([np.ones((2, 2))], [a, a], [None]) == [None, None]


# BitCast ----------------------------------------------------------------------------------

@pytest.mark.parametrize("source,to", [
    (np.float32, TP.INT32), (np.int32, TP.FLOAT), (np.float16, TP.BFLOAT16),
    (np.int16, TP.FLOAT16), (np.float64, TP.UINT64), (np.uint8, TP.FLOAT8E4M3FN),
    (ml_dtypes.float8_e5m2, TP.INT8), (np.complex64, TP.INT64), (np.bool_, TP.UINT8),
    (ml_dtypes.int4, TP.UINT4), (ml_dtypes.uint4, TP.FLOAT4E2M1), (ml_dtypes.int2, TP.UINT2),
])
def test_bitcast(source, to):
    rng = np.random.default_rng(18)
    x = rng.normal(0, 10, (3, 4))
    if np.dtype(source).kind == "c":
        x = x + 1j * rng.normal(0, 10, (3, 4))
    elif np.dtype(source) == np.bool_:
        x = x > 0
    elif np.dtype(source).name in ("int4", "int2"):
        x = rng.integers(-2, 2, (3, 4))
    elif np.dtype(source).name == "uint4" or np.dtype(source).kind == "u":
        x = rng.integers(0, 16, (3, 4))
    x = np.asarray(x).astype(source)
    got = run("BitCast", [x], to=to)
    expected = onnx_run("BitCast", [x], {"to": to})[0]
    assert got.dtype == expected.dtype and got.shape == x.shape
    np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))


def test_bitcast_known_bits_and_scalar():
    y = run("BitCast", [np.float32(1.0)], to=TP.INT32)
    assert y.shape == () and int(y) == 0x3F800000
    assert run("BitCast", [np.array([-1, -8], ml_dtypes.int4)], to=TP.UINT4).tolist() == [15, 8]


@pytest.mark.parametrize("x,to,error", [
    (np.ones(2, np.float32), TP.INT64, ShapeError),
    (np.ones(2, np.int8), TP.INT4, ShapeError),
    (np.array(["a"], object), TP.INT8, UnsupportedError),
])
def test_bitcast_bad_input(x, to, error):
    with pytest.raises(error, match="BitCast"):
        run("BitCast", [x], to=to)
    with pytest.raises(Deep500Error):
        create_operator("BitCast")


def test_dequantize_scale_learns_through_the_executor():
    """A graph DequantizeLinear(int8 weights, per-channel scale) -> MatMul -> ReduceSum:
    the executor gives the scale's gradient (the loss is linear in it, so central
    differences are exact up to float32 rounding) and none for the int8 weights."""
    import deep500.frameworks.reference as d5ref
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(22)
    weights = {"q": rng.integers(-128, 128, (4, 3)).astype(np.int8),
               "s": rng.uniform(0.01, 0.1, 3).astype(np.float32),
               "z": rng.integers(-3, 3, 3).astype(np.int8)}
    nodes = [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["w"], axis=1),
             helper.make_node("MatMul", ["x", "w"], ["y"]),
             helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "dq", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("loss", TP.FLOAT, [])],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()])
    executor = d5ref.from_onnx(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21)]))
    x = rng.standard_normal((2, 4)).astype(np.float32)
    result = executor.inference_and_backprop({"x": x}, "loss")
    assert "q.grad" not in result and "z.grad" not in result
    gradient = result["s.grad"]
    expected = x.sum(0).astype(np.float64) @ (weights["q"].astype(np.float64) - weights["z"])
    np.testing.assert_allclose(gradient, expected, rtol=1e-5)
