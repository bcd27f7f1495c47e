"""ONNX's casts to the element types TensorFlow carries in wider ones (int4/uint4/int2/
uint2, FLOAT4E2M1, the float8 types, FLOAT8E8M0), computed with TensorFlow operations
(``deep500/frameworks/tensorflow/ops/_carried_casts.py``), must give exactly what ONNX's
Cast rules give (``deep500.utils.onnx_interop.cast``, ml_dtypes' conversion): no
tolerance, a single wrong bit fails. Then Cast, CastLike and QuantizeLinear to these
types through the executor, against ``onnx.reference.ReferenceEvaluator``."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

tf = pytest.importorskip("tensorflow")

import deep500.frameworks.tensorflow as d5tf  # noqa: E402
from deep500.frameworks.tensorflow.ops._carried_casts import (CARRIED,  # noqa: E402
                                                              cast_to_carried)
from deep500.utils.onnx_interop import cast  # noqa: E402

OPSET = onnx.defs.onnx_opset_version()
FLOATS = sorted((d for d in CARRIED if cast.dtype_kind(d) == "f"), key=str)
INTEGERS = sorted((d for d in CARRIED if cast.dtype_kind(d) != "f"), key=str)
SMALLEST_NORMAL_FLOAT32 = float(np.finfo(np.float32).tiny)


def grid(dtype) -> np.ndarray:
    """The finite values of a float type (every bit pattern)."""
    count = 16 if dtype == cast.FLOAT4 else 256
    values = np.arange(count, dtype=np.uint8).view(dtype).astype(np.float64)
    return np.unique(values[np.isfinite(values)])


def probes(dtype) -> np.ndarray:
    """The type's values, the midpoints between neighbours (ties) and their float64
    neighbours, values beyond the range, zeros, infinities and NaN, random values."""
    values = grid(dtype)
    mids = (values[1:] + values[:-1]) / 2
    special = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e30, -1e30, 1e-30, 2.0 ** -127,
               1.5 * 2.0 ** -127, 2.0 ** 127, 1.7 * 2.0 ** 127]
    random = np.random.default_rng(7).normal(size=2000) * np.repeat([1e-3, 1, 50, 1e5], 500)
    return np.concatenate([values, mids, np.nextafter(mids, np.inf),
                           np.nextafter(mids, -np.inf), values * 2, values / 2, special,
                           random])


def same_floats(got: np.ndarray, expected: np.ndarray) -> None:
    got, expected = got.astype(np.float64), expected.astype(np.float64)
    both_nan = np.isnan(got) & np.isnan(expected)
    equal = (got == expected) & (np.signbit(got) == np.signbit(expected))
    bad = ~(equal | both_nan)
    assert not bad.any(), (f"{bad.sum()} differ, first: got {got[bad][:4]}, expected "
                           f"{expected[bad][:4]}")


@pytest.mark.parametrize("source", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_casts_round_as_onnx(dtype, saturate, source):
    with np.errstate(all="ignore"):
        x = probes(dtype).astype(source)
    if dtype == cast.E8M0 and source is not np.float64:
        # TensorFlow's CPU kernels read float32/float16 subnormals as zero.
        x = x[(np.abs(x.astype(np.float64)) >= SMALLEST_NORMAL_FLOAT32) | (x == 0)
              | ~np.isfinite(x)]
    for round_mode in cast.ROUND_MODES if dtype == cast.E8M0 else ("up",):
        got = cast_to_carried(tf.constant(x), dtype, saturate, round_mode).numpy()
        assert got.dtype == CARRIED[dtype]
        with np.errstate(all="ignore"):
            expected = cast.convert(x, dtype, saturate, round_mode).astype(np.float32)
        same_floats(got, expected)


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_casts_wrap_as_onnx(dtype):
    """Floats truncate toward zero, then the low bits are kept (two's complement)."""
    x = np.concatenate([np.arange(-40, 40), np.arange(-40, 40) + 0.75,
                        np.arange(-40, 40) - 0.75])
    for source in (np.float32, np.int32, np.int64):
        values = x.astype(source)
        got = cast_to_carried(tf.constant(values), dtype).numpy()
        assert got.dtype == CARRIED[dtype]
        np.testing.assert_array_equal(got, cast.convert(values, dtype).astype(got.dtype))


def one_node(node, inputs: dict, output_type: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node], "carried",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                       value.shape) for name, value in inputs.items()],
        [helper.make_tensor_value_info("y", output_type, [None] * X.ndim)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def run_both(model: onnx.ModelProto, feeds: dict) -> tuple[np.ndarray, np.ndarray]:
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    got = d5tf.from_onnx(model).inference(feeds)["y"]
    assert got.dtype == expected.dtype
    return got, expected


ELEMENTS = {dtype: helper.np_dtype_to_tensor_dtype(dtype) for dtype in CARRIED}
X = np.array([[0.3, -1.7, 2.5, 100.0], [-0.0, 7.5, -300.0, 0.02]], np.float32)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("dtype", sorted(CARRIED, key=str), ids=str)
def test_cast_through_the_executor(dtype, mode):
    element = ELEMENTS[dtype]
    node = helper.make_node("Cast", ["x"], ["y"], to=element)
    model = one_node(node, {"x": X}, element)
    expected = ReferenceEvaluator(model).run(None, {"x": X})[0]
    got = d5tf.from_onnx(model, mode=mode).inference({"x": X})["y"]
    assert got.dtype == dtype
    same_floats(got.astype(np.float32), expected.astype(np.float32))


@pytest.mark.parametrize("dtype", sorted(CARRIED, key=str), ids=str)
def test_castlike_takes_the_declared_type_of_a_carried_like(dtype):
    like = np.zeros([1], dtype)
    node = helper.make_node("CastLike", ["x", "like"], ["y"])
    got, expected = run_both(one_node(node, {"x": X, "like": like}, ELEMENTS[dtype]),
                             {"x": X, "like": like})
    same_floats(got.astype(np.float32), expected.astype(np.float32))


@pytest.mark.parametrize("dtype", sorted(set(CARRIED) - {cast.E8M0}, key=str), ids=str)
def test_quantizelinear_to_a_carried_type(dtype):
    """Per-axis scales; integer targets round half to even and saturate to the type's
    range, float8 targets cast x / scale, FLOAT4E2M1 x / scale + zero point."""
    scale = np.array([0.5, 2.0], np.float32)
    zero = np.array([1, 0]).astype(dtype) if cast.dtype_kind(dtype) != "f" else np.zeros(
        [2], dtype)
    node = helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["y"], axis=0)
    got, expected = run_both(one_node(node, {"x": X, "scale": scale, "zero": zero},
                                      ELEMENTS[dtype]),
                             {"x": X, "scale": scale, "zero": zero})
    same_floats(got.astype(np.float32), expected.astype(np.float32))


def test_a_carried_value_read_by_quantizelinear_is_carried():
    """The zero point only decides the output type and is added exactly: carried."""
    zero = np.array(3, ml_dtypes.int4)
    node = helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["y"])
    model = one_node(node, {"x": X, "scale": np.array(1.0, np.float32), "zero": zero},
                     TensorProto.INT4)
    got = d5tf.from_onnx(model).inference({"x": X, "scale": np.array(1.0, np.float32),
                                           "zero": zero})["y"]
    np.testing.assert_array_equal(got.astype(np.int8),
                                  np.clip(np.rint(X) + 3, -8, 7).astype(np.int8))
