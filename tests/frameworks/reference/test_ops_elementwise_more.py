"""Reference elementwise operators of the float, integer and logic families (activations,
trigonometric and hyperbolic functions, rounding, Abs, Sign, Reciprocal, Mod, PRelu,
Mean, comparisons, logical and bitwise operators, BitShift, IsInf, IsNaN) against onnx's
ReferenceEvaluator on one-node models, PyTorch autograd and finite differences."""
import math

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error, ShapeError
from tests.frameworks.reference.op_checks import check_backward, check_gradient, torch

ml_dtypes = pytest.importorskip("ml_dtypes")   # installed with onnx >= 1.18

F = torch.nn.functional
DTYPES = [np.float32, np.float64]
# Our float32 computation against onnx's float32 computation of the same formula (maybe
# written otherwise, e.g. exp(x) - 1 for expm1(x) at |x| >= 0.1): a few float32 ulps.
ORACLE_TOL = {np.float16: dict(rtol=2e-3, atol=1e-3), np.float32: dict(rtol=2e-5, atol=1e-6),
              np.float64: dict(rtol=1e-12, atol=1e-14)}


def oracle(op_type, inputs, **attributes):
    """The output of onnx.reference.ReferenceEvaluator on a one-node model."""
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op_type, names, ["y"], **attributes)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)])
    model = helper.make_model(graph)
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))[0]


def sample(shape, dtype, low, high, avoid=(), gap=0.05, seed=0):
    """Uniform values in [low, high], none within ``gap`` of the points in ``avoid``
    (kinks and jumps, where finite differences and float rounding are meaningless)."""
    x = np.random.default_rng(seed).uniform(low, high, shape)
    for point in avoid:
        near = np.abs(x - point) < gap
        x = np.where(near, point + np.where(x < point, -2 * gap, 2 * gap), x)
    return x.astype(dtype)


def assert_close(got, want, dtype):
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, **ORACLE_TOL[np.dtype(dtype).type])


# -- one-input float operators ---------------------------------------------------------
ALPHA, GAMMA = float(np.float32(1.6732632423543772)), float(np.float32(1.0507009873554805))


def _shrink(lambd, bias):
    return lambda x: torch.where(x < -lambd, x + bias,
                                 torch.where(x > lambd, x - bias, torch.zeros_like(x)))


# (op_type, attributes, (low, high), kinks, torch function)
UNARY = [
    ("Sin", {}, (-4, 4), (), torch.sin),
    ("Cos", {}, (-4, 4), (), torch.cos),
    ("Tan", {}, (-1.4, 1.4), (), torch.tan),
    ("Asin", {}, (-0.9, 0.9), (), torch.asin),
    ("Acos", {}, (-0.9, 0.9), (), torch.acos),
    ("Atan", {}, (-5, 5), (), torch.atan),
    ("Sinh", {}, (-3, 3), (), torch.sinh),
    ("Cosh", {}, (-3, 3), (), torch.cosh),
    ("Asinh", {}, (-5, 5), (), torch.asinh),
    ("Acosh", {}, (1.1, 5), (), torch.acosh),
    ("Atanh", {}, (-0.9, 0.9), (), torch.atanh),
    ("Reciprocal", {}, (0.2, 3), (), torch.reciprocal),
    ("Abs", {}, (-3, 3), (0,), torch.abs),
    ("Relu", {}, (-3, 3), (0,), F.relu),
    ("Elu", {}, (-3, 3), (0,), F.elu),
    ("Elu", {"alpha": 0.5}, (-3, 3), (0,), lambda x: F.elu(x, 0.5)),
    # ONNX float attributes (and defaults) are float32: SELU's constants rounded so.
    ("Selu", {}, (-3, 3), (0,),
     lambda x: GAMMA * torch.where(x > 0, x, ALPHA * torch.expm1(x))),
    ("Selu", {"alpha": 2.0, "gamma": 0.5}, (-3, 3), (0,),
     lambda x: 0.5 * torch.where(x > 0, x, 2.0 * torch.expm1(x))),
    ("Celu", {}, (-3, 3), (0,), F.celu),
    ("Celu", {"alpha": 2.0}, (-3, 3), (0,), lambda x: F.celu(x, 2.0)),
    ("HardSigmoid", {}, (-4, 4), (-2.5, 2.5),
     lambda x: torch.clamp(float(np.float32(0.2)) * x + 0.5, 0, 1)),
    ("HardSigmoid", {"alpha": 0.5, "beta": 0.25}, (-3, 3), (-0.5, 1.5),
     lambda x: torch.clamp(0.5 * x + 0.25, 0, 1)),
    ("HardSwish", {}, (-5, 5), (-3, 3), F.hardswish),
    ("Softplus", {}, (-5, 5), (), F.softplus),
    ("Softsign", {}, (-5, 5), (0,), F.softsign),
    ("ThresholdedRelu", {}, (-3, 3), (1.0,), lambda x: F.threshold(x, 1.0, 0.0)),
    ("ThresholdedRelu", {"alpha": -0.5}, (-3, 3), (-0.5,),
     lambda x: F.threshold(x, -0.5, 0.0)),
    ("Shrink", {}, (-3, 3), (-0.5, 0.5), _shrink(0.5, 0.0)),
    ("Shrink", {"lambd": 1.0, "bias": 0.25}, (-3, 3), (-1, 1), _shrink(1.0, 0.25)),
    ("Mish", {}, (-5, 5), (), F.mish),
    ("Swish", {}, (-5, 5), (), F.silu),
    ("Swish", {"alpha": 2.0}, (-5, 5), (), lambda x: x * torch.sigmoid(2.0 * x)),
]
UNARY_IDS = [f"{u[0]}{u[1] or ''}" for u in UNARY]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op_type,attrs,domain,kinks,torch_fn", UNARY, ids=UNARY_IDS)
def test_unary_forward_matches_onnx(op_type, attrs, domain, kinks, torch_fn, dtype):
    x = sample((3, 4, 5), dtype, *domain, avoid=kinks)
    y = create_operator(op_type, **attrs).forward(x)
    if op_type == "HardSwish" and dtype == np.float64:
        # onnx's evaluator takes 1/6 as float32; the operator's 1/6 is exact.
        np.testing.assert_allclose(y, oracle(op_type, [x], **attrs), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(y, F.hardswish(torch.from_numpy(x)).numpy(), rtol=1e-14,
                                   atol=1e-15)
    else:
        assert_close(y, oracle(op_type, [x], **attrs), dtype)
    assert create_operator(op_type, **attrs).forward(x[0, 0, 0]).shape == ()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op_type,attrs,domain,kinks,torch_fn", UNARY, ids=UNARY_IDS)
def test_unary_backward_matches_torch(op_type, attrs, domain, kinks, torch_fn, dtype):
    x = sample((2, 3, 4), dtype, *domain, avoid=kinks, seed=1)
    (dx,) = check_backward(create_operator(op_type, **attrs), [x], torch_fn)
    assert dx.dtype == dtype


@pytest.mark.parametrize("op_type,attrs,domain,kinks,torch_fn", UNARY, ids=UNARY_IDS)
def test_unary_finite_differences(op_type, attrs, domain, kinks, torch_fn):
    # float64; step 1e-6 stays far from the kinks (>= 0.05 away).
    x = sample((3, 5), np.float64, *domain, avoid=kinks, seed=2)
    check_gradient(create_operator(op_type, **attrs), [x])


@pytest.mark.parametrize("op_type", ["Sin", "Elu", "Softplus", "Mish", "HardSwish", "Abs"])
def test_unary_float16_matches_onnx(op_type):
    x = sample((4, 5), np.float16, -3, 3, avoid=(0,))
    assert_close(create_operator(op_type).forward(x), oracle(op_type, [x]), np.float16)


@pytest.mark.parametrize("op_type", ["Sin", "Elu", "Softsign", "Round"])
def test_unary_bfloat16_is_computed_in_float32(op_type):
    x = sample((6,), np.float32, -3, 3).astype(ml_dtypes.bfloat16)
    y = create_operator(op_type).forward(x)
    assert y.dtype == ml_dtypes.bfloat16
    want = create_operator(op_type).forward(x.astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(y.astype(np.float32), want.astype(np.float32))
    if op_type != "Round":
        (dx,) = create_operator(op_type).backward([np.ones_like(y)], [x], [y])
        assert dx.dtype == ml_dtypes.bfloat16


@pytest.mark.parametrize("op_type", ["Softplus", "Mish", "Swish", "Elu", "Selu", "Celu"])
def test_activations_do_not_overflow(op_type):
    x = np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0], np.float32)
    with np.errstate(all="raise"):
        y = create_operator(op_type).forward(x)
        (dx,) = create_operator(op_type).backward([np.ones_like(y)], [x], [y])
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(dx))


def test_functions_outside_their_domain_give_nan():
    x = np.array([2.0, -2.0], np.float64)
    for op_type in ("Asin", "Acos", "Atanh"):
        assert np.all(np.isnan(create_operator(op_type).forward(x)))
    assert np.isnan(create_operator("Acosh").forward(np.array(0.5))).all()
    np.testing.assert_array_equal(create_operator("Reciprocal").forward(np.array([0.0, -0.0])),
                                  [np.inf, -np.inf])


# -- rounding and sign ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("op_type", ["Round", "Floor", "Ceil", "Sign"])
def test_rounding_matches_onnx(op_type, dtype):
    x = np.array([-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 0.49999997, -3.7, 3.2, np.nan,
                  np.inf, -np.inf], dtype)
    y = create_operator(op_type).forward(x)
    np.testing.assert_array_equal(y, oracle(op_type, [x]))
    assert y.dtype == dtype
    (dx,) = create_operator(op_type).backward([np.ones_like(y)], [x], [y])
    assert dx.dtype == dtype and not dx.any()


def test_round_halves_to_even():
    y = create_operator("Round").forward(np.array([0.5, 1.5, 2.5, -0.5, -2.5], np.float32))
    np.testing.assert_array_equal(y, [0, 2, 2, -0.0, -2])


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint64])
@pytest.mark.parametrize("op_type,attrs", [("Abs", {}), ("Sign", {}), ("Shrink", {}),
                                           ("Shrink", {"lambd": 2.0, "bias": 1.0}),
                                           ("Shrink", {"lambd": 1.5, "bias": 0.5})],
                         ids=["Abs", "Sign", "Shrink", "Shrink2", "Shrink3"])
def test_integer_inputs_match_onnx(op_type, attrs, dtype):
    info = np.iinfo(dtype)
    # onnx's Shrink computes in float64: exact up to 2^53 only.
    low, high = max(info.min, -2 ** 40), min(info.max, 2 ** 40)
    small = [v for v in (-3, -2, -1, 0, 1, 2, 3) if v >= info.min]
    x = np.array([low, low + 1, *small, high - 1, high], dtype)
    op = create_operator(op_type, **attrs)
    y = op.forward(x)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, oracle(op_type, [x], **attrs))
    assert op.backward([None], [x], [y]) == [None]


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_relu_of_signed_integers(dtype):
    x = np.array([np.iinfo(dtype).min, -1, 0, 3, np.iinfo(dtype).max], dtype)
    op = create_operator("Relu")
    y = op.forward(x)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, oracle("Relu", [x]))
    assert op.backward([None], [x], [y]) == [None]
    with pytest.raises(ShapeError, match="Relu: inputs of dtype uint8"):
        op.forward(x.astype(np.uint8))


def test_relu_without_upstream_gradient():
    x = np.array([-1.0, 2.0], np.float32)
    (dx,) = create_operator("Relu").backward([None], [x], [x])
    assert dx.dtype == np.float32 and not dx.any()


def test_shrink_of_64_bit_integers_is_exact():
    x = np.array([-2 ** 63, -2, 0, 2, 2 ** 63 - 1], np.int64)
    y = create_operator("Shrink", lambd=1.0, bias=1.0).forward(x)
    np.testing.assert_array_equal(y, [-2 ** 63 + 1, -1, 0, 1, 2 ** 63 - 2])


def test_abs_keeps_the_most_negative_integer():
    # Two's complement has no +128 in int8.
    y = create_operator("Abs").forward(np.array([-128, -5], np.int8))
    np.testing.assert_array_equal(y, np.array([-128, 5], np.int8))


# -- IsInf, IsNaN -------------------------------------------------------------------------
SPECIALS = [1.0, -1.0, 0.0, np.inf, -np.inf, np.nan, 3e38, -3e38]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("attrs", [{}, {"detect_negative": 0}, {"detect_positive": 0},
                                   {"detect_negative": 0, "detect_positive": 0}], ids=str)
def test_isinf_matches_onnx(attrs, dtype):
    with np.errstate(over="ignore"):   # ±3e38 is ±inf in float16
        x = np.array(SPECIALS, np.float64).astype(dtype)
    y = create_operator("IsInf", **attrs).forward(x)
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, oracle("IsInf", [x], **attrs))
    assert create_operator("IsInf").backward([None], [x], [y]) == [None]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16,
                                   ml_dtypes.float8_e4m3fn])
def test_isnan_and_isinf_of_all_float_types(dtype):
    x = np.array([1.0, np.nan, np.inf, -np.inf], np.float32).astype(dtype)
    finite_type = dtype == ml_dtypes.float8_e4m3fn   # no infinities: they became NaN
    np.testing.assert_array_equal(create_operator("IsNaN").forward(x),
                                  [False, True, finite_type, finite_type])
    np.testing.assert_array_equal(create_operator("IsInf").forward(x),
                                  [False, False, not finite_type, not finite_type])


def test_isnan_matches_onnx():
    x = np.array(SPECIALS, np.float32)
    np.testing.assert_array_equal(create_operator("IsNaN").forward(x), oracle("IsNaN", [x]))


# -- comparisons, logic, bitwise -----------------------------------------------------------
BROADCASTS = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((4, 1), (3,)), ((), (2, 3)),
              ((1, 3, 1), (2, 1, 5))]
COMPARE_DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int64, np.uint8,
                  np.uint32, np.uint64]


@pytest.mark.parametrize("dtype", COMPARE_DTYPES)
@pytest.mark.parametrize("op_type", ["Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons_match_onnx(op_type, dtype):
    rng = np.random.default_rng(3)
    for shape_a, shape_b in BROADCASTS:
        # Few distinct values, so that many pairs are equal (where <= and < differ).
        a = rng.integers(0, 4, shape_a).astype(dtype)
        b = rng.integers(0, 4, shape_b).astype(dtype)
        c = create_operator(op_type).forward(a, b)
        assert c.dtype == np.bool_ and isinstance(c, np.ndarray)
        np.testing.assert_array_equal(c, oracle(op_type, [a, b]))
        assert create_operator(op_type).backward([None], [a, b], [c]) == [None, None]


def test_comparisons_with_nan_are_false():
    a, b = np.array([np.nan, 1.0, np.nan]), np.array([1.0, np.nan, np.nan])
    for op_type in ("Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
        assert not create_operator(op_type).forward(a, b).any()


def test_comparisons_of_bfloat16():
    a = np.array([1.0, 2.0, 3.0], ml_dtypes.bfloat16)
    b = np.array([2.0, 2.0, 2.0], ml_dtypes.bfloat16)
    np.testing.assert_array_equal(create_operator("LessOrEqual").forward(a, b),
                                  [True, True, False])


@pytest.mark.parametrize("op_type", ["And", "Or", "Xor"])
def test_logical_match_onnx(op_type):
    rng = np.random.default_rng(4)
    for shape_a, shape_b in BROADCASTS:
        a, b = rng.random(shape_a) < 0.5, rng.random(shape_b) < 0.5
        c = create_operator(op_type).forward(a, b)
        assert c.dtype == np.bool_
        np.testing.assert_array_equal(c, oracle(op_type, [a, b]))


def test_not():
    x = np.array([[True, False], [False, False]])
    y = create_operator("Not").forward(x)
    np.testing.assert_array_equal(y, oracle("Not", [x]))
    assert create_operator("Not").backward([None], [x], [y]) == [None]


INTEGERS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def random_integers(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("dtype", INTEGERS)
@pytest.mark.parametrize("op_type", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise_match_onnx(op_type, dtype):
    rng = np.random.default_rng(5)
    for shape_a, shape_b in BROADCASTS:
        a, b = random_integers(rng, shape_a, dtype), random_integers(rng, shape_b, dtype)
        c = create_operator(op_type).forward(a, b)
        assert c.dtype == dtype
        np.testing.assert_array_equal(c, oracle(op_type, [a, b]))


@pytest.mark.parametrize("dtype", INTEGERS)
def test_bitwise_not_matches_onnx(dtype):
    x = random_integers(np.random.default_rng(6), (3, 4), dtype)
    y = create_operator("BitwiseNot").forward(x)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, oracle("BitwiseNot", [x]))
    np.testing.assert_array_equal(create_operator("BitwiseNot").forward(y), x)


@pytest.mark.parametrize("dtype", INTEGERS)
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_matches_onnx(direction, dtype):
    rng = np.random.default_rng(7)
    bits = np.iinfo(dtype).bits
    x = random_integers(rng, (4, 6), dtype)
    # Shifts in range, at the edges and out of range (negative only for signed types).
    low = -3 if np.iinfo(dtype).min < 0 else 0
    y = rng.integers(low, bits + 3, (6,)).astype(dtype)
    y[:3] = [0, bits - 1, bits]
    z = create_operator("BitShift", direction=direction).forward(x, y)
    assert z.dtype == dtype
    np.testing.assert_array_equal(z, oracle("BitShift", [x, y], direction=direction))


def test_bitshift_follows_the_spec_examples():
    left = create_operator("BitShift", direction="LEFT")
    right = create_operator("BitShift", direction=b"RIGHT")   # as ONNX attributes hold it
    np.testing.assert_array_equal(right.forward(np.array([1, 4], np.uint8),
                                                np.array([1, 1], np.uint8)), [0, 2])
    np.testing.assert_array_equal(left.forward(np.array([1, 2], np.uint8),
                                               np.array([1, 2], np.uint8)), [2, 8])
    x = np.array([-8, -8, 8, 64, -1], np.int8)
    y = np.array([1, 9, 9, 1, -1], np.int8)
    # Arithmetic right shift; out of range: -1 for negative X, 0 otherwise.
    np.testing.assert_array_equal(right.forward(x, y), [-4, -1, 0, 32, -1])
    # Bits shifted past the sign bit are lost: 64 << 1 = -128 in int8.
    np.testing.assert_array_equal(left.forward(x, y), [-16, 0, 0, -128, 0])


# -- Mod ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint64,
                                   np.float16, np.float32, np.float64])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_matches_onnx(fmod, dtype):
    rng = np.random.default_rng(8)
    signed = not np.issubdtype(dtype, np.unsignedinteger)
    for shape_a, shape_b in BROADCASTS:
        a = rng.integers(-20 if signed else 0, 20, shape_a).astype(dtype)
        b = rng.integers(1, 7, shape_b) * (rng.choice([-1, 1], shape_b) if signed else 1)
        b = b.astype(dtype)
        if np.issubdtype(dtype, np.floating):
            a = (a + rng.uniform(0.1, 0.9, shape_a)).astype(dtype)
        c = create_operator("Mod", fmod=fmod).forward(a, b)
        assert c.dtype == dtype
        np.testing.assert_array_equal(c, oracle("Mod", [a, b], fmod=fmod))


def test_mod_signs_and_special_values():
    a = np.array([-4, 7, -7, 7], np.int32)
    b = np.array([3, -3, -3, 0], np.int32)
    np.testing.assert_array_equal(create_operator("Mod").forward(a, b), [2, -2, -1, 0])
    np.testing.assert_array_equal(create_operator("Mod", fmod=1).forward(a, b),
                                  [-1, 1, -1, 0])
    x = np.array([np.inf, 1.0, 1.0, -1.0, -0.0, np.nan])
    y = np.array([2.0, 0.0, np.inf, np.inf, 3.0, 1.0])
    # fmod=0: -1 mod inf = inf (the sign of the divisor); fmod=1: x for infinite y.
    np.testing.assert_array_equal(create_operator("Mod").forward(x, y),
                                  [np.nan, np.nan, 1.0, np.inf, 0.0, np.nan])
    np.testing.assert_array_equal(create_operator("Mod", fmod=1).forward(x, y),
                                  [np.nan, np.nan, 1.0, -1.0, -0.0, np.nan])


@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_gradient(fmod):
    rng = np.random.default_rng(9)
    b = rng.uniform(0.5, 2.0, (1, 4)) * rng.choice([-1, 1], (1, 4))
    quotient = rng.integers(-5, 5, (3, 4)) + rng.uniform(0.2, 0.8, (3, 4))
    a = quotient * b   # a/b is 0.2 or more from an integer: no jump within the step
    op = create_operator("Mod", fmod=fmod)
    check_gradient(op, [a, b])
    torch_fn = torch.fmod if fmod else torch.remainder
    check_backward(op, [a.astype(np.float32), b.astype(np.float32)], torch_fn)
    ints = [np.array([5, 7]), np.array([2, 3])]
    assert op.backward([None], ints, [op.forward(*ints)]) == [None, None]


# -- PRelu ---------------------------------------------------------------------------------
PRELU_SHAPES = [((3, 4, 5), (5,)), ((3, 4, 5), (4, 1)), ((2, 3, 4, 4), (3, 1, 1)),
                ((3, 4), ()), ((3, 4), (3, 4))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape,slope_shape", PRELU_SHAPES, ids=str)
def test_prelu_matches_onnx_and_torch(x_shape, slope_shape, dtype):
    x = sample(x_shape, dtype, -3, 3, avoid=(0,), seed=10)
    slope = sample(slope_shape, dtype, -0.5, 0.8, seed=11)
    op = create_operator("PRelu")
    y = op.forward(x, slope)
    assert_close(y, oracle("PRelu", [x, slope]), dtype)
    dx, dslope = check_backward(op, [x, slope], lambda t, s: torch.where(t < 0, s * t, t))
    assert dx.shape == x_shape and dslope.shape == slope_shape
    if dtype == np.float64:
        check_gradient(op, [x, slope])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32])
def test_prelu_integers_match_onnx(dtype):
    x = np.array([[-3, -1, 0, 2]], np.int64).astype(dtype)
    slope = np.array([2], dtype)
    y = create_operator("PRelu").forward(x, slope)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, oracle("PRelu", [x, slope]))


def test_prelu_slope_must_broadcast_to_x():
    with pytest.raises(ShapeError, match="PRelu.*slope of shape \\(3, 1\\).*\\(4,\\)"):
        create_operator("PRelu").forward(np.ones(4), np.ones((3, 1)))


# -- Mean ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shapes", [[(3, 4)], [(3, 4), (3, 4)], [(2, 3, 4), (4,), (3, 1)],
                                    [(2, 2), (), (1, 2), (2, 1)]], ids=str)
def test_mean_matches_onnx(shapes, dtype):
    inputs = [sample(s, dtype, -3, 3, seed=i) for i, s in enumerate(shapes)]
    op = create_operator("Mean")
    y = op.forward(*inputs)
    assert_close(y, oracle("Mean", inputs), dtype)
    if dtype == np.float64:
        check_gradient(op, inputs)
    if dtype == np.float32:
        check_backward(op, inputs, lambda *t: sum(torch.broadcast_tensors(*t)) / len(t))


# -- errors --------------------------------------------------------------------------------
def test_bad_inputs_raise_clear_errors():
    f32, i32 = np.ones(3, np.float32), np.ones(3, np.int32)
    with pytest.raises(ShapeError, match="Less: inputs have different dtypes"):
        create_operator("Less").forward(f32, f32.astype(np.float64))
    with pytest.raises(ShapeError, match="Greater.*\\(2,\\).*\\(3,\\).*broadcast"):
        create_operator("Greater").forward(np.ones(2), np.ones(3))
    with pytest.raises(ShapeError, match="And: inputs of dtype float32.*bool"):
        create_operator("And").forward(f32, f32)
    with pytest.raises(ShapeError, match="BitwiseAnd: inputs of dtype float32.*integer"):
        create_operator("BitwiseAnd").forward(f32, f32)
    with pytest.raises(ShapeError, match="Sin: inputs of dtype int32.*floating-point"):
        create_operator("Sin").forward(i32)
    with pytest.raises(ShapeError, match="Less: inputs of dtype bool"):
        create_operator("Less").forward(np.ones(2, bool), np.ones(2, bool))
    with pytest.raises(ShapeError, match="Mean: needs at least one input"):
        create_operator("Mean").forward()
    with pytest.raises(ShapeError, match="Mod.*broadcast"):
        create_operator("Mod").forward(np.ones(2), np.ones(3))


def test_bad_attributes_raise_clear_errors():
    with pytest.raises(Deep500Error, match="BitShift: the attribute direction must be"):
        create_operator("BitShift")
    with pytest.raises(Deep500Error, match="BitShift.*'UP'"):
        create_operator("BitShift", direction="UP")
    with pytest.raises(Deep500Error, match="Mod: fmod must be 0 or 1"):
        create_operator("Mod", fmod=2)
    with pytest.raises(Deep500Error, match="Celu: alpha must be nonzero"):
        create_operator("Celu", alpha=0.0)
    with pytest.raises(Deep500Error, match="Elu has no attributes \\['beta'\\]"):
        create_operator("Elu", beta=1.0)


def test_selu_defaults_are_the_papers_constants():
    op = create_operator("Selu")
    assert math.isclose(op.attr("alpha"), 1.6732632423543772, rel_tol=1e-7)
    assert math.isclose(op.attr("gamma"), 1.0507009873554805, rel_tol=1e-7)
