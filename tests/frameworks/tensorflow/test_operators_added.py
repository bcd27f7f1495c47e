"""Operators the TensorFlow executor gained for ONNX conformance (issue 27, item 7):
CausalConvWithState (``ops/conv.py``), MaxPool's Indices output (``ops/pooling.py``) and
FlexAttention with its modifier bodies (``ops/attention.py``). Outputs against ONNX's
ReferenceEvaluator and the reference executor, gradients against the reference
executor's backward, with the tolerances of ``test_tensorflow_ops_tensor``."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

tf = pytest.importorskip("tensorflow")

from tests.frameworks.test_tensorflow_ops_tensor import (check_forward,  # noqa: E402
                                                         check_gradients, normal)

MODES = ["eager", "function"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("with_bias,with_past", [(False, False), (True, False),
                                                 (False, True), (True, True)])
def test_causal_conv_with_state(with_bias, with_past, activation, mode):
    x, w = normal(2, 4, 6, dtype=np.float32), normal(4, 1, 3, dtype=np.float32, seed=1)
    inputs = [x, w, normal(4, dtype=np.float32, seed=2) if with_bias else None,
              normal(2, 4, 2, dtype=np.float32, seed=3) if with_past else None]
    check_forward("CausalConvWithState", inputs, {"activation": activation}, n_outputs=2,
                  mode=mode)


def test_causal_conv_with_state_kernel_of_one_keeps_no_state():
    got = check_forward("CausalConvWithState", [normal(1, 2, 5, dtype=np.float32),
                                                normal(2, 1, 1, dtype=np.float32)],
                        n_outputs=2)
    assert got["y1"].shape == (1, 2, 0)


def test_causal_conv_with_state_gradients():
    """d/d input, weight, bias and past state of ReduceSum(output · w) (float32: the
    operator takes no doubles)."""
    inputs = [normal(2, 3, 5, dtype=np.float32), normal(3, 1, 3, dtype=np.float32, seed=1),
              normal(3, dtype=np.float32, seed=2), normal(2, 3, 2, dtype=np.float32, seed=3)]
    check_gradients("CausalConvWithState", inputs, {"activation": "silu"},
                    params=(0, 1, 2, 3), n_outputs=2)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("attributes", [
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [2, 2], "strides": [2, 2], "storage_order": 1},
    {"kernel_shape": [3, 2], "strides": [1, 2], "ceil_mode": 1}])
def test_maxpool_indices(attributes, mode):
    """Indices: flat positions in the (N, C, H, W) input (column-major spatially with
    storage_order=1)."""
    x = normal(2, 3, 5, 6, dtype=np.float32)
    check_forward("MaxPool", [x], attributes, n_outputs=2, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_maxpool_indices_do_not_count_padding(mode):
    """Against the reference executor: ONNX's evaluator misplaces windows with pads."""
    x = normal(2, 3, 5, 6, dtype=np.float32)
    check_forward("MaxPool", [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
                  n_outputs=2, mode=mode, against_onnx=False)


def _score_mod_body():
    """A causal mask: scores above the diagonal become -inf (an outer-scope-free body)."""
    return helper.make_graph(
        [helper.make_node("Shape", ["scores"], ["dims"]),
         helper.make_node("Trilu", ["scores"], ["lower"], upper=0),
         helper.make_node("Trilu", ["ones"], ["mask"], upper=0),
         helper.make_node("Equal", ["mask", "zero"], ["above"]),
         helper.make_node("Where", ["above", "minus_inf", "lower"], ["masked"])],
        "score_mod", [helper.make_tensor_value_info("scores", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("masked", TensorProto.FLOAT, None)],
        [helper.make_tensor("ones", TensorProto.FLOAT, [4, 4], [1.0] * 16),
         helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
         helper.make_tensor("minus_inf", TensorProto.FLOAT, [], [-np.inf])])


def _prob_mod_body():
    """Probabilities scaled by 2."""
    return helper.make_graph(
        [helper.make_node("Mul", ["p", "two"], ["scaled"])], "prob_mod",
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("scaled", TensorProto.FLOAT, None)],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("attributes", [
    {}, {"scale": 0.5}, {"score_mod": "causal"}, {"prob_mod": "double"},
    {"score_mod": "causal", "prob_mod": "double", "softmax_precision": 1}])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2)])
def test_flex_attention(heads, attributes, mode):
    q_heads, kv_heads = heads
    attributes = dict(attributes)
    if "score_mod" in attributes:
        attributes["score_mod"] = _score_mod_body()
    if "prob_mod" in attributes:
        attributes["prob_mod"] = _prob_mod_body()
    inputs = [normal(2, q_heads, 4, 8, dtype=np.float32),
              normal(2, kv_heads, 4, 8, dtype=np.float32, seed=1),
              normal(2, kv_heads, 4, 5, dtype=np.float32, seed=2)]
    check_forward("ai.onnx.preview:FlexAttention", inputs, attributes, mode=mode)


def test_flex_attention_gradients():
    """Gradients of ReduceSum(Y · w) w.r.t. Q, K and V through a causal score_mod,
    float64 (the reference executor's backward)."""
    body = _score_mod_body()
    for tensor in body.initializer:
        if tensor.data_type == TensorProto.FLOAT:
            tensor.data_type = TensorProto.DOUBLE
            tensor.double_data[:] = list(tensor.float_data)
            del tensor.float_data[:]
    for value in list(body.input) + list(body.output):
        value.type.tensor_type.elem_type = TensorProto.DOUBLE
    inputs = [normal(1, 2, 4, 3), normal(1, 1, 4, 3, seed=1), normal(1, 1, 4, 2, seed=2)]
    check_gradients("ai.onnx.preview:FlexAttention", inputs, {"score_mod": body},
                    params=(0, 1, 2))
