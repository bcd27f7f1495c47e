"""The bridges' ``test_nativeop_forward``/``test_nativeop_gradient``
(deep500/frameworks/_bridge/nativeop_checks.py), on a NumPy "bridge" whose functions of
arrays become ``d5.CustomPythonOp``s: a CustomOp is checked as it is, a function through
the bridge's wrapper, anything else is refused naming the bridge's tensors. The PyTorch
and TensorFlow checks are tested in their custom_ops tests."""
import numpy as np
import pytest

import deep500 as d5
from deep500.frameworks._bridge.nativeop_checks import as_custom_op, nativeop_checks

wrapped = []


def from_native(fn):
    """The NumPy bridge's ``custom_op_from_native``: Relu's backward for every function
    (the tests below wrap Relu, right or wrong)."""
    wrapped.append(fn)
    return d5.CustomPythonOp(fn, lambda grads, xs, ys: [grads[0] * (xs[0] > 0)])


check_forward, check_gradient = nativeop_checks(from_native, "NumPy arrays", "numpy_bridge")


@pytest.fixture
def inputs():
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    x[np.abs(x) < 0.05] = 0.5    # away from Relu's kink, for finite differences
    return [x]


def test_a_function_is_wrapped_by_the_bridge_and_checked(inputs):
    wrapped.clear()

    def relu(x):
        return np.maximum(x, 0)
    assert check_forward(relu, inputs, reference_op="Relu").passed
    assert wrapped == [relu]
    result = check_gradient(relu, inputs, "Relu", finite_differences={"eps": 1e-3})
    assert result.passed, result.details


def test_a_wrong_function_fails(inputs):
    assert not check_forward(np.abs, inputs, reference_op="Relu").passed
    # Its backward (Relu's) is not the derivative of its forward where x < 0.
    assert not check_gradient(np.abs, inputs, finite_differences={"eps": 1e-3}).passed


def test_a_custom_op_is_checked_as_it_is(inputs):
    wrapped.clear()
    op = d5.CustomPythonOp(lambda x: np.maximum(x, 0))
    assert as_custom_op(op, from_native, "NumPy arrays") is op
    assert check_forward(op, inputs, np.maximum(inputs[0], 0)).passed
    assert wrapped == []


def test_anything_else_is_refused_naming_the_tensors(inputs):
    with pytest.raises(d5.Deep500Error, match="a d5.CustomOp or a function of NumPy "
                                              "arrays, got int"):
        check_forward(3, inputs, reference_op="Relu")


def test_the_checks_belong_to_the_bridge_and_are_not_collected():
    for function, name in ((check_forward, "test_nativeop_forward"),
                           (check_gradient, "test_nativeop_gradient")):
        assert function.__name__ == function.__qualname__ == name
        assert function.__module__ == "numpy_bridge"
        assert function.__test__ is False
        assert "function of NumPy arrays" in function.__doc__
