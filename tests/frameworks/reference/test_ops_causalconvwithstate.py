"""Reference CausalConvWithState against onnx's ReferenceEvaluator (with and without bias,
past state, SiLU; kernels longer than the input and of size 1), its backward against
finite differences, and its input checks."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run
from tests.frameworks.reference.op_checks import check_gradient

CASES = [  # (batch, channels, length, k, bias, past)
    (2, 3, 6, 4, True, True),
    (1, 4, 5, 3, False, False),
    (2, 2, 2, 4, True, True),    # input shorter than k - 1
    (1, 3, 4, 1, True, False),   # no state
]


def inputs_of(batch, channels, length, k, bias, past, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((batch, channels, length)).astype(dtype),
            rng.standard_normal((channels, 1, k)).astype(dtype),
            rng.standard_normal(channels).astype(dtype) if bias else None,
            rng.standard_normal((batch, channels, k - 1)).astype(dtype) if past else None]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("activation", ["none", "silu", "swish"])
def test_forward_matches_onnx(case, activation):
    inputs = inputs_of(*case, np.float32)
    got = create_operator("CausalConvWithState", activation=activation).forward(*inputs)
    want = onnx_run("CausalConvWithState", inputs, {"activation": activation}, outputs=2)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        # sums of k <= 4 float32 products (the state is copied exactly)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("activation", ["none", "silu"])
def test_backward_matches_finite_differences(case, activation):
    op = create_operator("CausalConvWithState", activation=activation)
    check_gradient(op, inputs_of(*case, np.float64, seed=4))


def test_bad_inputs_say_what_is_wrong():
    x, w, b, past = inputs_of(2, 3, 6, 4, True, True, np.float32)
    op = create_operator("CausalConvWithState")
    with pytest.raises(ShapeError, match=r"\(3, 1, k\)"):
        op.forward(x, w[:2], b, past)
    with pytest.raises(ShapeError, match=r"past_state must be \(2, 3, 3\)"):
        op.forward(x, w, b, past[:, :, :2])
    with pytest.raises(ShapeError, match="'silu'"):
        create_operator("CausalConvWithState", activation="relu").forward(x, w)
