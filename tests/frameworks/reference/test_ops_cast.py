"""Reference Cast and CastLike: every ONNX element type NumPy and ml_dtypes hold, against
onnx's ReferenceEvaluator on one-node models and against the rules of the operator's
page (https://onnx.ai/onnx/operators/onnx__Cast.html)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error, UnsupportedError
from tests.frameworks.reference.op_checks import check_backward, check_gradient, torch

ml_dtypes = pytest.importorskip("ml_dtypes")   # installed with onnx >= 1.18

NUMERIC = {TP.BOOL: np.bool_, TP.INT8: np.int8, TP.UINT8: np.uint8, TP.INT16: np.int16,
           TP.UINT16: np.uint16, TP.INT32: np.int32, TP.UINT32: np.uint32,
           TP.INT64: np.int64, TP.UINT64: np.uint64, TP.FLOAT16: np.float16,
           TP.FLOAT: np.float32, TP.DOUBLE: np.float64, TP.BFLOAT16: ml_dtypes.bfloat16}
FLOAT8 = {TP.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
          TP.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
          TP.FLOAT8E5M2: ml_dtypes.float8_e5m2, TP.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz}
SMALL_INTEGERS = {TP.INT4: ml_dtypes.int4, TP.UINT4: ml_dtypes.uint4, TP.INT2: ml_dtypes.int2,
                  TP.UINT2: ml_dtypes.uint2}
NAME = {v: k for k, v in TP.DataType.items()}


def oracle(op_type, inputs, **attributes):
    """The output of onnx.reference.ReferenceEvaluator on a one-node model."""
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op_type, names, ["y"], **attributes)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs)],
        [helper.make_tensor_value_info("y", TP.UNDEFINED, None)])
    return ReferenceEvaluator(helper.make_model(graph)).run(None, dict(zip(names, inputs)))[0]


def assert_same(got, want):
    """Same dtype, shape and values; NaN where NaN, and the sign of zeros kept."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    if got.dtype.kind in "biuO" or "int" in got.dtype.name:
        np.testing.assert_array_equal(got, want)
        return
    wide_got, wide_want = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(wide_got), np.isnan(wide_want))
    both = ~np.isnan(wide_want)
    np.testing.assert_array_equal(wide_got[both], wide_want[both])
    np.testing.assert_array_equal(np.signbit(wide_got[both]), np.signbit(wide_want[both]))


def values_for(dtype):
    """Values every target can take without undefined behaviour (ONNX leaves float ->
    integer out of range undefined): small integers and fractions of either sign."""
    base = np.array([0, 1, -1, 2, -3, 7, -8, 5.5, -2.25, 0.75, 100, -100, 127])
    if np.dtype(dtype) == np.bool_:
        return np.array([True, False, True])
    if np.dtype(dtype).kind == "u":
        base = np.abs(base)
    if np.dtype(dtype).kind in "iu":
        base = np.trunc(base)
    return base.astype(dtype)


# -- numeric to numeric ---------------------------------------------------------------------
@pytest.mark.parametrize("source", list(NUMERIC.values()), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("to", list(NUMERIC), ids=lambda t: NAME[t])
def test_numeric_casts_match_onnx(to, source):
    x = values_for(source)
    y = create_operator("Cast", to=to).forward(x)
    assert y.dtype == np.dtype(NUMERIC[to])
    if np.dtype(NUMERIC[to]).kind in "iu" and np.dtype(source).kind == "f":
        x = x[np.abs(x.astype(np.float64)) < 8]     # in range of every integer type...
        x = x[(x.astype(np.float64) >= 0) | (np.dtype(NUMERIC[to]).kind == "i")]  # ...and sign
        y = create_operator("Cast", to=to).forward(x)
    assert_same(y, oracle("Cast", [x], to=to))
    y_like = create_operator("CastLike").forward(x, np.zeros(2, NUMERIC[to]))
    assert_same(y_like, y)


def test_integers_keep_their_low_bits():
    # "200 (int16) -> -56 (int8)": two's complement wrap-around.
    x = np.array([200, -129, 65535, 256], np.int32)
    np.testing.assert_array_equal(create_operator("Cast", to=TP.INT8).forward(x),
                                  [-56, 127, -1, 0])
    np.testing.assert_array_equal(create_operator("Cast", to=TP.UINT8).forward(x),
                                  [200, 127, 255, 0])


def test_floats_to_bool_and_back():
    x = np.array([0.0, -0.0, 0.5, -2.0, np.nan, np.inf], np.float32)
    np.testing.assert_array_equal(create_operator("Cast", to=TP.BOOL).forward(x),
                                  [False, False, True, True, True, True])
    b = np.array([True, False])
    np.testing.assert_array_equal(create_operator("Cast", to=TP.FLOAT).forward(b), [1.0, 0.0])


def test_out_of_range_floats_become_infinite():
    x = np.array([1e300, -1e300, 70000.0])
    np.testing.assert_array_equal(create_operator("Cast", to=TP.FLOAT).forward(x[:2]),
                                  [np.inf, -np.inf])
    np.testing.assert_array_equal(create_operator("Cast", to=TP.FLOAT16).forward(x),
                                  [np.inf, -np.inf, np.inf])


def test_opset_1_names_the_type():
    x = np.array([1.5, -2.5], np.float64)
    for to in ("FLOAT", b"FLOAT", "float"):
        y = create_operator("Cast", to=to).forward(x)
        assert y.dtype == np.float32
    assert create_operator("Cast", to="INT32").forward(x).dtype == np.int32


# -- float8 -------------------------------------------------------------------------------
SPECIAL = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 0.4789, 0.8191, 1e-7, -1e-7, 1e-3,
           3.0, -3.5, 200.0, 239.0, 241.0, 448.0, 460.0, 500.0, 1e6, -1e6, 57344.0, 61000.0]


@pytest.mark.parametrize("source", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("to", list(FLOAT8), ids=lambda t: NAME[t])
def test_float8_matches_onnx(to, saturate, source):
    with np.errstate(over="ignore"):   # 1e6 is inf in float16
        x = np.array(SPECIAL).astype(source)
    y = create_operator("Cast", to=to, saturate=saturate).forward(x)
    assert y.dtype == np.dtype(FLOAT8[to])
    assert_same(y, oracle("Cast", [x], to=to, saturate=saturate))
    y_like = create_operator("CastLike", saturate=saturate).forward(
        x, np.zeros(1, FLOAT8[to]))
    assert_same(y_like, y)


def test_float8_follows_the_spec_tables():
    x = np.array([np.inf, -np.inf, 1e6, -1e6, -0.0], np.float32)

    def cast(to, saturate):
        return create_operator("Cast", to=to, saturate=saturate).forward(x).astype(np.float32)

    # saturate: ±inf and values beyond the range become ± the largest finite value.
    np.testing.assert_array_equal(cast(TP.FLOAT8E4M3FN, 1), [448, -448, 448, -448, -0.0])
    np.testing.assert_array_equal(cast(TP.FLOAT8E5M2, 1),
                                  [57344, -57344, 57344, -57344, -0.0])
    # E4M3FNUZ has no -0.
    assert not np.signbit(cast(TP.FLOAT8E4M3FNUZ, 1)[-1])
    # no saturation: NaN, except E5M2, which has infinities.
    assert np.all(np.isnan(cast(TP.FLOAT8E4M3FN, 0)[:4]))
    assert np.all(np.isnan(cast(TP.FLOAT8E5M2FNUZ, 0)[:4]))
    np.testing.assert_array_equal(cast(TP.FLOAT8E5M2, 0)[:4],
                                  [np.inf, -np.inf, np.inf, -np.inf])


def test_float8_rounds_to_nearest_even():
    # 0.46875 and 0.5 are neighbours in E4M3FN; 0.484375 is halfway: even mantissa wins.
    x = np.array([0.48, 0.484375, 0.49, 17.0, 19.0], np.float32)
    y = create_operator("Cast", to=TP.FLOAT8E4M3FN).forward(x).astype(np.float32)
    np.testing.assert_array_equal(y, [0.46875, 0.5, 0.5, 16, 20])


@pytest.mark.parametrize("to", list(FLOAT8) + [TP.FLOAT4E2M1, TP.FLOAT8E8M0, TP.BFLOAT16],
                         ids=lambda t: NAME[t])
def test_narrow_floats_back_to_float(to):
    x = np.array([0.5, 1.0, 2.0, 4.0], np.float32)   # exact in every one of them
    narrow = create_operator("Cast", to=to).forward(x)
    back = create_operator("Cast", to=TP.FLOAT).forward(narrow)
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back, x)
    assert_same(back, oracle("Cast", [narrow], to=TP.FLOAT))


# -- float4, E8M0 ----------------------------------------------------------------------------
def test_float4_matches_onnx_and_saturates():
    x = np.array([0.48, 0.25, 1.05, -3.5, -8, 9, 1e6, 1e-7, np.nan, np.inf, -np.inf, -4, 0.01,
                  -0.0, 2.5, 5.0], np.float32)
    y = create_operator("Cast", to=TP.FLOAT4E2M1).forward(x)
    assert y.dtype == ml_dtypes.float4_e2m1fn
    assert_same(y, oracle("Cast", [x], to=TP.FLOAT4E2M1))
    np.testing.assert_array_equal(y.astype(np.float32)[[5, 6, 9, 10, 14, 15]],
                                  [6, 6, 6, -6, 2, 4])   # 2.5 and 5 are ties: to even
    assert y.astype(np.float32)[8] == 0 and np.signbit(y.astype(np.float32)[8])   # NaN


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
def test_e8m0_matches_onnx_on_positive_values(round_mode, saturate):
    x = np.array([0.124, 0.125, 0.25, 0.5, 1.1, 1.4, 1.5, 1.6, 2.0, 3.0, 4.0, 8.0, 1e-20,
                  1e30, 3e38, 2.0 ** -126], np.float32)
    y = create_operator("Cast", to=TP.FLOAT8E8M0, round_mode=round_mode,
                        saturate=saturate).forward(x)
    assert y.dtype == ml_dtypes.float8_e8m0fnu
    assert_same(y, oracle("Cast", [x], to=TP.FLOAT8E8M0, round_mode=round_mode,
                          saturate=saturate))


def test_e8m0_rounding_modes():
    x = np.array([1.1, 1.5, 1.6, 2.0, 3.0], np.float32)

    def cast(mode):
        return create_operator("Cast", to=TP.FLOAT8E8M0, round_mode=mode).forward(x).astype(
            np.float32)

    np.testing.assert_array_equal(cast("up"), [2, 2, 2, 2, 4])
    np.testing.assert_array_equal(cast("down"), [1, 1, 1, 2, 2])
    np.testing.assert_array_equal(cast("nearest"), [1, 2, 2, 2, 4])   # 1.5·2^k: up


def test_e8m0_follows_the_spec_table():
    smallest, largest = 2.0 ** -127, 2.0 ** 127
    x = np.array([0.0, np.nan, np.inf, 1e300, 1e-300])   # float64: 1e-300 below 2^-127

    def cast(saturate, mode):
        return create_operator("Cast", to=TP.FLOAT8E8M0, saturate=saturate,
                               round_mode=mode).forward(x).astype(np.float64)

    up = cast(1, "up")
    np.testing.assert_array_equal(up[[0, 2, 3, 4]], [smallest, largest, largest, smallest])
    assert np.isnan(up[1])
    assert np.all(np.isnan(cast(0, "nearest")))


# -- 4- and 2-bit integers ------------------------------------------------------------------
@pytest.mark.parametrize("source", [np.float32, np.float16, np.int64, np.int8, np.uint8])
@pytest.mark.parametrize("to", list(SMALL_INTEGERS), ids=lambda t: NAME[t])
def test_small_integers_wrap_around(to, source):
    x = np.arange(-9, 16)
    if np.dtype(source).kind == "u":
        x = x[x >= 0]
    x = x.astype(source)
    y = create_operator("Cast", to=to).forward(x)
    assert y.dtype == np.dtype(SMALL_INTEGERS[to])
    assert_same(y, oracle("Cast", [x], to=to))
    bits = 4 if NAME[to].endswith("4") else 2
    low = x.astype(np.int64) % (1 << bits)
    if NAME[to].startswith("INT"):
        low = np.where(low >= 1 << (bits - 1), low - (1 << bits), low)
    np.testing.assert_array_equal(y.astype(np.int64), low)


@pytest.mark.parametrize("to", [TP.FLOAT, TP.FLOAT16, TP.INT8, TP.UINT8, TP.INT64],
                         ids=lambda t: NAME[t])
@pytest.mark.parametrize("source", list(SMALL_INTEGERS.values()),
                         ids=lambda d: np.dtype(d).name)
def test_small_integers_to_wider_types(source, to):
    info = ml_dtypes.iinfo(source)
    x = np.arange(info.min, info.max + 1).astype(source)
    if np.dtype(NUMERIC[to]).kind == "u" and info.min < 0:
        x = x[x.astype(np.int64) >= 0]
    y = create_operator("Cast", to=to).forward(x)
    assert_same(y, oracle("Cast", [x], to=to))


# -- strings --------------------------------------------------------------------------------
def test_numbers_to_strings_match_onnx():
    x = np.array([0.1, 1e10, -2.5, np.nan, -np.inf, 314.15926], np.float32)
    y = create_operator("Cast", to=TP.STRING).forward(x)
    assert y.dtype == object
    np.testing.assert_array_equal(y, oracle("Cast", [x], to=TP.STRING).astype(object))
    ints = np.array([-3, 0, 12345678901234567], np.int64)
    np.testing.assert_array_equal(create_operator("Cast", to=TP.STRING).forward(ints),
                                  np.array(["-3", "0", "12345678901234567"], object))


@pytest.mark.parametrize("as_bytes", [False, True])
def test_strings_to_numbers(as_bytes):
    text = ["3.14", "1000", "1e-5", "1E8", "+INF", "inf", "-INF", "NaN", "nan", " 7 "]
    x = np.array([t.encode() if as_bytes else t for t in text], object)
    y = create_operator("Cast", to=TP.FLOAT).forward(x)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, np.array([3.14, 1000, 1e-5, 1e8, np.inf, np.inf, -np.inf,
                                               np.nan, np.nan, 7], np.float32))
    ints = np.array(["100.5", "-3", "12345678901234567"], object)
    np.testing.assert_array_equal(create_operator("Cast", to=TP.INT64).forward(ints),
                                  [100, -3, 12345678901234567])
    flags = np.array(["0", "1", "True", "false", "2.5"], object)
    np.testing.assert_array_equal(create_operator("Cast", to=TP.BOOL).forward(flags),
                                  [False, True, True, False, True])
    np.testing.assert_array_equal(
        create_operator("CastLike").forward(np.array(["2.5"]), np.zeros(1, np.float64)), [2.5])


def test_strings_round_trip():
    x = np.array([0.1, -7.25, 3e-8], np.float64)
    text = create_operator("Cast", to=TP.STRING).forward(x)
    np.testing.assert_array_equal(create_operator("Cast", to=TP.DOUBLE).forward(text), x)
    b = np.array([True, False])
    text = create_operator("Cast", to=TP.STRING).forward(b)
    np.testing.assert_array_equal(create_operator("Cast", to=TP.BOOL).forward(text), b)


# -- gradients -----------------------------------------------------------------------------
def test_float_casts_pass_the_gradient_back():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    check_backward(create_operator("Cast", to=TP.DOUBLE), [x], lambda t: t.to(torch.float64))
    check_backward(create_operator("CastLike"), [x, np.zeros(1, np.float64)],
                   lambda t, _: t.to(torch.float64), wrt=[0])
    check_gradient(create_operator("Cast", to=TP.DOUBLE), [x.astype(np.float64)])
    op = create_operator("Cast", to=TP.BFLOAT16)
    y = op.forward(x)
    (dx,) = op.backward([np.ones_like(y)], [x], [y])
    assert dx.dtype == np.float32 and np.all(dx == 1)
    (dx,) = op.backward([None], [x], [y])
    assert dx.dtype == np.float32 and not dx.any()


def test_casts_to_or_from_integers_have_no_gradient():
    x = np.array([1.5, 2.5], np.float32)
    op = create_operator("Cast", to=TP.INT32)
    assert op.backward([None], [x], [op.forward(x)]) == [None]
    i = np.array([1, 2], np.int32)
    op = create_operator("Cast", to=TP.FLOAT)
    assert op.backward([np.ones(2, np.float32)], [i], [op.forward(i)]) == [None]
    like = create_operator("CastLike")
    assert like.backward([None], [x, i], [like.forward(x, i)]) == [None, None]


# -- errors --------------------------------------------------------------------------------
def test_bad_attributes_raise_clear_errors():
    with pytest.raises(Deep500Error, match="Cast needs the attribute to"):
        create_operator("Cast")
    with pytest.raises(Deep500Error, match="to='NOPE' is not an ONNX element type"):
        create_operator("Cast", to="NOPE")
    with pytest.raises(Deep500Error, match="to=999 is not an ONNX element type"):
        create_operator("Cast", to=999)
    with pytest.raises(UnsupportedError, match="cannot convert to UNDEFINED"):
        create_operator("Cast", to=TP.UNDEFINED)
    with pytest.raises(Deep500Error, match="round_mode must be one of"):
        create_operator("Cast", to=TP.FLOAT8E8M0, round_mode="sideways")
    with pytest.raises(Deep500Error, match="CastLike: saturate must be 0 or 1"):
        create_operator("CastLike", saturate=2)
    with pytest.raises(Deep500Error, match="cannot read a number"):
        create_operator("Cast", to=TP.FLOAT).forward(np.array(["Hello World!"]))


def test_every_onnx_type_numpy_can_hold_is_a_target():
    for name, to in TP.DataType.items():
        if name == "UNDEFINED":
            continue
        try:
            dtype = helper.tensor_dtype_to_np_dtype(to)
        except (KeyError, TypeError, ValueError):
            continue
        op = create_operator("Cast", to=to)
        assert op.dtype == (np.dtype(object) if to == TP.STRING else np.dtype(dtype)), name
        op.forward(np.array([1.0, 2.0], np.float32))
