"""benchmarks/gemm_floor.py: the matrix products of a model, at the right shapes."""
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper


@pytest.fixture
def gemm_floor(repo_root):
    sys.path.insert(0, str(repo_root / "benchmarks"))
    try:
        import gemm_floor
        yield gemm_floor
    finally:
        sys.path.remove(str(repo_root / "benchmarks"))


def _model(batch):
    """Conv (8 -> 6 channels, 2 groups, 3x3, pad 1) on 5x7, a MatMul of its output by
    7x4, and a Gemm of a transposed 9x3 by 9x2."""
    weight = numpy_helper.from_array(np.zeros((6, 4, 3, 3), np.float32), "w")
    right = numpy_helper.from_array(np.zeros((7, 4), np.float32), "r")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], group=2, pads=[1, 1, 1, 1]),
             helper.make_node("MatMul", ["y", "r"], ["z"]),
             helper.make_node("Gemm", ["g", "h"], ["k"], transA=1)]
    graph = helper.make_graph(
        nodes, "floor",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8, 5, 7]),
         helper.make_tensor_value_info("g", TensorProto.FLOAT, [9, 3]),
         helper.make_tensor_value_info("h", TensorProto.FLOAT, [9, 2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("k", TensorProto.FLOAT, None)],
        [weight, right])
    return helper.make_model(graph)


def test_products_have_the_im2col_shapes(gemm_floor):
    products = gemm_floor.matrix_products(_model(batch=2))
    assert products == [
        (2, 3, 36, 70),   # per group: 3 output channels x (4 channels * 9) by 36 x (2 * 35)
        (12, 5, 7, 4),    # MatMul broadcast over the 2 x 6 leading axes
        (1, 3, 9, 2)]     # Gemm with transA


def test_floor_is_timed_and_counts_flops(gemm_floor):
    seconds, gflop = gemm_floor.gemm_floor_seconds(_model(batch=2), repeats=2)
    expected = 2 * (2 * 3 * 36 * 70 + 12 * 5 * 7 * 4 + 3 * 9 * 2) / 1e9
    assert seconds > 0
    assert gflop == pytest.approx(expected, rel=1e-12)


def test_symbolic_batch_is_refused(gemm_floor):
    with pytest.raises(ValueError, match="fixed batch size"):
        gemm_floor.matrix_products(_model(batch="N"))
