"""The optimizer-step operators of domain ai.onnx.preview.training (Adagrad, Adam,
Momentum) against ONNX's ReferenceEvaluator, for one and two variables, and through a
model that the reference executor builds from a node of that domain."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import deep500.frameworks.reference as d5ref
from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run

TRAINING = "ai.onnx.preview.training"
# ONNX's evaluator computes in float32 (some outputs in float64), the reference in float64
# then rounds: a few float32 roundings of values near 0.1 apart, ~1e-6 relative each.
TOLERANCE = dict(rtol=2e-5, atol=1e-6)


def variables(count, states, seed=0):
    """X..., G..., then ``states`` groups of state tensors, one per variable."""
    rng = np.random.default_rng(seed)
    shapes = [(3, 2), (4,)][:count]
    groups = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(2)]
    groups += [[np.abs(rng.standard_normal(s)).astype(np.float32) for s in shapes]
               for _ in range(states)]
    return [x for group in groups for x in group]


CASES = [
    ("Adagrad", 1, {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}),
    ("Adagrad", 1, {}),
    ("Adam", 2, {"alpha": 0.8, "beta": 0.99, "norm_coefficient": 0.05,
                 "norm_coefficient_post": 0.1}),
    ("Adam", 2, {}),
    ("Momentum", 1, {"alpha": 0.9, "beta": 0.5, "mode": "standard", "norm_coefficient": 0.1}),
    ("Momentum", 1, {"alpha": 0.95, "beta": 0.1, "mode": "nesterov", "norm_coefficient": 0.0})]


@pytest.mark.parametrize("op_type,states,attributes", CASES)
@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("t", [0, 3])
def test_optimizer_steps_match_onnx(op_type, states, attributes, count, t):
    inputs = [np.float32(0.1), np.int64(t)] + variables(count, states)
    outputs = count * (1 + states)
    expected = onnx_run(op_type, inputs, attributes, outputs=outputs, domain=TRAINING)
    got = create_operator(op_type, **attributes).forward(*inputs)
    assert len(got) == outputs
    for e, g in zip(expected, got):
        assert g.dtype == np.float32 and g.shape == e.shape
        np.testing.assert_allclose(g, e, **TOLERANCE)


def test_inputs_must_come_in_whole_groups():
    with pytest.raises(ShapeError, match="groups of one tensor per variable"):
        create_operator("Adagrad").forward(np.float32(0.1), np.int64(0),
                                           *variables(1, 1)[:2])


def test_a_training_node_runs_in_a_model():
    names = ["R", "T", "X", "G", "V"]
    node = helper.make_node("Momentum", names, ["X_new", "V_new"], domain=TRAINING,
                            alpha=0.9, beta=1.0, mode="standard", norm_coefficient=0.0)
    inputs = [helper.make_tensor_value_info("R", TensorProto.FLOAT, []),
              helper.make_tensor_value_info("T", TensorProto.INT64, [])] + [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in "XGV"]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3])
               for n in ("X_new", "V_new")]
    model = helper.make_model(helper.make_graph([node], "step", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 18),
                                             helper.make_opsetid(TRAINING, 1)])
    x, g, v = np.float32([1, 2, 3]), np.float32([0.5, 0, -1]), np.float32([1, 1, 1])
    result = d5ref.from_onnx(model).inference(
        {"R": np.float32(0.5), "T": np.int64(2), "X": x, "G": g, "V": v})
    np.testing.assert_allclose(result["V_new"], 0.9 * v + g, rtol=1e-7)
    np.testing.assert_allclose(result["X_new"], x - 0.5 * (0.9 * v + g), rtol=1e-7)
