"""The reference Transpose's copy (``transpose_copy``), which moves runs of trailing axes
that stay in place as single items: equal to ``np.transpose(...).copy()`` for every
permutation, dtype and layout, C-contiguous and sharing no memory with its input."""
import itertools

import numpy as np
import pytest

from deep500.frameworks.reference.operators.op_transpose import transpose_copy


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_, np.float16,
                                   np.complex64, object, "U3"])
def test_equals_numpy_transpose_for_every_permutation(dtype):
    rng = np.random.default_rng(0)
    for rank in range(1, 5):
        shape = tuple(int(d) for d in rng.integers(1, 5, rank))
        data = rng.integers(0, 9, shape).astype(dtype)
        for perm in itertools.permutations(range(rank)):
            got, want = transpose_copy(data, perm), np.transpose(data, perm)
            assert got.shape == want.shape and got.dtype == want.dtype, (shape, perm)
            np.testing.assert_array_equal(got, want)
            assert got.flags.c_contiguous and not np.shares_memory(got, data)


@pytest.mark.parametrize("data", [
    np.arange(48, dtype=np.float32).reshape(4, 6, 2)[:, ::2],   # not contiguous
    np.zeros((3, 0, 2), np.float32)])                           # empty
def test_other_layouts_and_empty_arrays(data):
    for perm in itertools.permutations(range(data.ndim)):
        np.testing.assert_array_equal(transpose_copy(data, perm), np.transpose(data, perm))
