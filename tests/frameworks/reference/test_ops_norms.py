"""Reference normalization operators (LayerNormalization, RMSNormalization,
GroupNormalization, InstanceNormalization, MeanVarianceNormalization, LpNormalization, LRN)
against onnx's ReferenceEvaluator on one-node models, PyTorch autograd and finite
differences."""
import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error, ShapeError
from tests.frameworks.reference.op_checks import check_backward, check_gradient, torch

F = torch.nn.functional
DTYPES = [np.float32, np.float64]
# float32 results of a float32 computation vs. onnx's (same precision, other summation order)
EPS = float(np.float32(1e-3))  # as an ONNX (float32) attribute holds it
ORACLE_TOL = {np.float32: dict(rtol=1e-5, atol=1e-6), np.float64: dict(rtol=1e-12, atol=1e-13)}


def oracle(op_type, inputs, n_outputs=1, opset=None, **attributes):
    """The outputs of onnx.reference.ReferenceEvaluator on a one-node model."""
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outputs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, **attributes)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs) if x is not None],
        [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outputs])
    imports = [helper.make_opsetid("", opset)] if opset else None
    model = helper.make_model(graph, opset_imports=imports)
    feeds = {n: x for n, x in zip(names, inputs) if x is not None}
    return ReferenceEvaluator(model).run(None, feeds)


def random(shape, dtype, seed=0, scale=1.0, shift=0.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale + shift).astype(dtype)


def assert_close(got, want, dtype, **tol):
    np.testing.assert_allclose(got, want, **{**ORACLE_TOL[np.dtype(dtype).type], **tol})


# -- LayerNormalization ----------------------------------------------------------------
LN_CASES = [((4, 6), -1), ((2, 3, 5), 1), ((2, 3, 5), -2), ((2, 3, 4, 5), 0), ((3, 5), 0)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("shape,axis", LN_CASES, ids=str)
def test_layernorm_forward(shape, axis, with_bias, dtype):
    X = random(shape, dtype, scale=2, shift=0.5)
    norm_shape = shape[axis % len(shape):]
    W, B = random(norm_shape, dtype, 1), random(norm_shape, dtype, 2)
    inputs = [X, W, B if with_bias else None]
    op = create_operator("LayerNormalization", axis=axis, epsilon=EPS)
    Y, mean, inv_std = op.forward(*inputs)
    # stash_type=1: stage one in float32 (onnx's evaluator keeps float64 for float64 input)
    assert Y.dtype == dtype and mean.dtype == np.float32 and inv_std.dtype == np.float32
    assert mean.shape == inv_std.shape == shape[:axis % len(shape)] + (1,) * len(norm_shape)
    want = oracle("LayerNormalization", [x for x in inputs if x is not None], 3, axis=axis,
                  epsilon=EPS)
    for got, expected in zip((Y, mean, inv_std), want):
        assert_close(got, expected, np.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", LN_CASES[:3], ids=str)
def test_layernorm_backward(shape, axis, dtype):
    X = random(shape, dtype, scale=2, shift=0.5)
    norm_shape = shape[axis % len(shape):]
    inputs = [X, random(norm_shape, dtype, 1), random(norm_shape, dtype, 2)]
    stash = 11 if dtype == np.float64 else 1
    op = create_operator("LayerNormalization", axis=axis, epsilon=EPS, stash_type=stash)
    dims = tuple(range(axis % len(shape), len(shape)))

    def torch_fn(x, w, b):  # all three outputs, so Mean and InvStdDev get gradients too
        mean = x.mean(dim=dims, keepdim=True)
        inv_std = 1 / torch.sqrt(((x - mean) ** 2).mean(dim=dims, keepdim=True) + EPS)
        return F.layer_norm(x, norm_shape, w, b, eps=EPS), mean, inv_std

    check_backward(op, inputs, torch_fn,
                   **({} if dtype == np.float64 else dict(rtol=1e-4, atol=1e-4)))
    if dtype == np.float64:
        # every output, Mean and InvStdDev included, gets an upstream gradient
        check_gradient(op, inputs)


def test_layernorm_half_and_stash_double():
    X = random((3, 8), np.float16, scale=3, shift=1)
    W, B = np.ones(8, np.float16), np.zeros(8, np.float16)
    Y, mean, _ = create_operator("LayerNormalization").forward(X, W, B)
    assert Y.dtype == np.float16 and mean.dtype == np.float32
    wide = X.astype(np.float64)
    exact = (wide - wide.mean(-1, keepdims=True)) / np.sqrt(wide.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(Y, exact, rtol=2e-3, atol=2e-3)  # one float16 rounding
    Y, mean, _ = create_operator("LayerNormalization", stash_type=11).forward(
        wide, W.astype(np.float64), B.astype(np.float64))
    assert mean.dtype == np.float64
    np.testing.assert_allclose(Y, exact, rtol=1e-12, atol=1e-12)


def test_layernorm_errors():
    X = random((2, 3), np.float32)
    with pytest.raises(ShapeError, match="axis 2 is out of range"):
        create_operator("LayerNormalization", axis=2).forward(X, np.ones(3, np.float32))
    with pytest.raises(ShapeError, match="does not broadcast unidirectionally"):
        create_operator("LayerNormalization").forward(X, np.ones(2, np.float32))
    with pytest.raises(Deep500Error, match="stash_type=3"):
        create_operator("LayerNormalization", stash_type=3).forward(X, np.ones(3, np.float32))


# -- RMSNormalization ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", LN_CASES, ids=str)
def test_rmsnorm(shape, axis, dtype):
    X = random(shape, dtype, scale=2, shift=0.5)
    norm_shape = shape[axis % len(shape):]
    W = random(norm_shape, dtype, 1)
    Y = create_operator("RMSNormalization", axis=axis, epsilon=EPS).forward(X, W)
    assert Y.dtype == dtype
    (want,) = oracle("RMSNormalization", [X, W], axis=axis, epsilon=EPS)
    assert_close(Y, want, np.float32)
    stash = 11 if dtype == np.float64 else 1
    op = create_operator("RMSNormalization", axis=axis, epsilon=EPS, stash_type=stash)
    check_backward(op, [X, W], lambda x, w: F.rms_norm(x, norm_shape, w, eps=EPS),
                   **({} if dtype == np.float64 else dict(rtol=1e-4, atol=1e-4)))
    if dtype == np.float64:
        check_gradient(op, [X, W])


def test_rmsnorm_scale_type_and_errors():
    X = random((2, 4), np.float16)
    Y = create_operator("RMSNormalization").forward(X, np.ones(4, np.float32))
    assert Y.dtype == np.float32  # Y has scale's type V
    with pytest.raises(ShapeError, match="scale of shape"):
        create_operator("RMSNormalization").forward(X, np.ones(3, np.float16))


# -- GroupNormalization and InstanceNormalization --------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,groups", [((2, 4, 3), 2), ((2, 6, 2, 2), 3), ((1, 4, 5), 4),
                                          ((3, 4, 2, 2), 1)], ids=str)
def test_groupnorm(shape, groups, dtype):
    X = random(shape, dtype, scale=2, shift=0.5)
    scale, bias = random(shape[1], dtype, 1), random(shape[1], dtype, 2)
    op = create_operator("GroupNormalization", num_groups=groups, epsilon=EPS)
    Y = op.forward(X, scale, bias)
    assert Y.dtype == dtype
    (want,) = oracle("GroupNormalization", [X, scale, bias], opset=21, num_groups=groups,
                     epsilon=EPS)
    assert_close(Y, want, np.float32)
    op = create_operator("GroupNormalization", num_groups=groups, epsilon=EPS,
                         stash_type=11 if dtype == np.float64 else 1)
    check_backward(op, [X, scale, bias],
                   lambda x, s, b: F.group_norm(x, groups, s, b, eps=EPS),
                   **({} if dtype == np.float64 else dict(rtol=1e-4, atol=1e-4)))
    if dtype == np.float64:
        check_gradient(op, [X, scale, bias])


def test_groupnorm_opset18_per_group_parameters():
    X = random((2, 6, 3), np.float32)
    scale, bias = random(3, np.float32, 1), random(3, np.float32, 2)
    Y = create_operator("GroupNormalization", num_groups=3).forward(X, scale, bias)
    (want,) = oracle("GroupNormalization", [X, scale, bias], opset=18, num_groups=3)
    assert_close(Y, want, np.float32)
    op = create_operator("GroupNormalization", num_groups=3, stash_type=11)
    check_gradient(op, [X.astype(np.float64), scale.astype(np.float64),
                        bias.astype(np.float64)])


def test_groupnorm_errors():
    X = random((2, 6, 3), np.float32)
    s = np.ones(6, np.float32)
    with pytest.raises(ShapeError, match="num_groups=4 must be a positive divisor"):
        create_operator("GroupNormalization", num_groups=4).forward(X, s, s)
    with pytest.raises(ShapeError, match="scale must have shape"):
        create_operator("GroupNormalization", num_groups=2).forward(X, s[:5], s)
    with pytest.raises(Deep500Error, match="num_groups is required"):
        create_operator("GroupNormalization").forward(X, s, s)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5), (1, 2, 2, 2, 3)], ids=str)
def test_instancenorm(shape, dtype):
    X = random(shape, dtype, scale=2, shift=0.5)
    scale, B = random(shape[1], dtype, 1), random(shape[1], dtype, 2)
    op = create_operator("InstanceNormalization", epsilon=EPS)
    Y = op.forward(X, scale, B)
    (want,) = oracle("InstanceNormalization", [X, scale, B], epsilon=EPS)
    assert Y.dtype == dtype
    assert_close(Y, want, dtype)
    check_backward(op, [X, scale, B],
                   lambda x, s, b: F.instance_norm(x, weight=s, bias=b, eps=EPS))
    if dtype == np.float64:
        check_gradient(op, [X, scale, B])


def test_instancenorm_errors():
    with pytest.raises(ShapeError, match="one value per channel"):
        create_operator("InstanceNormalization").forward(
            random((2, 3, 4), np.float32), np.ones(2, np.float32), np.ones(3, np.float32))


# -- MeanVarianceNormalization, LpNormalization, LRN -----------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axes", [((2, 3, 4, 2), None), ((3, 4, 5), [1]),
                                        ((3, 4, 5), [0, -1])], ids=str)
def test_mvn(shape, axes, dtype):
    X = random(shape, dtype, scale=2, shift=0.5)
    attributes = {} if axes is None else {"axes": axes}
    op = create_operator("MeanVarianceNormalization", **attributes)
    Y = op.forward(X)
    assert Y.dtype == dtype
    if dtype == np.float32:
        (want,) = oracle("MeanVarianceNormalization", [X], **attributes)
        # onnx's function body forms E[X²] - E[X]², which cancels in part
        assert_close(Y, want, dtype, rtol=1e-4, atol=1e-5)
    else:  # onnx's function body has a float32 epsilon: no float64 oracle
        dims = tuple(a % X.ndim for a in (axes or [0, 2, 3]))
        centered = X - X.mean(axis=dims, keepdims=True)
        want = centered / (np.sqrt((centered ** 2).mean(axis=dims, keepdims=True)) + 1e-9)
        assert_close(Y, want, dtype)
    if dtype == np.float64:
        check_gradient(op, [X])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("shape,axis", [((3, 4), -1), ((2, 3, 4), 1), ((5,), 0)], ids=str)
def test_lpnorm(shape, axis, p, dtype):
    X = random(shape, dtype, shift=0.3)
    op = create_operator("LpNormalization", axis=axis, p=p)
    Y = op.forward(X)
    assert Y.dtype == dtype
    norm = np.linalg.norm(X, ord=p, axis=axis, keepdims=True) if X.ndim > 1 else \
        np.linalg.norm(X, ord=p)
    assert_close(Y, X / norm, dtype)
    # onnx's evaluator forms sum(x^p), not sum(|x|^p): compare with it where x > 0
    (want,) = oracle("LpNormalization", [np.abs(X)], axis=axis, p=p)
    assert_close(op.forward(np.abs(X)), want, dtype)
    check_backward(op, [X], lambda x: F.normalize(x, p=p, dim=axis, eps=0.0))
    if dtype == np.float64:
        check_gradient(op, [X])


def test_lpnorm_zero_slice():
    X = np.array([[0.0, 0.0], [3.0, -4.0]])
    op = create_operator("LpNormalization", p=2)
    np.testing.assert_array_equal(op.forward(X), [[0, 0], [0.6, -0.8]])
    dX = op.backward([np.ones_like(X)], [X], [op.forward(X)])[0]
    assert np.all(np.isfinite(dX)) and np.all(dX[0] == 0)


def test_lpnorm_errors():
    with pytest.raises(Deep500Error, match="p=3"):
        create_operator("LpNormalization", p=3).forward(random((2, 2), np.float32))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_lrn(size, dtype):
    # N = C: onnx's evaluator loops over the batch where it means the channels
    X = random((4, 4, 3, 2), dtype)
    attributes = dict(size=size, alpha=0.25, beta=0.625, bias=1.5)  # exact in float32
    op = create_operator("LRN", **attributes)
    Y = op.forward(X)
    (want,) = oracle("LRN", [X], **attributes)
    assert Y.dtype == dtype
    # onnx's evaluator divides alpha / size in float32 (relative error up to 6e-8)
    assert_close(Y, want, dtype, **({"rtol": 1e-7} if dtype == np.float64 else {}))
    if size % 2:  # PyTorch centres even windows the other way round
        check_backward(op, [X], lambda x: F.local_response_norm(x, size, 0.25, 0.625, 1.5))
    if dtype == np.float64:
        check_gradient(op, [X])


def test_lrn_errors():
    with pytest.raises(Deep500Error, match="size"):
        create_operator("LRN").forward(random((1, 2, 2, 2), np.float32))
    with pytest.raises(ShapeError, match="N, C, D1"):
        create_operator("LRN", size=3).forward(random((2, 2), np.float32))



@pytest.mark.parametrize("op_type", ["InstanceNormalization", "MeanVarianceNormalization"])
def test_half_precision_statistics_in_float32(op_type):
    # a large offset: float16 sums would lose the spread entirely
    X = (random((2, 3, 4, 4), np.float64) + 300).astype(np.float16)
    extra = [np.ones(3, np.float16), np.zeros(3, np.float16)] \
        if op_type == "InstanceNormalization" else []
    Y = create_operator(op_type).forward(X, *extra)
    assert Y.dtype == np.float16
    wide = X.astype(np.float64)
    axes = (2, 3) if op_type == "InstanceNormalization" else (0, 2, 3)
    centered = wide - wide.mean(axis=axes, keepdims=True)
    std = np.sqrt((centered ** 2).mean(axis=axes, keepdims=True))
    exact = centered / (np.sqrt(std ** 2 + 1e-5) if extra else std)
    np.testing.assert_allclose(Y.astype(np.float64), exact, rtol=2e-3, atol=2e-3)
