"""Reference Softmax, LogSoftmax and SoftmaxCrossEntropyLoss against PyTorch and finite
differences."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error, ShapeError
from tests.frameworks.reference.op_checks import (check_backward, check_forward,
                                                  check_gradient, torch)

F = torch.nn.functional
DTYPES = [np.float32, np.float64]


# -- Softmax / LogSoftmax --------------------------------------------------------------
SOFTMAXES = {"Softmax": F.softmax, "LogSoftmax": F.log_softmax}
AXES = [((5,), None), ((3, 4), None), ((3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), -2),
        ((2, 3, 4, 2), -4), ((2, 3, 4, 2), 3)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis", AXES, ids=str)
@pytest.mark.parametrize("op_type", sorted(SOFTMAXES))
def test_softmax_forward_backward(op_type, shape, axis, dtype):
    x = (np.random.default_rng(0).standard_normal(shape) * 3).astype(dtype)
    op = create_operator(op_type, **({} if axis is None else {"axis": axis}))
    torch_fn = lambda t: SOFTMAXES[op_type](t, dim=-1 if axis is None else axis)  # noqa: E731
    (y,) = check_forward(op, [x], torch_fn)
    assert y.dtype == dtype
    (dx,) = check_backward(op, [x], torch_fn)
    assert dx.dtype == dtype


@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("op_type", sorted(SOFTMAXES))
def test_softmax_finite_differences(op_type, axis):
    x = np.random.default_rng(1).standard_normal((3, 4))
    check_gradient(create_operator(op_type, axis=axis), [x])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op_type", sorted(SOFTMAXES))
def test_softmax_is_stable_for_large_inputs(op_type, dtype):
    x = np.array([[1000.0, 0.0, -1000.0], [1e4, 1e4, 1e4]], dtype)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        y = create_operator(op_type).forward(x)
    expected = SOFTMAXES[op_type](torch.from_numpy(x), dim=-1).numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    assert np.all(np.isfinite(y))


@pytest.mark.parametrize("axis", [2, -3])
@pytest.mark.parametrize("op_type", sorted(SOFTMAXES))
def test_softmax_rejects_bad_axis(op_type, axis):
    with pytest.raises(ShapeError, match=rf"{op_type}.*axis {axis}.*rank 2"):
        create_operator(op_type, axis=axis).forward(np.ones((2, 3)))


# -- SoftmaxCrossEntropyLoss -----------------------------------------------------------
SCE_SHAPES = [(6, 4), (3, 5, 4), (2, 3, 2, 3)]
SCE_SETTINGS = [  # (reduction, weighted, ignore_index)
    ("mean", False, None), ("sum", False, None), ("none", False, None),
    ("mean", True, None), ("sum", True, None), ("none", True, None),
    ("mean", False, 1), ("mean", True, 2), ("sum", True, 0), ("none", False, -1),
]


def sce_inputs(shape, dtype, weighted, ignore_index, seed=0, label_dtype=np.int64):
    rng = np.random.default_rng(seed)
    scores = (rng.standard_normal(shape) * 2).astype(dtype)
    labels_shape = (shape[0],) + shape[2:]
    labels = rng.integers(0, shape[1], labels_shape).astype(label_dtype)
    if ignore_index is not None:
        # Make sure some, but not all, elements are ignored.
        labels.flat[::3] = ignore_index
        labels.flat[1] = (ignore_index + 1) % shape[1]
    inputs = [scores, labels]
    if weighted:
        inputs.append(rng.uniform(0.2, 2.0, shape[1]).astype(dtype))
    return inputs


def torch_sce(reduction, ignore_index):
    def fn(scores, labels, weights=None):
        loss = F.cross_entropy(scores, labels.long(), weight=weights, reduction=reduction,
                               ignore_index=-100 if ignore_index is None else ignore_index)
        return loss, F.log_softmax(scores, dim=1)
    return fn


def sce_op(reduction, ignore_index):
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    return create_operator("SoftmaxCrossEntropyLoss", **attrs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("setting", SCE_SETTINGS, ids=str)
@pytest.mark.parametrize("shape", SCE_SHAPES, ids=str)
def test_sce_forward_backward(shape, setting, dtype):
    reduction, weighted, ignore_index = setting
    inputs = sce_inputs(shape, dtype, weighted, ignore_index)
    op = sce_op(reduction, ignore_index)
    loss, log_prob = check_forward(op, inputs, torch_sce(reduction, ignore_index))
    assert loss.dtype == log_prob.dtype == dtype and log_prob.shape == shape
    expected_shape = () if reduction != "none" else inputs[1].shape
    assert loss.shape == expected_shape
    grads = check_backward(op, inputs, torch_sce(reduction, ignore_index), wrt=[0])
    assert grads[0].dtype == dtype
    assert len(grads) == len(inputs) and all(g is None for g in grads[1:])


def test_sce_weighted_mean_follows_onnx_definition():
    """mean = Σ L / Σ weights[label] over the non-ignored elements."""
    scores = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6],
                              [0.3, 0.3, 0.4]]))
    labels = np.array([0, 1, 2, 1], np.int32)
    weights = np.array([1.0, 2.0, 4.0])
    op = create_operator("SoftmaxCrossEntropyLoss", ignore_index=2)
    loss, _ = op.forward(scores, labels, weights)
    expected = -(1 * np.log(0.5) + 2 * np.log(0.8) + 2 * np.log(0.3)) / (1 + 2 + 2)
    np.testing.assert_allclose(loss, expected, rtol=1e-12)


@pytest.mark.parametrize("setting", [("mean", True, 1), ("sum", False, None),
                                     ("none", True, None), ("mean", False, None)], ids=str)
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 3)], ids=str)
def test_sce_finite_differences(shape, setting):
    reduction, weighted, ignore_index = setting
    inputs = sce_inputs(shape, np.float64, weighted, ignore_index, seed=3,
                        label_dtype=np.int32)
    check_gradient(sce_op(reduction, ignore_index), inputs)


def test_sce_loss_only_gradient():
    """Upstream gradient on the loss alone (log_prob unused): softmax minus one-hot."""
    scores, labels = sce_inputs((5, 4), np.float64, False, None, seed=4)
    op = create_operator("SoftmaxCrossEntropyLoss", reduction="sum")
    outputs = op.forward(scores, labels)
    d_scores, d_labels = op.backward([np.array(1.0), None], [scores, labels], outputs)
    expected = np.exp(outputs[1]) - np.eye(4)[labels]
    np.testing.assert_allclose(d_scores, expected, rtol=1e-12, atol=1e-15)
    assert d_labels is None


def test_sce_rejects_bad_labels():
    scores = np.zeros((3, 4), np.float32)
    op = create_operator("SoftmaxCrossEntropyLoss")
    with pytest.raises(ShapeError, match=r"SoftmaxCrossEntropyLoss.*labels.*\(3,\).*\(4,\)"):
        op.forward(scores, np.zeros(4, np.int64))
    with pytest.raises(ShapeError, match="SoftmaxCrossEntropyLoss.*integer"):
        op.forward(scores, np.zeros(3, np.float32))
    with pytest.raises(ShapeError, match=r"SoftmaxCrossEntropyLoss.*weights.*\(4,\)"):
        op.forward(scores, np.zeros(3, np.int64), np.ones(3, np.float32))
    with pytest.raises(Deep500Error, match="SoftmaxCrossEntropyLoss.*label 4.*out of range"):
        op.forward(scores, np.array([0, 4, 1]))
    with pytest.raises(Deep500Error, match="reduction"):
        create_operator("SoftmaxCrossEntropyLoss", reduction="average")
