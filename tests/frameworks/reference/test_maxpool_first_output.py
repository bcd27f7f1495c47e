"""MaxPool's Y-only form (``forward_first_output``, used for nodes without Indices)
equals the first output of its full forward: strides, dilations, pads, ceil_mode,
integers and NaN."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import deep500.frameworks.reference as d5ref
from deep500.frameworks.reference.operators.registry import create_operator

CASES = [dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
         dict(kernel_shape=[2, 3], dilations=[2, 1], ceil_mode=1, strides=[2, 2]),
         dict(kernel_shape=[3], pads=[2, 0], strides=[1]),
         dict(kernel_shape=[2, 2, 2], auto_pad="SAME_UPPER")]


@pytest.mark.parametrize("attributes", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8])
def test_first_output_equals_full_forward(attributes, dtype):
    rank = len(attributes["kernel_shape"])
    rng = np.random.default_rng(rank)
    X = (rng.standard_normal((2, 3) + (7,) * rank) * 50).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        X.flat[5] = np.nan
    op = create_operator("MaxPool", **attributes)
    np.testing.assert_array_equal(op.forward_first_output(X), op.forward(X)[0])


def test_executor_uses_it_only_without_indices():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    outputs = {"Y-only": ["Y"], "with Indices": ["Y", "I"]}
    for case, names in outputs.items():
        node = helper.make_node("MaxPool", ["X"], names, kernel_shape=[2, 2], strides=[2, 2])
        values = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3, 3, 3]),
                  helper.make_tensor_value_info("I", TensorProto.INT64, [2, 3, 3, 3])]
        graph = helper.make_graph([node], "pool", [helper.make_tensor_value_info(
            "X", TensorProto.FLOAT, [2, 3, 6, 6])], values[:len(names)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        executor = d5ref.from_onnx(model)
        forward = executor.plan().steps[0].forward
        assert (forward.__name__ == "forward_first_output") == (case == "Y-only")
        result = executor.inference({"X": x})
        expected = x.reshape(2, 3, 3, 2, 3, 2).max(axis=(3, 5))
        np.testing.assert_array_equal(result["Y"], expected)
        assert set(result) == set(names)
