"""A control-flow node added to a built network (``network.add_node``) gets its bodies
parsed like one read from a file (``normalize_operations`` → ``parse_bodies``): its
outer-scope reads become implicit inputs, and every executor runs it."""
import importlib

import numpy as np
import pytest
from onnx import TensorProto, helper

from deep500.utils.onnx_interop.added_nodes import normalize_operations
from deep500.utils.onnx_interop.schemas import operator_class

FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def base_model():
    """Y = Identity(X); M is fed for the Loop added later."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])], "base",
        [helper.make_tensor_value_info("X", FLOAT, [2]),
         helper.make_tensor_value_info("M", INT64, [])],
        [helper.make_tensor_value_info("Y", FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def loop_node():
    """Z = Y + M·X: the body adds the outer-scope X to its carried value."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "X"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", INT64, []),
         helper.make_tensor_value_info("cond_in", BOOL, []),
         helper.make_tensor_value_info("acc_in", FLOAT, [2])],
        [helper.make_tensor_value_info("cond_out", BOOL, []),
         helper.make_tensor_value_info("acc_out", FLOAT, [2])])
    node = helper.make_node("Loop", ["M", "", "Y"], ["Z"], body=body, name="loop")
    return operator_class("Loop", 17, "").from_node(node, "loop")


def test_added_node_gets_its_body_and_implicit_inputs():
    (op,), _ = normalize_operations([loop_node()], "net")
    assert set(op.subgraphs) == {"body"}
    assert op.implicit_inputs == ["X"]
    assert [o.op_type for o in op.subgraphs["body"].operations] == ["Add", "Identity"]


@pytest.mark.parametrize("framework", ["reference", "pytorch", "tensorflow"])
def test_every_executor_runs_an_added_loop(framework):
    pytest.importorskip({"reference": "numpy", "pytorch": "torch",
                         "tensorflow": "tensorflow"}[framework])
    executor = importlib.import_module(f"deep500.frameworks.{framework}").from_onnx(
        base_model())
    executor.network.add_node(loop_node())
    executor.network.add_output("Z")
    x = np.array([1.0, 2.0], np.float32)
    out = executor.inference({"X": x, "M": np.array(3, np.int64)})
    np.testing.assert_array_equal(out["Z"], x + 3 * x)   # exact: small integers
