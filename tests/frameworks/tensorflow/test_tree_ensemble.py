"""TreeEnsemble (ai.onnx.ml, opset 5) on the TensorFlow executor (``ops/ml.py``,
``ops/_trees.py``): two trees using every branch mode, a set-membership node and a NaN
that follows the true branch, under every aggregate function and post transform, against
the reference executor and (where it implements the case) ONNX's ReferenceEvaluator."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

tf = pytest.importorskip("tensorflow")

import deep500.frameworks.reference as d5ref  # noqa: E402
import deep500.frameworks.tensorflow as d5tf  # noqa: E402

OPSET = onnx.defs.onnx_opset_version()
# Tree 0: node 0 (x0 <= 0.5) -> node 1 | leaf 0; node 1 (x1 in {1, 3}) -> leaf 1 | leaf 2.
# Tree 1: node 2 (x1 > 2, NaN true) -> leaf 3 | node 3; node 3 (x0 != 0) -> leaf 4 | node 4;
# node 4 (x0 >= -1) -> leaf 5 | node 5; node 5 (x1 < 0) -> leaf 6 | node 6;
# node 6 (x0 == -3) -> leaf 7 | leaf 8.
NODES = dict(
    nodes_featureids=[0, 1, 1, 0, 0, 1, 0],
    nodes_modes=numpy_helper.from_array(np.array([0, 6, 3, 5, 2, 1, 4], np.uint8)),
    nodes_splits=numpy_helper.from_array(np.array([0.5, 0, 2, 0, -1, 0, -3], np.float64)),
    nodes_truenodeids=[1, 1, 3, 4, 5, 6, 7], nodes_trueleafs=[0, 1, 1, 1, 1, 1, 1],
    nodes_falsenodeids=[0, 2, 3, 4, 5, 6, 8], nodes_falseleafs=[1, 1, 0, 0, 0, 0, 1],
    nodes_missing_value_tracks_true=[0, 0, 1, 0, 0, 0, 0],
    membership_values=numpy_helper.from_array(np.array([1.0, 3.0, np.nan], np.float64)),
    tree_roots=[0, 2],
    leaf_targetids=[0, 1, 0, 1, 0, 1, 0, 1, 0],
    leaf_weights=numpy_helper.from_array(
        np.array([0.1, 0.2, -0.3, 0.4, 0.05, 0.25, -0.15, 0.35, 0.45], np.float64)),
    n_targets=2)
X = np.array([[0.0, 1.0], [0.0, 2.0], [1.0, np.nan], [-3.0, -1.0], [-3.0, 1.0],
              [-0.5, 3.0], [2.0, -5.0], [0.0, 0.0]], np.float64)


def model(aggregate: int, post: int) -> onnx.ModelProto:
    node = helper.make_node("TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml",
                            aggregate_function=aggregate, post_transform=post, **NODES)
    graph = helper.make_graph(
        [node], "trees", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [None, 2])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [None, 2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                   helper.make_opsetid("ai.onnx.ml", 5)])


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("post", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble(aggregate, post, mode):
    proto = model(aggregate, post)
    got = d5tf.from_onnx(proto, mode=mode).inference({"x": X})["y"]
    want = d5ref.from_onnx(proto).inference({"x": X})["y"]
    assert got.dtype == np.float64 and got.shape == (len(X), 2)
    # float64: sums of a few weights, one exp or one quantile each
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_tree_ensemble_matches_onnx_evaluator():
    """Sum, no transform: the case ONNX's evaluator implements as the spec says."""
    proto = model(1, 0)
    expected = ReferenceEvaluator(proto).run(None, {"x": X})[0]
    got = d5tf.from_onnx(proto).inference({"x": X})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
