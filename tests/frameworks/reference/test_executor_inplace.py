"""The reference executor's in-place inference (Relu, BatchNormalization overwrite their
dying first input): same results, and never through an array something else still
reads (a view, a fed input, a parameter)."""
import numpy as np
import onnx
import onnx.reference
from onnx import TensorProto, helper, numpy_helper

import deep500.frameworks.reference as d5ref


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "inplace", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_relu_does_not_overwrite_a_tensor_a_live_view_reads():
    # A dies at Relu, but V = Reshape(A) (a view of A in NumPy) is read afterwards.
    shape = numpy_helper.from_array(np.array([3, 4], np.int64), "shape")
    nodes = [helper.make_node("Add", ["X", "X"], ["A"]),
             helper.make_node("Reshape", ["A", "shape"], ["V"]),
             helper.make_node("Relu", ["A"], ["R"]),
             helper.make_node("Add", ["R", "V"], ["Y"])]
    model = _model(nodes, [_value("X", [3, 4])], [_value("Y", [3, 4])], [shape])
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    a = x + x
    expected = np.maximum(a, 0) + a
    executor = d5ref.from_onnx(model)
    steps = executor.plan().steps
    assert steps[2].inplace is not None   # A dies at Relu
    # The reference Reshape copies; an operator that returns a view (a custom one may)
    # stands in for it here.
    steps[1].forward = lambda data, shape: data.reshape(tuple(shape))
    y = executor.inference({"X": x})["Y"]
    np.testing.assert_array_equal(y, expected)


def test_inplace_chain_matches_onnx_and_leaves_inputs_and_parameters_alone():
    rng = np.random.default_rng(1)
    c = 3
    params = {"W": rng.standard_normal((c, 2, 3, 3)).astype(np.float32),
              "scale": rng.uniform(0.5, 1.5, c).astype(np.float32),
              "B": rng.normal(0, 0.1, c).astype(np.float32),
              "mean": rng.normal(0, 0.1, c).astype(np.float32),
              "var": rng.uniform(0.5, 2.0, c).astype(np.float32)}
    nodes = [helper.make_node("Relu", ["X"], ["Xr"]),   # X is fed: not overwritten
             helper.make_node("Conv", ["Xr", "W"], ["C"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["C", "scale", "B", "mean", "var"],
                              ["N"]),
             helper.make_node("Relu", ["N"], ["Y"]),
             helper.make_node("Relu", ["W"], ["Wr"])]   # a parameter: not overwritten
    model = _model(nodes, [_value("X", [2, 2, 5, 5])],
                   [_value("Y", [2, c, 5, 5]), _value("Wr", [c, 2, 3, 3])],
                   [numpy_helper.from_array(v, k) for k, v in params.items()])
    x = rng.standard_normal((2, 2, 5, 5)).astype(np.float32)
    x_copy, w_copy = x.copy(), params["W"].copy()
    executor = d5ref.from_onnx(model)
    assert [s.inplace is not None for s in executor.plan().steps] == [
        False, False, True, True, False]
    for _ in range(2):   # the second run reuses the plan and the parameters
        outputs = executor.inference({"X": x})
        expected = onnx.reference.ReferenceEvaluator(model).run(None, {"X": x})
        # float32 products of 18 terms, then normalisation: a few ulp of the outputs
        np.testing.assert_allclose(outputs["Y"], expected[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(outputs["Wr"], np.maximum(w_copy, 0))
    np.testing.assert_array_equal(x, x_copy)
    np.testing.assert_array_equal(executor.network.persistent_tensors["W"], w_copy)
