"""TensorScatter (KV-cache updates) against ONNX's ReferenceEvaluator, and its gradients
against central finite differences in float64."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import ShapeError
from tests.frameworks.reference.onnx_oracle import onnx_run
from tests.frameworks.reference.op_checks import check_gradient

CASES = [  # (cache shape, update length, axis, mode, write indices or None)
    ((2, 3, 6, 4), 2, -2, "linear", [0, 3]), ((2, 3, 6, 4), 2, 2, "linear", None),
    ((2, 5, 3), 3, 1, "circular", [4, 1]), ((3, 4, 2, 5), 3, -1, "circular", [3, 0, 4]),
    ((1, 4, 4), 4, -2, "linear", [0])]


def random(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def inputs_of(shape, length, axis, indices, dtype=np.float64):
    update_shape = list(shape)
    update_shape[axis] = length
    return [random(shape, 0).astype(dtype), random(update_shape, 1).astype(dtype),
            None if indices is None else np.array(indices, np.int64)]


@pytest.mark.parametrize("shape,length,axis,mode,indices", CASES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tensor_scatter_matches_onnx(shape, length, axis, mode, indices, dtype):
    inputs = inputs_of(shape, length, axis, indices, dtype)
    attributes = {"axis": axis, "mode": mode}
    expected, = onnx_run("TensorScatter", inputs, attributes)
    got = create_operator("TensorScatter", **attributes).forward(*inputs)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected)
    assert not np.shares_memory(got, inputs[0])


@pytest.mark.parametrize("shape,length,axis,mode,indices", CASES, ids=str)
def test_tensor_scatter_gradients(shape, length, axis, mode, indices):
    check_gradient(create_operator("TensorScatter", axis=axis, mode=mode),
                   inputs_of(shape, length, axis, indices))


def test_a_linear_write_past_the_end_is_an_error():
    op = create_operator("TensorScatter", axis=1)
    with pytest.raises(ShapeError, match="overruns the cache's 4 positions"):
        op.forward(*inputs_of((2, 4, 3), 2, 1, [1, 3]))
    with pytest.raises(ShapeError, match="after the batch dimension"):
        create_operator("TensorScatter", axis=0).forward(*inputs_of((2, 4, 3), 2, 0, None))
