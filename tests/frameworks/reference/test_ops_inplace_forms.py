"""The in-place forms (``forward_inplace``) of Add, Sub, Mul, Div and Reshape/Squeeze/
Unsqueeze that the reference executor's inference uses on a dying first input: the same
values as ``forward``, written into that input (the arithmetic) or viewing it (the shape
changes), and ``forward`` wherever writing into it would be wrong."""
import numpy as np
import onnx
import onnx.reference
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500.frameworks.reference as d5ref
from deep500.frameworks.reference.operators.registry import create_operator
from deep500.utils.errors import ShapeError

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_arithmetic_writes_into_its_first_input(op_type, dtype):
    op = create_operator(op_type)
    a = RNG.standard_normal((3, 4, 5)).astype(dtype)
    for b in (RNG.uniform(0.5, 2, (5,)), RNG.uniform(0.5, 2, (3, 4, 5)), np.array(1.5)):
        b = b.astype(dtype)
        expected = op.forward(a, b)
        target = a.copy()
        result = op.forward_inplace(target, b)
        assert result is target and result.dtype == dtype
        np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div"])
def test_arithmetic_falls_back_where_the_first_input_cannot_hold_the_result(op_type):
    op = create_operator(op_type)
    cases = [(RNG.standard_normal((1, 5)).astype(np.float32),      # broadcast enlarges A
              RNG.uniform(0.5, 2, (4, 5)).astype(np.float32)),
             (np.array([7, -7, 9], np.int64), np.array([2, 2, -4], np.int64))]  # Div truncates
    for a, b in cases:
        a_copy = a.copy()
        result = op.forward_inplace(a, b)
        assert result is not a
        np.testing.assert_array_equal(result, op.forward(a_copy, b))
        np.testing.assert_array_equal(a, a_copy)
    with pytest.raises(ShapeError, match="dtype"):
        op.forward_inplace(np.ones(3, np.float32), np.ones(3, np.float64))


@pytest.mark.parametrize("op_type, attributes, extra", [
    ("Reshape", {}, [np.array([4, -1], np.int64)]),
    ("Squeeze", {}, [np.array([1], np.int64)]),
    ("Unsqueeze", {}, [np.array([0], np.int64)])])
def test_shape_changes_view_their_first_input(op_type, attributes, extra):
    op = create_operator(op_type, **attributes)
    data = RNG.standard_normal((2, 1, 6)).astype(np.float32)
    result = op.forward_inplace(data, *extra)
    assert np.shares_memory(result, data)
    np.testing.assert_array_equal(result, op.forward(data, *extra))


def _value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_executor_chain_matches_onnx_and_leaves_inputs_and_parameters_alone():
    params = {"W": RNG.standard_normal((4, 6)).astype(np.float32),
              "b": RNG.standard_normal(6).astype(np.float32),
              "s": np.array(1.4142135, np.float32),
              "shape": np.array([2, 3, 6], np.int64)}
    nodes = [helper.make_node("MatMul", ["X", "W"], ["M"]),
             helper.make_node("Add", ["M", "b"], ["A"]),        # M dies: in place
             helper.make_node("Div", ["A", "s"], ["D"]),        # A is read again below
             helper.make_node("Mul", ["D", "A"], ["P"]),        # D dies: in place
             helper.make_node("Sub", ["P", "X2"], ["S"]),       # (1, 6) - (6, 6): grows
             helper.make_node("Reshape", ["S", "shape"], ["R"]),  # S dies: a view
             helper.make_node("Add", ["R", "b"], ["Y"]),        # R is a view: not in place
             helper.make_node("Add", ["b", "b"], ["Wb"])]       # a parameter: not in place
    model = helper.make_model(helper.make_graph(
        nodes, "inplace_forms", [_value("X", [1, 4]), _value("X2", [6, 6])],
        [_value("Y", [2, 3, 6]), _value("Wb", [6])],
        [numpy_helper.from_array(v, k) for k, v in params.items()]),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    x = RNG.standard_normal((1, 4)).astype(np.float32)
    x2 = RNG.standard_normal((6, 6)).astype(np.float32)
    copies = (x.copy(), x2.copy(), params["b"].copy())
    executor = d5ref.from_onnx(model)
    assert [s.inplace is not None for s in executor.plan().steps] == [
        False, True, False, True, True, True, True, False]
    expected = onnx.reference.ReferenceEvaluator(model).run(None, {"X": x, "X2": x2})
    for _ in range(2):   # the second run reuses the plan and the parameters
        outputs = executor.inference({"X": x, "X2": x2})
        # the same float32 operations in the same order: equal up to BLAS's summation
        # order in the 4-term MatMul
        np.testing.assert_allclose(outputs["Y"], expected[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(outputs["Wb"], 2 * copies[2])
    np.testing.assert_array_equal(x, copies[0])
    np.testing.assert_array_equal(x2, copies[1])
    np.testing.assert_array_equal(executor.network.persistent_tensors["b"], copies[2])
