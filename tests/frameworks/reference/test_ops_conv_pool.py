"""Reference Conv, MaxPool, AveragePool, GlobalAveragePool and Pad against PyTorch (or,
where PyTorch's semantics differ from ONNX's, small loops written from the ONNX spec),
and their gradients against PyTorch autograd and finite differences."""
import itertools

import numpy as np
import pytest

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError
from tests.frameworks.reference.op_checks import (check_backward, check_forward,
                                                  check_gradient, tolerances, torch)

F = torch.nn.functional
DTYPES = [np.float32, np.float64]


def same_pads(size, kernel, stride, dilation, upper):
    """(begin, end) padding of one axis for auto_pad SAME_UPPER / SAME_LOWER."""
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + (kernel - 1) * dilation + 1 - size)
    small, large = total // 2, total - total // 2
    return (small, large) if upper else (large, small)


def explicit_pads(spatial, kernel, attrs):
    """ONNX pads [h_begin, w_begin, h_end, w_end] that attrs (maybe auto_pad) amount to."""
    auto_pad = attrs.get("auto_pad", "NOTSET")
    rank = len(spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        strides = attrs.get("strides", [1] * rank)
        dilations = attrs.get("dilations", [1] * rank)
        pairs = [same_pads(n, k, s, d, auto_pad == "SAME_UPPER")
                 for n, k, s, d in zip(spatial, kernel, strides, dilations)]
        return [b for b, _ in pairs] + [e for _, e in pairs]
    return list(attrs.get("pads", [0] * (2 * rank)))


def torch_pad_arg(pads):
    """ONNX spatial pads [x1_begin, x2_begin, x1_end, x2_end] as F.pad's (last axis
    first) argument."""
    rank = len(pads) // 2
    return [p for axis in reversed(range(rank)) for p in (pads[axis], pads[axis + rank])]


# -- Conv --------------------------------------------------------------------------------
# (X shape, W shape, attributes)
CONV_CASES = [
    ((2, 3, 7, 8), (4, 3, 3, 3), {}),
    ((2, 3, 9, 8), (5, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 2, 9, 10), (3, 2, 3, 2), {"pads": [0, 1, 2, 1], "strides": [1, 2],
                                    "dilations": [2, 1]}),
    ((2, 4, 6, 7), (6, 2, 3, 2), {"group": 2, "pads": [1, 0, 1, 0]}),
    ((2, 4, 7, 7), (8, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),  # depthwise, ×2
    ((2, 3, 7, 9), (4, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 8, 7), (2, 3, 4, 2), {"auto_pad": "SAME_LOWER", "strides": [2, 1],
                                   "dilations": [1, 2]}),
    ((2, 2, 10, 8), (3, 2, 3, 3), {"auto_pad": "VALID", "strides": [3, 2]}),
    ((3, 5, 4, 4), (6, 5, 1, 1), {"kernel_shape": [1, 1]}),
]
CONV_IDS = [f"{x}-{w}-{a}" for x, w, a in CONV_CASES]


def torch_conv(x_shape, w_shape, attrs):
    pads = explicit_pads(x_shape[2:], w_shape[2:], attrs)
    rank = len(x_shape) - 2
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[rank]

    def run(x, w, b=None):
        return conv(F.pad(x, torch_pad_arg(pads)), w, b, stride=attrs.get("strides", 1),
                    dilation=attrs.get("dilations", 1), groups=attrs.get("group", 1))
    return run


def conv_inputs(x_shape, w_shape, dtype, bias=True, seed=0):
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(x_shape).astype(dtype),
              rng.standard_normal(w_shape).astype(dtype)]
    if bias:
        inputs.append(rng.standard_normal(w_shape[0]).astype(dtype))
    return inputs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES, ids=CONV_IDS)
def test_conv_against_torch(x_shape, w_shape, attrs, dtype):
    op = create_operator("Conv", **attrs)
    inputs = conv_inputs(x_shape, w_shape, dtype)
    (y,) = check_forward(op, inputs, torch_conv(x_shape, w_shape, attrs))
    assert y.dtype == dtype
    grads = check_backward(op, inputs, torch_conv(x_shape, w_shape, attrs))
    assert [g.dtype for g in grads] == [dtype] * 3
    # Without bias: two inputs, two gradients.
    grads = check_backward(op, inputs[:2], torch_conv(x_shape, w_shape, attrs))
    assert len(grads) == 2


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 2, 5, 4), (3, 2, 3, 2), {"pads": [1, 0, 0, 1], "strides": [2, 1]}),
    ((2, 4, 4, 5), (4, 2, 2, 3), {"group": 2, "auto_pad": "SAME_UPPER",
                                   "dilations": [2, 1]}),
    ((1, 3, 5, 5), (3, 1, 3, 3), {"group": 3, "auto_pad": "SAME_LOWER", "strides": [2, 2]}),
], ids=str)
def test_conv_gradient(x_shape, w_shape, attrs):
    check_gradient(create_operator("Conv", **attrs), conv_inputs(x_shape, w_shape, np.float64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((2, 3, 11), (4, 3, 3), {"pads": [2, 1], "strides": [2], "dilations": [2]}),
    ((2, 4, 9), (4, 1, 4), {"group": 4, "auto_pad": "SAME_UPPER"}),
    ((1, 2, 5, 6, 4), (3, 2, 3, 2, 2), {"pads": [1, 0, 1, 1, 1, 0], "strides": [2, 1, 2]}),
], ids=str)
def test_conv_1d_3d_against_torch(x_shape, w_shape, attrs, dtype):
    op = create_operator("Conv", **attrs)
    inputs = conv_inputs(x_shape, w_shape, dtype)
    check_forward(op, inputs, torch_conv(x_shape, w_shape, attrs))
    check_backward(op, inputs, torch_conv(x_shape, w_shape, attrs))


@pytest.mark.parametrize("x_shape,w_shape,attrs,error", [
    ((1, 3, 5, 5), (2, 4, 3, 3), {}, ShapeError),                  # channels mismatch
    ((1, 4, 5, 5), (3, 2, 3, 3), {"group": 2}, ShapeError),        # filters % group
    ((1, 3, 5, 5), (3, 1, 3, 3), {"group": 2}, ShapeError),        # channels % group
    ((1, 3, 5, 5), (2, 3, 3, 3), {"kernel_shape": [2, 2]}, ShapeError),
    ((1, 3, 5, 5), (2, 3, 3), {}, ShapeError),                     # rank mismatch
    ((3, 5, 5), (2, 3, 5, 5), {}, ShapeError),
    ((1, 3, 2, 2), (2, 3, 3, 3), {}, ShapeError),                  # kernel > input
    ((1, 3, 5, 5), (2, 3, 3, 3), {"strides": [1, 1, 1]}, ShapeError),
    ((1, 3, 5, 5), (2, 3, 3, 3), {"auto_pad": "SAME"}, UnsupportedError),
    ((1, 3, 5, 5), (2, 3, 3, 3), {"auto_pad": "VALID", "pads": [1, 1, 1, 1]}, ShapeError),
], ids=str)
def test_conv_errors(x_shape, w_shape, attrs, error):
    op = create_operator("Conv", **attrs)
    with pytest.raises(error, match="Conv"):
        op.forward(*conv_inputs(x_shape, w_shape, np.float32, bias=False))


def test_conv_error_messages_and_bias_checks():
    op = create_operator("Conv")
    x, w = conv_inputs((1, 3, 5, 5), (2, 4, 3, 3), np.float32, bias=False)
    with pytest.raises(Deep500Error, match="3 channels.*W has shape"):
        op.forward(x, w)
    x, w, b = conv_inputs((1, 3, 5, 5), (2, 3, 3, 3), np.float32)
    with pytest.raises(ShapeError, match="bias"):
        op.forward(x, w, np.zeros(3, np.float32))
    with pytest.raises(ShapeError, match="dtype"):
        op.forward(x, w.astype(np.float64), b)
    with pytest.raises(Deep500Error, match="no attributes"):
        create_operator("Conv", padding=[1, 1])


# -- pooling: loops written directly from the ONNX spec ---------------------------------------
def pool_output_shape(spatial, kernel, strides, dilations, pads, ceil_mode):
    """ONNX output extents for explicit pads."""
    rank = len(spatial)
    shape = []
    for i in range(rank):
        span = spatial[i] + pads[i] + pads[i + rank] - dilations[i] * (kernel[i] - 1) - 1
        out = (int(np.ceil(span / strides[i])) if ceil_mode else span // strides[i]) + 1
        if ceil_mode and (out - 1) * strides[i] >= spatial[i] + pads[i]:
            out -= 1  # a window starting in the end padding is dropped
        shape.append(out)
    return shape


def naive_pool(x, kind, kernel_shape, strides=None, dilations=None, pads=None, ceil_mode=0,
               count_include_pad=0):
    """Max or average pooling of 2-D x (N, C, H, W), one window at a time."""
    strides = strides or [1, 1]
    dilations = dilations or [1, 1]
    pads = pads or [0, 0, 0, 0]
    height, width = x.shape[2:]
    out_h, out_w = pool_output_shape((height, width), kernel_shape, strides, dilations,
                                     pads, ceil_mode)
    y = np.zeros(x.shape[:2] + (out_h, out_w), dtype=x.dtype)
    for oh, ow in itertools.product(range(out_h), range(out_w)):
        values, counted = [], 0
        for kh, kw in itertools.product(range(kernel_shape[0]), range(kernel_shape[1])):
            h = oh * strides[0] + kh * dilations[0] - pads[0]
            w = ow * strides[1] + kw * dilations[1] - pads[1]
            if 0 <= h < height and 0 <= w < width:
                values.append(x[:, :, h, w])
                counted += 1
            elif (count_include_pad and -pads[0] <= h < height + pads[2]
                  and -pads[1] <= w < width + pads[3]):
                counted += 1  # padding, but not the ceil_mode overhang past it
        values = np.stack(values, axis=-1)
        y[:, :, oh, ow] = values.max(-1) if kind == "max" else values.sum(-1) / counted
    return y


def pool_input(shape, dtype, seed=0):
    """Distinct values (no ties for MaxPool), spaced far beyond finite-difference steps."""
    rng = np.random.default_rng(seed)
    return (rng.permutation(int(np.prod(shape))).reshape(shape) / 10.0 - 1.0).astype(dtype)


# Cases with PyTorch's semantics (symmetric pads <= kernel/2; ceil_mode as in ONNX).
TORCH_POOL_CASES = [
    ((2, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 2, 9, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 3, 7, 8), {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [1, 1, 1, 1]}),
    ((2, 2, 8, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 10, 7), {"kernel_shape": [3, 2], "strides": [3, 2], "pads": [1, 1, 1, 1],
                     "ceil_mode": 1}),
    ((1, 2, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1],
                    "ceil_mode": 1}),   # the last window would start in the end padding
    ((2, 3, 5, 6), {"kernel_shape": [5, 6]}),
]
# Cases PyTorch cannot express directly (asymmetric pads, auto_pad, ceil_mode with
# asymmetric pads, dilations for averaging): compared with naive_pool.
SPEC_POOL_CASES = [
    ((2, 2, 7, 8), {"kernel_shape": [3, 3], "pads": [0, 1, 2, 1], "strides": [2, 1]}),
    ((1, 3, 9, 7), {"kernel_shape": [3, 2], "pads": [2, 0, 1, 1], "strides": [2, 3],
                    "ceil_mode": 1}),
    ((2, 2, 7, 9), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 8, 7), {"kernel_shape": [2, 4], "auto_pad": "SAME_LOWER", "strides": [1, 2]}),
    ((1, 2, 8, 7), {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2],
                    "ceil_mode": 1}),
    ((2, 2, 9, 8), {"kernel_shape": [3, 2], "auto_pad": "VALID", "strides": [2, 3]}),
    ((1, 2, 9, 9), {"kernel_shape": [2, 3], "dilations": [2, 2], "pads": [1, 2, 1, 2],
                    "strides": [2, 1]}),
    ((1, 2, 8, 9), {"kernel_shape": [3, 2], "dilations": [2, 1], "auto_pad": "SAME_UPPER",
                    "strides": [2, 2]}),
    ((1, 2, 8, 10), {"kernel_shape": [2, 3], "dilations": [1, 2], "pads": [0, 1, 1, 2],
                     "strides": [3, 2], "ceil_mode": 1}),
]


def spec_attrs(shape, attrs):
    """attrs with auto_pad replaced by the explicit pads, for naive_pool."""
    resolved = dict(attrs)
    resolved["pads"] = explicit_pads(shape[2:], attrs["kernel_shape"], attrs)
    resolved.pop("auto_pad", None)
    return resolved


def torch_max_pool(attrs, return_indices=False):
    def run(x):
        return F.max_pool2d(x, attrs["kernel_shape"], attrs.get("strides", 1),
                            padding=attrs.get("pads", [0, 0])[:2],
                            dilation=attrs.get("dilations", 1),
                            ceil_mode=bool(attrs.get("ceil_mode", 0)),
                            return_indices=return_indices)
    return run


def torch_avg_pool(attrs):
    def run(x):
        return F.avg_pool2d(x, attrs["kernel_shape"], attrs.get("strides", 1),
                            padding=attrs.get("pads", [0, 0])[:2],
                            ceil_mode=bool(attrs.get("ceil_mode", 0)),
                            count_include_pad=bool(attrs.get("count_include_pad", 0)))
    return run


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,attrs", TORCH_POOL_CASES + [
    ((1, 2, 9, 9), {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 10, 9), {"kernel_shape": [2, 3], "dilations": [3, 2], "strides": [2, 2],
                     "pads": [1, 1, 1, 1], "ceil_mode": 1}),
], ids=str)
def test_maxpool_against_torch(shape, attrs, dtype):
    op = create_operator("MaxPool", **attrs)
    x = pool_input(shape, dtype)
    y, indices = check_forward(op, [x], torch_max_pool(attrs))
    assert y.dtype == dtype and indices.dtype == np.int64
    # Indices are flat positions in X; PyTorch's are per (n, c) plane.
    with torch.no_grad():
        _, plane_indices = torch_max_pool(attrs, True)(torch.from_numpy(x))
    planes = np.arange(shape[0] * shape[1]).reshape(shape[:2] + (1, 1))
    np.testing.assert_array_equal(indices, plane_indices.numpy() + planes * shape[2] * shape[3])
    np.testing.assert_array_equal(x.reshape(-1)[indices], y)
    (dx,) = check_backward(op, [x], torch_max_pool(attrs))
    assert dx.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,attrs", SPEC_POOL_CASES, ids=str)
def test_maxpool_against_spec_loop(shape, attrs, dtype):
    x = pool_input(shape, dtype, seed=1)
    y, indices = create_operator("MaxPool", **attrs).forward(x)
    np.testing.assert_array_equal(y, naive_pool(x, "max", **spec_attrs(shape, attrs)))
    np.testing.assert_array_equal(x.reshape(-1)[indices], y)


@pytest.mark.parametrize("shape,attrs", [
    ((1, 2, 5, 4), {"kernel_shape": [2, 2], "pads": [1, 0, 0, 1], "strides": [2, 1],
                    "ceil_mode": 1}),
    ((1, 1, 5, 6), {"kernel_shape": [3, 2], "auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ((2, 1, 5, 5), {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1]}),
], ids=str)
def test_maxpool_gradient(shape, attrs):
    check_gradient(create_operator("MaxPool", **attrs), [pool_input(shape, np.float64)])


def test_maxpool_storage_order():
    # The ONNX example maxpool_with_argmax_2d_precomputed_strides.
    x = np.arange(1, 26, dtype=np.float32).reshape(1, 1, 5, 5)
    op = create_operator("MaxPool", kernel_shape=[2, 2], strides=[2, 2], storage_order=1)
    y, indices = op.forward(x)
    np.testing.assert_array_equal(y, [[[[7, 9], [17, 19]]]])
    np.testing.assert_array_equal(indices, [[[[6, 16], [8, 18]]]])
    x = pool_input((2, 3, 4, 6), np.float64)
    _, row_major = create_operator("MaxPool", kernel_shape=[2, 3]).forward(x)
    _, column_major = create_operator("MaxPool", kernel_shape=[2, 3],
                                      storage_order=1).forward(x)
    planes, spatial = np.divmod(row_major, 24)
    h, w = np.divmod(spatial, 6)
    np.testing.assert_array_equal(column_major, planes * 24 + h + 4 * w)


def test_maxpool_1d_and_3d():
    x = pool_input((2, 3, 11), np.float64)
    op = create_operator("MaxPool", kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1)
    check_forward(op, [x], lambda t: F.max_pool1d(t, 3, 2, 1, ceil_mode=True))
    check_backward(op, [x], lambda t: F.max_pool1d(t, 3, 2, 1, ceil_mode=True))
    x = pool_input((1, 2, 5, 6, 4), np.float32)
    op = create_operator("MaxPool", kernel_shape=[2, 3, 2], strides=[2, 2, 1])
    check_forward(op, [x], lambda t: F.max_pool3d(t, (2, 3, 2), (2, 2, 1)))
    check_backward(op, [x], lambda t: F.max_pool3d(t, (2, 3, 2), (2, 2, 1)))


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,attrs", TORCH_POOL_CASES, ids=str)
def test_averagepool_against_torch(shape, attrs, dtype, count_include_pad):
    attrs = {**attrs, "count_include_pad": count_include_pad}
    op = create_operator("AveragePool", **attrs)
    x = np.random.default_rng(2).standard_normal(shape).astype(dtype)
    (y,) = check_forward(op, [x], torch_avg_pool(attrs))
    assert y.dtype == dtype
    (dx,) = check_backward(op, [x], torch_avg_pool(attrs))
    assert dx.dtype == dtype


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,attrs", SPEC_POOL_CASES, ids=str)
def test_averagepool_against_spec_loop(shape, attrs, dtype, count_include_pad):
    attrs = {**attrs, "count_include_pad": count_include_pad}
    x = np.random.default_rng(3).standard_normal(shape).astype(dtype)
    y = create_operator("AveragePool", **attrs).forward(x)
    assert y.dtype == dtype
    np.testing.assert_allclose(y, naive_pool(x, "avg", **spec_attrs(shape, attrs)),
                               **tolerances(dtype))


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("shape,attrs", [
    ((1, 2, 5, 4), {"kernel_shape": [2, 3], "pads": [1, 0, 0, 2], "strides": [2, 1],
                    "ceil_mode": 1}),
    ((1, 1, 6, 5), {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2],
                    "dilations": [1, 2]}),
], ids=str)
def test_averagepool_gradient(shape, attrs, count_include_pad):
    op = create_operator("AveragePool", **attrs, count_include_pad=count_include_pad)
    check_gradient(op, [np.random.default_rng(4).standard_normal(shape)])


def test_averagepool_1d_and_3d():
    x = np.random.default_rng(5).standard_normal((2, 3, 10))
    op = create_operator("AveragePool", kernel_shape=[3], strides=[2], pads=[1, 1],
                         count_include_pad=1)
    check_forward(op, [x], lambda t: F.avg_pool1d(t, 3, 2, 1))
    check_backward(op, [x], lambda t: F.avg_pool1d(t, 3, 2, 1))
    x = x.reshape(1, 2, 5, 3, 2).astype(np.float32)
    op = create_operator("AveragePool", kernel_shape=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1])
    torch_fn = lambda t: F.avg_pool3d(t, 2, 1, 1, count_include_pad=False)  # noqa: E731
    check_forward(op, [x], torch_fn)
    check_backward(op, [x], torch_fn)


@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool"])
def test_pool_errors(op_type):
    x = np.zeros((1, 2, 5, 5), np.float32)
    with pytest.raises(ShapeError, match=f"{op_type}.*kernel_shape"):
        create_operator(op_type).forward(x)
    with pytest.raises(ShapeError, match=op_type):
        create_operator(op_type, kernel_shape=[2, 2]).forward(np.zeros((2, 5), np.float32))
    with pytest.raises(ShapeError, match=f"{op_type}.*strides"):
        create_operator(op_type, kernel_shape=[2, 2], strides=[1]).forward(x)
    with pytest.raises(ShapeError, match=f"{op_type}.*larger than the padded input"):
        create_operator(op_type, kernel_shape=[6, 2]).forward(x)
    with pytest.raises(UnsupportedError, match=f"{op_type}.*auto_pad"):
        create_operator(op_type, kernel_shape=[2, 2], auto_pad="same").forward(x)
    if op_type == "MaxPool":
        with pytest.raises(UnsupportedError, match="MaxPool.*storage_order"):
            create_operator(op_type, kernel_shape=[2, 2], storage_order=2).forward(x)


# -- GlobalAveragePool -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (2, 3, 7), (1, 2, 3, 4, 5), (4, 1, 1, 1)],
                         ids=str)
def test_globalaveragepool(shape, dtype):
    op = create_operator("GlobalAveragePool")
    x = np.random.default_rng(6).standard_normal(shape).astype(dtype)
    axes = tuple(range(2, len(shape)))
    (y,) = check_forward(op, [x], lambda t: t.mean(dim=axes, keepdim=True))
    assert y.shape == shape[:2] + (1,) * len(axes) and y.dtype == dtype
    (dx,) = check_backward(op, [x], lambda t: t.mean(dim=axes, keepdim=True))
    assert dx.dtype == dtype
    if dtype == np.float64:
        check_gradient(op, [x])


# -- Pad -----------------------------------------------------------------------------------
TORCH_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate",
               "wrap": "circular"}
# (data shape, ONNX pads, axes); PyTorch pads all but the last two axes only in constant
# mode, so the other modes pad the last two axes here.
PAD_CASES = [
    ((2, 3, 5, 6), [0, 0, 1, 2, 0, 0, 2, 1], None),
    ((2, 3, 5, 6), [0, 0, 3, 0, 0, 0, 0, 4], None),
    ((1, 2, 4, 5), [2, 1, 1, 3], [2, 3]),
    ((1, 2, 4, 5), [1, 2, 3, 1], [-1, -2]),
    ((1, 2, 6, 5), [0, 0, -1, 2, 0, 0, 2, -2], None),     # negative pads crop
]


def torch_pad(data_shape, pads, axes, mode, value=0.0):
    rank = len(data_shape)
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    begin, end = [0] * rank, [0] * rank
    for i, axis in enumerate(axes):
        begin[axis], end[axis] = pads[i], pads[i + len(axes)]
    arg = [p for axis in reversed(range(2, rank)) for p in (begin[axis], end[axis])]
    assert not any(begin[:2] + end[:2])

    def run(x, *_):
        if mode == "constant":
            return F.pad(x, arg, value=value)
        return F.pad(x, arg, mode=TORCH_MODES[mode])
    return run


def pad_inputs(shape, pads, axes, dtype, constant=None, seed=7):
    data = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    inputs = [data, np.array(pads, np.int64)]
    if constant is not None or axes is not None:
        inputs.append(None if constant is None else np.array(constant, dtype))
    if axes is not None:
        inputs.append(np.array(axes, np.int64))
    return inputs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,pads,axes,mode", [
    case + (mode,) for case in PAD_CASES for mode in ("constant", "reflect", "edge", "wrap")
    # PyTorch's circular mode does not crop; the NumPy comparison below covers it.
    if not (mode == "wrap" and min(case[1]) < 0)], ids=str)
def test_pad_against_torch(shape, pads, axes, mode, dtype):
    constant = 0.75 if mode == "constant" else None
    op = create_operator("Pad", mode=mode)
    inputs = pad_inputs(shape, pads, axes, dtype, constant)
    (y,) = check_forward(op, inputs, torch_pad(shape, pads, axes, mode, constant or 0.0))
    assert y.dtype == dtype
    (dx, *rest) = check_backward(op, inputs, torch_pad(shape, pads, axes, mode,
                                                       constant or 0.0), wrt=[0])
    assert dx.dtype == dtype and rest[0] is None


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("shape,pads,axes", [
    ((3, 4), [1, 0, 2, 3], None),
    ((3, 2, 4), [7, 5, 9, 2], [0, 2]),       # pads longer than the axes: repeated folds
    ((5,), [-2, 6], None),
    ((1, 4), [3, 2, 1, 2], None),            # an axis of one element
], ids=str)
def test_pad_against_numpy_and_gradient(shape, pads, axes, mode):
    data = np.random.default_rng(8).standard_normal(shape)
    inputs = [data, np.array(pads, np.int64), np.array(-1.25), np.array(
        list(range(len(shape))) if axes is None else axes, np.int64)]
    op = create_operator("Pad", mode=mode)
    got = op.forward(*inputs)
    full = [0] * (2 * len(shape))
    for i, axis in enumerate(inputs[3]):
        full[axis], full[axis + len(shape)] = pads[i], pads[i + len(inputs[3])]
    crop = tuple(slice(max(0, -b), n - max(0, -e))
                 for b, e, n in zip(full[:len(shape)], full[len(shape):], shape))
    widths = [(max(0, b), max(0, e)) for b, e in zip(full[:len(shape)], full[len(shape):])]
    extra = {"constant_values": -1.25} if mode == "constant" else {}
    np.testing.assert_array_equal(got, np.pad(data[crop], widths, mode=mode, **extra))
    check_gradient(op, inputs)


def test_pad_constant_value_gradient_and_defaults():
    data = np.arange(6.0).reshape(2, 3)
    op = create_operator("Pad")
    y = op.forward(data, np.array([1, 0, 0, 2]))
    np.testing.assert_array_equal(y, np.pad(data, ((1, 0), (0, 2))))
    y = op.forward(data, np.array([1, 0, 0, 2]), np.array([3.0]))
    assert y[0, 0] == 3.0 and y.shape == (3, 5)
    grads = op.backward([np.ones((3, 5))], [data, np.array([1, 0, 0, 2]), np.array([3.0])],
                        [y])
    np.testing.assert_array_equal(grads[0], np.ones((2, 3)))
    np.testing.assert_array_equal(grads[2], [15.0 - 6.0])
    # No padding at all still returns a new array.
    same = op.forward(data, np.zeros(4, np.int64))
    assert same is not data and not np.shares_memory(same, data)


@pytest.mark.parametrize("args,attrs,error,match", [
    (([1, 1, 1],), {}, ShapeError, "pads has 3 values"),
    (([1, 1],), {}, ShapeError, "needs 4"),
    (([1.0, 1, 1, 1],), {}, ShapeError, "integer"),
    (([1, 1, 1, 1],), {"mode": "symmetric"}, UnsupportedError, "mode"),
    (([1, 1], None, [2]), {}, ShapeError, "out of range"),
    (([1, 1, 1, 1], None, [0, -2]), {}, ShapeError, "repeat"),
    (([-3, 0, 0, -1],), {}, ShapeError, "remove more"),
], ids=str)
def test_pad_errors(args, attrs, error, match):
    data = np.zeros((2, 3), np.float32)
    pads, *rest = args
    rest = [None if r is None else np.array(r) for r in rest]
    with pytest.raises(error, match=f"Pad.*{match}"):
        create_operator("Pad", **attrs).forward(data, np.array(pads), *rest)
