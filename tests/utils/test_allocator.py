"""deep500.utils.allocator.aligned_empty: how every path allocates C++ operators'
outputs (64-byte aligned, malloc of the size plus 64 bytes)."""
import os

import numpy as np
import pytest

import deep500 as d5
import deep500.frameworks.reference as d5ref
from deep500.utils.allocator import OUTPUT_ALIGNMENT, aligned_empty


@pytest.mark.parametrize("shape,dtype", [((1,), np.float32), ((3, 5), np.float64),
                                         ((7,), np.int32), ((2, 0), np.int64),
                                         ((), np.float32), ((1 << 20,), np.float32)])
def test_aligned_empty_is_a_writable_aligned_c_array(shape, dtype):
    for _ in range(8):  # several allocations: malloc's own alignment is 16 bytes
        array = aligned_empty(shape, dtype)
        assert array.shape == shape and array.dtype == dtype
        assert array.flags.c_contiguous and array.flags.writeable
        assert array.ctypes.data % OUTPUT_ALIGNMENT == 0
        # The buffer under the array is exactly nbytes + OUTPUT_ALIGNMENT: the size the
        # C++ glue libraries malloc, so that a freed output's memory is reused.
        assert array.base.nbytes == array.nbytes + OUTPUT_ALIGNMENT
        array.fill(1)
        assert array.sum() == array.size


def test_reference_cpp_op_outputs_are_aligned():
    source = os.path.join(os.path.dirname(os.path.dirname(__file__)), "frameworks",
                          "cpp_ops", "scale_add.cpp")
    f32 = d5.tensordesc("float32", [4, 5])
    op = d5ref.custom_op(d5.compile_custom_cppop("scale_add", source, [f32, f32], [f32]))
    for _ in range(8):
        z = op.forward(np.ones((4, 5), np.float32), np.ones((4, 5), np.float32))
        assert z.ctypes.data % OUTPUT_ALIGNMENT == 0
        np.testing.assert_array_equal(z, np.full((4, 5), 3.0, np.float32))
