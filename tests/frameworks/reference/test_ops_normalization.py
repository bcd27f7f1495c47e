"""Reference BatchNormalization (inference and training mode) and Dropout against PyTorch,
hand computations and finite differences."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error, ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run
from tests.frameworks.reference.op_checks import (check_backward, check_forward,
                                                  check_gradient, torch)

F = torch.nn.functional
DTYPES = [np.float32, np.float64]
BN_SHAPES = [(4, 3), (2, 3, 5), (2, 4, 3, 3), (2, 2, 2, 3, 2)]


def bn_inputs(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    channels = shape[1]
    X = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
    scale = rng.uniform(0.5, 1.5, channels).astype(dtype)
    B = rng.standard_normal(channels).astype(dtype)
    mean = rng.standard_normal(channels).astype(dtype)
    var = rng.uniform(0.5, 2.0, channels).astype(dtype)
    return [X, scale, B, mean, var]


def per_channel(v, ndim):
    return v.reshape((1, -1) + (1,) * (ndim - 2))


# -- inference mode --------------------------------------------------------------------
def torch_bn_inference(eps):
    def fn(X, scale, B, mean, var):
        # Spelled out rather than F.batch_norm, whose running statistics get no gradient.
        n = X.dim()
        return ((X - per_channel(mean, n)) / torch.sqrt(per_channel(var, n) + eps)
                * per_channel(scale, n) + per_channel(B, n))
    return fn


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("epsilon", [1e-5, 0.1])
@pytest.mark.parametrize("shape", BN_SHAPES, ids=str)
def test_batchnorm_inference(shape, epsilon, dtype):
    inputs = bn_inputs(shape, dtype)
    op = create_operator("BatchNormalization", epsilon=epsilon)
    Y = op.forward(*inputs)
    assert isinstance(Y, np.ndarray) and Y.dtype == dtype
    check_forward(op, inputs, lambda X, s, b, m, v: F.batch_norm(X, m, v, s, b,
                                                                 training=False, eps=epsilon))
    grads = check_backward(op, inputs, torch_bn_inference(epsilon))
    assert [g.dtype for g in grads] == [dtype] * 5


def test_batchnorm_inference_finite_differences():
    check_gradient(create_operator("BatchNormalization", epsilon=1e-3),
                   bn_inputs((2, 3, 2, 2), np.float64))


# -- training mode ---------------------------------------------------------------------
def torch_bn_training(eps, momentum):
    def fn(X, scale, B, mean, var):
        axes = [0] + list(range(2, X.dim()))
        Y = F.batch_norm(X, None, None, scale, B, training=True, eps=eps)
        # PyTorch's own running update uses the unbiased variance and the momentum the
        # other way round, so the ONNX running statistics are spelled out.
        running_mean = mean * momentum + X.mean(dim=axes) * (1 - momentum)
        running_var = var * momentum + X.var(dim=axes, unbiased=False) * (1 - momentum)
        return Y, running_mean, running_var
    return fn


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("epsilon,momentum", [(1e-5, 0.9), (0.01, 0.3)])
@pytest.mark.parametrize("shape", BN_SHAPES, ids=str)
def test_batchnorm_training(shape, epsilon, momentum, dtype):
    inputs = bn_inputs(shape, dtype, seed=1)
    X, scale, B, mean, var = inputs
    op = create_operator("BatchNormalization", epsilon=epsilon, momentum=momentum,
                         training_mode=1)
    Y, running_mean, running_var = op.forward(*inputs)
    assert {Y.dtype, running_mean.dtype, running_var.dtype} == {np.dtype(dtype)}
    assert running_mean.shape == running_var.shape == (shape[1],)

    # Running statistics by hand, in float64, with the population variance.
    x = np.moveaxis(X.astype(np.float64), 1, 0).reshape(shape[1], -1)
    batch_mean = x.mean(axis=1)
    batch_var = ((x - batch_mean[:, None]) ** 2).sum(axis=1) / x.shape[1]
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(running_mean, mean * momentum + batch_mean * (1 - momentum),
                               **tol)
    np.testing.assert_allclose(running_var, var * momentum + batch_var * (1 - momentum),
                               **tol)

    check_forward(op, inputs, lambda X, s, b, m, v: F.batch_norm(
        X, None, None, s, b, training=True, eps=epsilon))
    check_backward(op, inputs, torch_bn_training(epsilon, momentum))


def test_batchnorm_training_gradient_of_y_only_matches_torch():
    """Upstream gradient only on Y (running statistics unused), as in a training graph."""
    X, scale, B, mean, var = bn_inputs((3, 4, 2, 2), np.float64, seed=2)
    op = create_operator("BatchNormalization", training_mode=1)
    outputs = op.forward(X, scale, B, mean, var)
    dY = np.random.default_rng(3).standard_normal(X.shape)
    dX, dscale, dB, dmean, dvar = op.backward([dY, None, None], [X, scale, B, mean, var],
                                              outputs)
    tensors = [torch.tensor(a, requires_grad=True) for a in (X, scale, B)]
    F.batch_norm(tensors[0], None, None, tensors[1], tensors[2], training=True,
                 eps=1e-5).backward(torch.from_numpy(dY))
    for got, t in zip((dX, dscale, dB), tensors):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert not dmean.any() and not dvar.any()


@pytest.mark.parametrize("shape", [(3, 2), (2, 3, 2, 2)], ids=str)
def test_batchnorm_training_finite_differences(shape):
    op = create_operator("BatchNormalization", epsilon=1e-3, momentum=0.7, training_mode=1)
    check_gradient(op, bn_inputs(shape, np.float64, seed=4))


def test_batchnorm_rejects_wrong_parameter_shape():
    X, scale, B, mean, var = bn_inputs((2, 3, 4), np.float32)
    with pytest.raises(ShapeError, match=r"BatchNormalization.*scale.*\(3,\).*\(4,\)"):
        create_operator("BatchNormalization").forward(X, np.ones(4, np.float32), B, mean, var)


# -- Dropout ---------------------------------------------------------------------------
def train(value=True):
    return np.array(value)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("extra", [[], [np.array(0.3, np.float32)],
                                   [np.array(0.3, np.float32), train(False)]],
                         ids=["data-only", "ratio", "ratio-training-false"])
def test_dropout_inference_is_identity(extra, dtype):
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(dtype)
    op = create_operator("Dropout")
    out, mask = op.forward(x, *extra)
    np.testing.assert_array_equal(out, x)
    assert out.dtype == dtype and mask.dtype == bool and mask.all()
    upstream = np.random.default_rng(1).standard_normal(x.shape).astype(dtype)
    grads = op.backward([upstream, None], [x, *extra], [out, mask])
    np.testing.assert_array_equal(grads[0], upstream)
    assert len(grads) == 1 + len(extra) and all(g is None for g in grads[1:])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.8])
def test_dropout_training_statistics_and_scaling(ratio, dtype):
    x = np.random.default_rng(2).uniform(1.0, 2.0, (200, 500)).astype(dtype)
    out, mask = create_operator("Dropout", seed=7).forward(x, np.array(ratio, dtype),
                                                            train())
    assert out.dtype == dtype and mask.dtype == bool and mask.shape == x.shape
    # 100 000 Bernoulli draws: the dropped fraction's standard deviation is <= 0.0016.
    assert abs((~mask).mean() - ratio) < 0.01
    np.testing.assert_array_equal(out[~mask], 0)
    np.testing.assert_allclose(out[mask], x[mask] / dtype(1 - ratio), rtol=1e-6)
    # Inverted dropout keeps the expectation.
    assert abs(out.mean() / x.mean() - 1) < 0.02


def test_dropout_default_ratio_is_half():
    x = np.ones((100, 100), np.float32)
    out, mask = create_operator("Dropout").forward(x, None, train())
    assert abs((~mask).mean() - 0.5) < 0.02
    np.testing.assert_array_equal(out[mask], 2)


def test_dropout_seed_reproducible():
    x = np.ones((50, 40))
    ratio = np.array(0.5)
    first = create_operator("Dropout", seed=3).forward(x, ratio, train())[1]
    again = create_operator("Dropout", seed=3).forward(x, ratio, train())[1]
    other = create_operator("Dropout", seed=4).forward(x, ratio, train())[1]
    np.testing.assert_array_equal(first, again)
    assert (first != other).any()
    unseeded = create_operator("Dropout")
    assert (unseeded.forward(x, ratio, train())[1]
            != unseeded.forward(x, ratio, train())[1]).any()


@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.75])
def test_a_seeded_dropout_draws_onnxs_masks(ratio):
    # ONNX's reference implementation (and its test data) draws the mask from NumPy's
    # RandomState(seed): a seeded Dropout gives the same output and mask, exactly.
    x = np.random.default_rng(5).standard_normal((3, 4, 5)).astype(np.float32)
    r, t = np.float32(ratio), np.array(True)
    expected = onnx_run("Dropout", [x, r, t], {"seed": 9}, outputs=2)
    out, mask = create_operator("Dropout", seed=9).forward(x, r, t)
    np.testing.assert_array_equal(mask, expected[1])
    np.testing.assert_allclose(out, expected[0], rtol=1e-6, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dropout_gradient_uses_mask(dtype):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 7)).astype(dtype)
    inputs = [x, np.array(0.4, dtype), train()]
    op = create_operator("Dropout", seed=11)
    out, mask = op.forward(*inputs)
    upstream = rng.standard_normal(x.shape).astype(dtype)
    dx, dratio, dtraining = op.backward([upstream, None], inputs, [out, mask])
    assert dratio is None and dtraining is None and dx.dtype == dtype
    np.testing.assert_allclose(dx, upstream * mask / dtype(0.6), rtol=1e-6)
    # The same against autograd of the (differentiable) expression x·mask/(1 - ratio).
    check_backward(op, inputs, lambda t, r, m: (t * torch.from_numpy(mask) / (1 - r),),
                   wrt=[0])


def test_dropout_finite_differences():
    # With a seed the mask is the same on every forward call, so differences are exact.
    x = np.random.default_rng(6).standard_normal((4, 5))
    check_gradient(create_operator("Dropout", seed=2), [x, np.array(0.3), train()])


def test_dropout_ratio_edges():
    x = np.ones((3, 4), np.float32)
    out, mask = create_operator("Dropout").forward(x, np.array(0.0), train())
    np.testing.assert_array_equal(out, x)
    assert mask.all()
    out, mask = create_operator("Dropout").forward(x, np.array(1.0), train())
    assert not out.any() and not mask.any() and np.isfinite(out).all()
    with pytest.raises(Deep500Error, match="Dropout.*ratio"):
        create_operator("Dropout").forward(x, np.array(1.5), train())
