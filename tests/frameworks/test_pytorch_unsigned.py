"""The PyTorch executor on uint16/32/64 tensors, which PyTorch has no CPU arithmetic,
comparison or extremum kernels for: results equal NumPy's (wrapping modulo 2^bits,
truncating division, unsigned order), values at the top of the range included."""
import numpy as np
import pytest
from onnx import helper

torch = pytest.importorskip("torch")

import deep500.frameworks.pytorch as d5pt  # noqa: E402
from deep500.utils.errors import Deep500Error  # noqa: E402

DTYPES = [np.uint16, np.uint32, np.uint64]


def _values(dtype):
    top = np.iinfo(dtype).max
    a = np.array([0, 1, 7, top, top - 1, top // 2 + 3], dtype)
    b = np.array([3, top, 2, 2, top, top // 2 + 1], dtype)
    return a, b


def _run(op_type, dtype, a, b):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    out_elem = elem if op_type not in ("Less", "Greater") else helper.np_dtype_to_tensor_dtype(
        np.dtype(bool))
    graph = helper.make_graph(
        [helper.make_node(op_type, ["a", "b"], ["y"])], "unsigned",
        [helper.make_tensor_value_info(n, elem, [a.size]) for n in ("a", "b")],
        [helper.make_tensor_value_info("y", out_elem, [a.size])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    return d5pt.from_onnx(model).inference({"a": a, "b": b})["y"]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op_type, expected", [
    ("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply),
    ("Less", np.less), ("Greater", np.greater), ("Max", np.maximum), ("Min", np.minimum),
])
def test_unsigned_results_equal_numpy(dtype, op_type, expected):
    a, b = _values(dtype)
    with np.errstate(over="ignore"):
        want = expected(a, b)
    got = _run(op_type, dtype, a, b)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32], ids=lambda d: np.dtype(d).name)
def test_unsigned_division_truncates(dtype):
    a, b = _values(dtype)
    np.testing.assert_array_equal(_run("Div", dtype, a, b), a // b)


def test_uint64_division_beyond_int64_is_declined_clearly():
    a, b = _values(np.uint64)
    with pytest.raises(Deep500Error, match="2\\*\\*63"):
        _run("Div", np.uint64, a, b)
