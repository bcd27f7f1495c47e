"""Reference LinearAttention against onnx's ReferenceEvaluator (every update rule, grouped
query heads, per-head and per-key decay, shared beta, past state, explicit scale), its
backward w.r.t. every input against finite differences, and its input checks."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run
from tests.frameworks.reference.op_checks import check_gradient

CASES = [  # (rule, q heads, kv heads, decay per key, beta shared, past, scale)
    ("linear", 2, 2, False, False, False, 0.0),
    ("gated", 4, 2, False, False, True, 0.0),
    ("gated", 2, 1, True, False, False, 0.5),
    ("delta", 2, 2, False, False, True, 0.0),
    ("delta", 4, 2, False, True, False, 0.0),
    ("gated_delta", 2, 2, True, False, True, 0.0),
    ("gated_delta", 4, 2, False, True, True, 0.3),
]


def inputs_of(rule, hq, hkv, per_key, shared, past, dtype, batch=2, steps=3, d_k=3, d_v=2,
              seed=0):
    rng = np.random.default_rng(seed)
    key = rng.standard_normal((batch, steps, hkv, d_k))
    if "delta" in rule:   # the spec's delta rules expect L2-normalised keys
        key /= np.linalg.norm(key, axis=-1, keepdims=True)
    inputs = [rng.standard_normal((batch, steps, hq * d_k)), key.reshape(batch, steps, -1),
              rng.standard_normal((batch, steps, hkv * d_v)),
              rng.standard_normal((batch, hkv, d_k, d_v)) if past else None,
              -rng.uniform(0.05, 1, (batch, steps, hkv * (d_k if per_key else 1)))
              if "gated" in rule else None,
              rng.uniform(0.1, 0.9, (batch, steps, 1 if shared else hkv))
              if "delta" in rule else None]
    return [None if x is None else x.astype(dtype) for x in inputs]


def attributes_of(rule, hq, hkv, scale):
    return {"update_rule": rule, "q_num_heads": hq, "kv_num_heads": hkv, "scale": scale}


@pytest.mark.parametrize("rule,hq,hkv,per_key,shared,past,scale", CASES)
def test_forward_matches_onnx(rule, hq, hkv, per_key, shared, past, scale):
    inputs = inputs_of(rule, hq, hkv, per_key, shared, past, np.float32)
    attributes = attributes_of(rule, hq, hkv, scale)
    got = create_operator("LinearAttention", **attributes).forward(*inputs)
    want = onnx_run("LinearAttention", inputs, attributes, outputs=2)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        # onnx accumulates a 3-step recurrence in float32; this one in float64
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rule,hq,hkv,per_key,shared,past,scale", CASES)
def test_backward_matches_finite_differences(rule, hq, hkv, per_key, shared, past, scale):
    op = create_operator("LinearAttention", **attributes_of(rule, hq, hkv, scale))
    check_gradient(op, inputs_of(rule, hq, hkv, per_key, shared, past, np.float64, seed=7))


def test_bad_inputs_say_what_is_wrong():
    inputs = inputs_of("gated_delta", 2, 2, False, False, True, np.float32)
    with pytest.raises(ShapeError, match="are required"):
        create_operator("LinearAttention").forward(*inputs)
    op = create_operator("LinearAttention", q_num_heads=2, kv_num_heads=2)
    with pytest.raises(ShapeError, match="requires input beta"):
        op.forward(*inputs[:5])
    with pytest.raises(ShapeError, match="takes no input decay"):
        create_operator("LinearAttention", q_num_heads=2, kv_num_heads=2,
                        update_rule="delta").forward(*inputs)
    with pytest.raises(ShapeError, match="past_state must be"):
        op.forward(inputs[0], inputs[1], inputs[2], inputs[3][:, :1], inputs[4], inputs[5])
