"""Conv's group=1 forward builds im2col columns for a chunk of samples at a time: any
chunk size gives the same Y (bit for bit: every sample's product is the same call)."""
import numpy as np
import pytest

from deep500.frameworks.reference.operators.registry import create_operator

CASES = [dict(pads=[1, 1, 1, 1]), dict(strides=[2, 1], dilations=[1, 2], pads=[0, 2, 1, 0]),
         dict(), dict(kernel_shape=[1, 1])]


@pytest.mark.parametrize("attributes", CASES)
@pytest.mark.parametrize("column_bytes", [1, 700, 1 << 30])
def test_chunked_columns_give_the_same_output(attributes, column_bytes):
    rng = np.random.default_rng(0)
    kernel = attributes.get("kernel_shape", [3, 3])
    X = rng.standard_normal((5, 4, 7, 6)).astype(np.float32)
    W = rng.standard_normal((3, 4, *kernel)).astype(np.float32)
    B = rng.standard_normal(3).astype(np.float32)
    whole = create_operator("Conv", **attributes).forward(X, W, B)
    op = create_operator("Conv", **attributes)
    op.COLUMN_BYTES = column_bytes   # 1: one sample at a time
    np.testing.assert_array_equal(op.forward(X, W, B), whole)
    # and against the definition, in float64 (float32 sums of 36 products: ~1e-5)
    expected = create_operator("Conv", **attributes).forward(
        X.astype(np.float64), W.astype(np.float64), B.astype(np.float64))
    np.testing.assert_allclose(whole, expected, rtol=1e-5, atol=1e-5)
