"""ONNX's extension element types (bfloat16, float8, int4/uint4, int2/uint2, float4) fed
to and fetched from the PyTorch and TensorFlow executors: bit for bit where the framework
has the type, carried in a wider exact type where it reads or produces them (Cast,
CastLike, QuantizeLinear), refused (UnsupportedError naming the type and the node or
value) where a node would compute with them.
Every bit pattern of each type is fed; the oracle is ml_dtypes' own conversion, which is
exact for widening to float32 (no tolerance: a single wrong bit fails)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from deep500.utils.errors import UnsupportedError
from deep500.utils.onnx_interop.carried_types import carriers, restore

OPSET = onnx.defs.onnx_opset_version()

# ONNX element type name -> ml_dtypes type name
TYPES = {
    "BFLOAT16": "bfloat16", "FLOAT8E4M3FN": "float8_e4m3fn",
    "FLOAT8E4M3FNUZ": "float8_e4m3fnuz", "FLOAT8E5M2": "float8_e5m2",
    "FLOAT8E5M2FNUZ": "float8_e5m2fnuz", "FLOAT8E8M0": "float8_e8m0fnu",
    "INT4": "int4", "UINT4": "uint4", "INT2": "int2", "UINT2": "uint2",
    "FLOAT4E2M1": "float4_e2m1fn",
}
TYPES = {k: v for k, v in TYPES.items()
         if hasattr(TensorProto, k) and hasattr(ml_dtypes, v)}
SUB_BYTE = {"INT4", "UINT4", "INT2", "UINT2", "FLOAT4E2M1"}


def every_value(onnx_name: str) -> np.ndarray:
    """Every bit pattern of the type (one per byte for sub-byte types, whose arrays
    ml_dtypes stores one value per byte), shaped (n/8, 8)."""
    dtype = np.dtype(getattr(ml_dtypes, TYPES[onnx_name]))
    if onnx_name in SUB_BYTE:
        bits = 4 if "4" in onnx_name else 2
        if onnx_name.startswith("INT"):
            values = np.arange(-(1 << (bits - 1)), 1 << (bits - 1))
        elif onnx_name.startswith("UINT"):
            values = np.arange(1 << bits)
        else:   # float4 E2M1: the 16 values
            values = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4,
                               -6])
        return np.resize(values.astype(dtype), (2, 8))
    width = np.uint8 if dtype.itemsize == 1 else np.uint16
    return np.arange(1 << (8 * dtype.itemsize), dtype=np.int64).astype(width).view(
        dtype).reshape(-1, 8)


def bits(array: np.ndarray) -> np.ndarray:
    return array.view(np.uint8 if array.dtype.itemsize == 1 else np.uint16)


def model(op_type: str, in_type: int, out_type: int, shape, **attributes):
    node = helper.make_node(op_type, ["x"], ["y"], name=f"{op_type.lower()}0", **attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", in_type, shape)],
                              [helper.make_tensor_value_info("y", out_type, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def pytorch_run(proto, feeds):
    d5pt = pytest.importorskip("deep500.frameworks.pytorch")
    return d5pt.from_onnx(proto).inference(feeds)


def tensorflow_run(proto, feeds):
    d5tf = pytest.importorskip("deep500.frameworks.tensorflow")
    return d5tf.from_onnx(proto).inference(feeds)


RUNS = {"pytorch": pytorch_run, "tensorflow": tensorflow_run}


@pytest.mark.parametrize("framework", RUNS)
@pytest.mark.parametrize("onnx_name", sorted(TYPES))
def test_identity_round_trips_every_bit_pattern(framework, onnx_name):
    x = every_value(onnx_name)
    element = getattr(TensorProto, onnx_name)
    y = RUNS[framework](model("Identity", element, element, list(x.shape)), {"x": x})["y"]
    assert y.dtype == x.dtype
    if framework == "tensorflow" and onnx_name.startswith("FLOAT8"):
        # carried in float32: every value, and NaN as NaN (its payload is not a value)
        nan = np.isnan(x.astype(np.float32))
        np.testing.assert_array_equal(bits(y)[~nan], bits(x)[~nan])
        assert np.isnan(y.astype(np.float32)[nan]).all()
    else:
        np.testing.assert_array_equal(bits(y), bits(x))


@pytest.mark.parametrize("framework", RUNS)
def test_a_scalar_keeps_its_shape(framework):
    """A 0-d bfloat16 feed stays 0-d (np.ascontiguousarray would make it 1-d)."""
    x = np.array(1.5, dtype=ml_dtypes.bfloat16)
    proto = model("Cast", TensorProto.BFLOAT16, TensorProto.FLOAT, [], to=TensorProto.FLOAT)
    y = RUNS[framework](proto, {"x": x})["y"]
    assert y.shape == () and y == np.float32(1.5)


@pytest.mark.parametrize("framework", RUNS)
@pytest.mark.parametrize("onnx_name", sorted(TYPES))
def test_cast_to_float_is_exact(framework, onnx_name):
    """Widening to float32 is exact for every type here (ONNX Cast,
    https://onnx.ai/onnx/operators/onnx__Cast.html)."""
    x = every_value(onnx_name)
    proto = model("Cast", getattr(TensorProto, onnx_name), TensorProto.FLOAT, list(x.shape),
                  to=TensorProto.FLOAT)
    y = RUNS[framework](proto, {"x": x})["y"]
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, x.astype(np.float32))   # NaN where NaN


@pytest.mark.parametrize("onnx_name", sorted(SUB_BYTE & set(TYPES)))
def test_pytorch_produces_a_carried_type_as_onnx_does(onnx_name):
    """Cast to int4 (...) keeps the low bits of integers (floats truncated first) and
    rounds float4 to nearest even, saturating: PyTorch computes it in the carrier and
    returns the declared type, equal to onnx's reference evaluator bit for bit.
    (TensorFlow's: tests/frameworks/tensorflow/test_carried_casts.py.)"""
    from onnx.reference import ReferenceEvaluator
    element = getattr(TensorProto, onnx_name)
    x = np.array([0.4, 3.5, 100.0, -100.0, -2.5, 1.75, 5.0, -0.1], np.float32)
    proto = model("Cast", TensorProto.FLOAT, element, [8], to=element)
    y = pytorch_run(proto, {"x": x})["y"]
    want = ReferenceEvaluator(proto).run(None, {"x": x})[0]
    assert y.dtype == want.dtype == np.dtype(getattr(ml_dtypes, TYPES[onnx_name]))
    np.testing.assert_array_equal(bits(y), bits(want))


def test_tensorflow_refuses_a_carried_value_that_is_not_only_read():
    """Pad does more than read an int4 value (it makes new ones): the node and the value
    are named."""
    pytest.importorskip("deep500.frameworks.tensorflow")
    node = helper.make_node("Pad", ["z", "pads"], ["y"], name="pad0")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("z", TensorProto.INT4, [4]),
                      helper.make_tensor_value_info("pads", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.INT4, [6])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    feeds = {"z": np.array([1, 2, 3, -3], ml_dtypes.int4), "pads": np.array([1, 1])}
    with pytest.raises(UnsupportedError, match=r"(?s)int4.*'z'.*pad0"):
        tensorflow_run(proto, feeds)


def test_pytorch_keeps_bfloat16_through_arithmetic():
    """bfloat16 is a PyTorch type: Add computes in it, as ONNX does."""
    x = np.array([[1.5, -2.25, 1.5e38, 1e-40]], ml_dtypes.bfloat16)
    node = helper.make_node("Add", ["x", "x"], ["y"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [1, 4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    y = pytorch_run(proto, {"x": x})["y"]
    expected = (x.astype(np.float64) * 2).astype(ml_dtypes.bfloat16)   # doubling: exact
    np.testing.assert_array_equal(bits(y), bits(expected))


def test_restore_refuses_values_outside_the_declared_type():
    carried = carriers(["int4"])
    int4 = np.dtype(ml_dtypes.int4)
    assert carried == {int4: np.dtype(np.int8)}
    ok = restore(np.array([-8, 7], np.int8), int4, "y", "test")
    assert ok.dtype == int4 and ok.astype(np.int8).tolist() == [-8, 7]
    with pytest.raises(UnsupportedError, match="'y'"):
        restore(np.array([8], np.int8), int4, "y", "test")


def test_pytorch_names_a_type_it_cannot_hold():
    torch = pytest.importorskip("torch")  # noqa: F841
    from deep500.frameworks.pytorch.extension_dtypes import tensor_from_array
    with pytest.raises(UnsupportedError, match="object.*'names'"):
        tensor_from_array(np.array(["a"], object), "names")


def test_pytorch_native_module_in_bfloat16_returns_its_gradients_bit_for_bit():
    """A user's bfloat16 module: outputs, parameters and gradients come back as
    ml_dtypes bfloat16 arrays with the bits PyTorch computed."""
    torch = pytest.importorskip("torch")
    d5pt = pytest.importorskip("deep500.frameworks.pytorch")
    from deep500.lv1_network import gradient_name
    torch.manual_seed(0)
    module = torch.nn.Linear(4, 2).to(torch.bfloat16)
    x = np.linspace(-1, 1, 12).reshape(3, 4).astype(ml_dtypes.bfloat16)
    executor = d5pt.PyTorchNativeGraphExecutor(
        module, ["x"], ["y"], loss_fn=lambda outputs, inputs: outputs["y"].float().sum())
    result = executor.inference_and_backprop({"x": x}, "loss")

    reference = torch.nn.Linear(4, 2).to(torch.bfloat16)
    reference.load_state_dict(module.state_dict())
    xt = torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    y = reference(xt)
    y.float().sum().backward()
    assert result["y"].dtype == np.dtype(ml_dtypes.bfloat16)
    def torch_bits(tensor):
        return tensor.detach().view(torch.int16).numpy().view(np.uint16)
    np.testing.assert_array_equal(bits(result["y"]), torch_bits(y))
    grad = result[gradient_name("weight")]
    assert grad.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(bits(grad), torch_bits(reference.weight.grad))
    weight = executor.network.fetch_tensor("weight")
    np.testing.assert_array_equal(bits(weight), torch_bits(module.weight))


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
def test_pytorch_casts_to_e8m0_with_every_round_mode(round_mode):
    """PyTorch's own conversion rounds to nearest only; the executor applies ONNX's
    rule (onnx_interop.cast) and gives the reference executor's bits."""
    if "FLOAT8E8M0" not in TYPES:
        pytest.skip("this onnx or ml_dtypes has no FLOAT8E8M0")
    import deep500.frameworks.reference as d5ref
    x = np.array([[0.3, 1.0, 1.5, 3.0], [5.0, 1e-40, 2.0 ** 100, 0.75]], np.float32)
    proto = model("Cast", TensorProto.FLOAT, TensorProto.FLOAT8E8M0, list(x.shape),
                  to=TensorProto.FLOAT8E8M0, round_mode=round_mode)
    got = pytorch_run(proto, {"x": x})["y"]
    want = d5ref.from_onnx(proto).inference({"x": x})["y"]
    np.testing.assert_array_equal(bits(got), bits(want))
    if round_mode != "nearest":   # 3.0 lies between 2 and 4: up and down differ
        assert float(got[0, 3].astype(np.float32)) == (4.0 if round_mode == "up" else 2.0)
