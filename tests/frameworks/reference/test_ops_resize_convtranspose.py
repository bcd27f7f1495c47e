"""Reference ConvTranspose, Resize, Upsample, LpPool, Col2Im, MaxUnpool, GridSample and
CenterCropPad: forward against onnx's ReferenceEvaluator on one-node models (onnxruntime
where the two differ from the spec), backward against finite differences in float64 and
PyTorch autograd where PyTorch has the operator."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from deep500.frameworks.reference.operators import create_operator
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError
from tests.frameworks.reference.op_checks import check_backward, check_gradient, torch

DTYPES = [np.float32, np.float64]
# float32: sums of a few dozen products; float64: rounding only.
TOL = {np.float32: dict(rtol=1e-5, atol=1e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


def run_onnx(op_type, inputs, opset=22, engine="onnx", n_outputs=1, **attributes):
    """Outputs of a one-node model; ``inputs`` is a list of (name, array or None)."""
    names = [name if x is not None else "" for name, x in inputs]
    outputs = [f"Y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, **attributes)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in inputs if x is not None],
        [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(inputs[0][1].dtype),
                                       None) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: x for n, x in inputs if x is not None}
    if engine == "onnx":
        return ReferenceEvaluator(model).run(None, feeds)
    ort = pytest.importorskip("onnxruntime")
    model.ir_version = 10
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_same(got, want, tol):
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, **tol)


def rand(shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# -- ConvTranspose ----------------------------------------------------------------------
CONVT_CASES = [
    ((2, 3, 4, 5), (3, 2, 3, 3), {}),
    ((1, 2, 5), (2, 3, 3), {"strides": [2], "pads": [1, 2]}),
    ((1, 2, 4, 3), (2, 2, 3, 2), {"strides": [3, 2], "output_padding": [1, 1],
                                  "pads": [1, 0, 1, 1]}),
    ((2, 4, 3, 3), (4, 3, 2, 3), {"group": 2, "dilations": [2, 1], "strides": [1, 2]}),
    ((1, 2, 3, 4), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 4), (2, 1, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8],
                                  "auto_pad": "SAME_UPPER"}),
    ((1, 1, 2, 3, 2), (1, 2, 2, 2, 3), {"strides": [2, 1, 2], "pads": [0, 1, 1, 1, 0, 0]}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]}),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape,w_shape,attrs", CONVT_CASES)
def test_convtranspose_forward(x_shape, w_shape, attrs, dtype):
    X, W = rand(x_shape, dtype), rand(w_shape, dtype, 1)
    B = rand((w_shape[1] * attrs.get("group", 1),), dtype, 2)
    got = create_operator("ConvTranspose", **attrs).forward(X, W, B)
    # onnx's reference evaluator fails on groups of more than one input channel.
    engine = "ort" if attrs.get("group", 1) > 1 else "onnx"
    if engine == "ort" and dtype == np.float64:
        pytest.skip("onnxruntime's ConvTranspose is float32 only")
    want = run_onnx("ConvTranspose", [("X", X), ("W", W), ("B", B)], engine=engine,
                    opset=11 if engine == "ort" else 22, **attrs)
    assert_same(got, want, TOL[dtype])


def test_convtranspose_output_shape_pads_as_spec():
    # An odd total padding with output_shape and no auto_pad puts the larger half first
    # (onnxruntime; onnx's reference evaluator crops the end instead).
    X, W = rand((1, 1, 3, 3), np.float32), rand((1, 2, 3, 3), np.float32, 1)
    attrs = {"strides": [3, 2], "output_shape": [8, 6]}
    got = create_operator("ConvTranspose", **attrs).forward(X, W)
    want = run_onnx("ConvTranspose", [("X", X), ("W", W)], engine="ort", opset=11, **attrs)
    assert_same(got, want, TOL[np.float32])


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONVT_CASES[:4] + CONVT_CASES[6:8])
def test_convtranspose_gradient(x_shape, w_shape, attrs):
    X, W = rand(x_shape), rand(w_shape, seed=1)
    B = rand((w_shape[1] * attrs.get("group", 1),), seed=2)
    check_gradient(create_operator("ConvTranspose", **attrs), [X, W, B])


def test_convtranspose_backward_matches_torch():
    X, W, B = rand((2, 4, 4, 3)), rand((4, 3, 3, 2), seed=1), rand((6,), seed=2)
    attrs = {"group": 2, "strides": [2, 3], "pads": [1, 1, 1, 1], "output_padding": [1, 2],
             "dilations": [1, 2]}
    op = create_operator("ConvTranspose", **attrs)
    check_backward(op, [X, W, B], lambda x, w, b: torch.nn.functional.conv_transpose2d(
        x, w, b, stride=(2, 3), padding=(1, 1), output_padding=(1, 2), groups=2,
        dilation=(1, 2)))


def test_convtranspose_bad_input():
    X, W = rand((1, 3, 4, 4)), rand((3, 2, 3, 3))
    with pytest.raises(ShapeError, match="group=2 must divide"):
        create_operator("ConvTranspose", group=2).forward(X, W)
    with pytest.raises(ShapeError, match="first axis"):
        create_operator("ConvTranspose").forward(X, rand((2, 2, 3, 3)))
    with pytest.raises(ShapeError, match="strides"):
        create_operator("ConvTranspose", strides=[2]).forward(X, W)
    with pytest.raises(ShapeError, match="leave no output"):
        create_operator("ConvTranspose", pads=[3, 3, 3, 3]).forward(X, W)
    with pytest.raises(UnsupportedError, match="auto_pad"):
        create_operator("ConvTranspose", auto_pad="SAME").forward(X, W)


# -- Resize and Upsample ----------------------------------------------------------------
f32 = np.float32
RESIZE_CASES = [  # (X shape, scales or None, sizes or None, roi or None, attributes)
    ((1, 2, 4, 5), [1, 1, 1.7, 0.6], None, None, {"mode": "nearest"}),
    ((1, 1, 5, 4), [1, 1, 0.5, 2.5], None, None,
     {"mode": "nearest", "nearest_mode": "round_prefer_ceil",
      "coordinate_transformation_mode": "asymmetric"}),
    ((2, 1, 4, 4), None, [2, 1, 7, 3], None,
     {"mode": "nearest", "nearest_mode": "floor",
      "coordinate_transformation_mode": "align_corners"}),
    ((1, 1, 4, 6), None, [1, 1, 9, 4], None, {"mode": "nearest", "nearest_mode": "ceil",
                                             "coordinate_transformation_mode":
                                                 "half_pixel_symmetric"}),
    ((1, 2, 4, 5), [1, 1, 1.5, 0.7], None, None, {"mode": "linear"}),
    ((1, 1, 5, 4), None, [1, 1, 3, 7], None,
     {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ((1, 1, 5, 4), [1, 1, 0.6, 1.8], None, None,
     {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    ((1, 1, 6, 6), [1, 1, 0.45, 0.7], None, None, {"mode": "linear", "antialias": 1}),
    ((1, 1, 6, 5), [1, 1, 1.4, 0.6], None, None, {"mode": "cubic"}),
    ((1, 1, 6, 5), [1, 1, 0.6, 1.3], None, None,
     {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}),
    ((1, 1, 8, 7), None, [1, 1, 3, 4], None, {"mode": "cubic", "antialias": 1}),
    ((1, 1, 5, 6), None, [1, 1, 3, 3], [0, 0, 0.2, 0.3, 1, 1, 0.9, 1.2],
     {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
      "extrapolation_value": 7.5}),
    ((2, 3, 4, 5), None, [3, 7], None, {"mode": "linear", "axes": [3, 2],
                                        "keep_aspect_ratio_policy": "not_larger"}),
    ((1, 5, 4, 3), None, [8, 2], None, {"mode": "nearest", "axes": [2, 1],
                                        "keep_aspect_ratio_policy": "not_smaller"}),
    ((3, 4, 5), [1.5, 0.5], None, None, {"mode": "cubic", "axes": [2, 0]}),
]


def resize_inputs(x_shape, scales, sizes, roi, dtype):
    X = rand(x_shape, dtype) if np.dtype(dtype).kind == "f" else \
        np.random.default_rng(0).integers(0, 200, x_shape).astype(dtype)
    # roi in X's precision (the evaluator computes coordinates in roi's).
    roi_dtype = dtype if np.dtype(dtype).kind == "f" else f32
    return [("X", X), ("roi", None if roi is None else np.array(roi, roi_dtype)),
            ("scales", None if scales is None else np.array(scales, f32)),
            ("sizes", None if sizes is None else np.array(sizes, np.int64))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape,scales,sizes,roi,attrs", RESIZE_CASES)
def test_resize_forward(x_shape, scales, sizes, roi, attrs, dtype):
    inputs = resize_inputs(x_shape, scales, sizes, roi, dtype)
    got = create_operator("Resize", **attrs).forward(*[x for _, x in inputs])
    # The evaluator computes cubic coefficients from the float32 attribute cubic_coeff_a,
    # in float32 precision: a float64 comparison can only be as close as float32's.
    tol = TOL[np.float32] if attrs["mode"] == "cubic" else TOL[dtype]
    assert_same(got, run_onnx("Resize", inputs, opset=19, **attrs), tol)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
def test_resize_nearest_integers(dtype):
    inputs = resize_inputs((1, 2, 3, 4), [1, 1, 2.5, 0.5], None, None, dtype)
    got = create_operator("Resize").forward(*[x for _, x in inputs])
    assert_same(got, run_onnx("Resize", inputs, opset=19), dict(rtol=0, atol=0))


@pytest.mark.parametrize("x_shape,scales,sizes,roi,attrs",
                         [c for c in RESIZE_CASES if c[4]["mode"] != "nearest"] +
                         RESIZE_CASES[:3])
def test_resize_gradient(x_shape, scales, sizes, roi, attrs):
    inputs = [x for _, x in resize_inputs(x_shape, scales, sizes, roi, np.float64)]
    op = create_operator("Resize", **attrs)
    grads = op.backward([np.ones_like(op.forward(*inputs))], inputs, [])
    assert grads[1:] == [None] * 3
    check_gradient(op, inputs, wrt=[0])


def test_resize_backward_matches_torch():
    X = rand((2, 3, 5, 4))
    op = create_operator("Resize", mode="linear")
    check_backward(op, [X, None, None, np.array([2, 3, 8, 2], np.int64)],
                   lambda x, roi, s, sizes: torch.nn.functional.interpolate(
                       x, size=(8, 2), mode="bilinear", align_corners=False), wrt=[0])


def test_resize_legacy_two_inputs_and_upsample():
    X = rand((1, 2, 2, 3), f32)
    scales = np.array([1, 1, 2, 1.5], f32)
    want = run_onnx("Upsample", [("X", X), ("scales", scales)], opset=9, engine="ort",
                    mode="linear")
    assert_same(create_operator("Upsample", mode="linear").forward(X, scales), want,
                TOL[f32])
    assert_same(create_operator("Resize", mode="linear").forward(X, scales), want, TOL[f32])
    nearest = run_onnx("Upsample", [("X", X), ("scales", scales)], opset=9, mode="nearest",
                       engine="ort")
    assert_same(create_operator("Upsample").forward(X, scales), nearest, TOL[f32])
    check_gradient(create_operator("Upsample", mode="linear"),
                   [X.astype(np.float64), scales], wrt=[0])


@pytest.mark.parametrize("opset,op_type,inputs,attrs", [
    (10, "Resize", ["X", "scales"], {"mode": "nearest"}),
    (10, "Resize", ["X", "scales"], {"mode": "linear"}),
    (11, "Resize", ["X", "roi", "scales"], {"mode": "nearest", "nearest_mode": "ceil",
                                             "coordinate_transformation_mode":
                                                 "tf_half_pixel_for_nn"}),
    (7, "Upsample", ["X"], {"mode": "linear", "scales": [1.0, 1.0, 2.0, 1.5]}),
    (9, "Upsample", ["X", "scales"], {"mode": "nearest"}),
])
def test_resize_and_upsample_older_opsets_through_the_visitor(opset, op_type, inputs, attrs):
    import deep500.frameworks.reference as d5ref
    X = rand((1, 2, 5, 4), f32)
    scales = [1, 1, 0.6, 2.5] if op_type == "Resize" else [1, 1, 2, 1.5]
    values = {"X": X, "roi": np.zeros(0, f32), "scales": np.array(scales, f32)}
    feeds = [(name, values[name]) for name in inputs]
    want = run_onnx(op_type, feeds, opset=opset, engine="ort", **attrs)[0]
    node = helper.make_node(op_type, inputs, ["Y"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", 1, X.shape)],
        [helper.make_tensor_value_info("Y", 1, want.shape)],
        initializer=[helper.make_tensor(n, 1, values[n].shape, values[n]) for n in inputs[1:]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    got = d5ref.from_onnx(model).inference({"X": X})["Y"]
    assert_same(got, [want], TOL[f32])


def test_resize_negative_axes():
    X, sizes = rand((1, 5, 4, 3)), np.array([8, 2], np.int64)
    want = create_operator("Resize", axes=[2, 1]).forward(X, None, None, sizes)
    np.testing.assert_array_equal(
        create_operator("Resize", axes=[-2, 1]).forward(X, None, None, sizes), want)


def test_resize_bad_input():
    X = rand((1, 1, 4, 4))
    scales, sizes = np.array([1, 1, 2, 2], f32), np.array([1, 1, 8, 8], np.int64)
    with pytest.raises(ShapeError, match="exactly one of"):
        create_operator("Resize").forward(X, None, scales, sizes)
    with pytest.raises(ShapeError, match="exactly one of"):
        create_operator("Resize").forward(X, None, None, None)
    with pytest.raises(ShapeError, match="scales has 2 values"):
        create_operator("Resize").forward(X, None, scales[:2])
    with pytest.raises(UnsupportedError, match="mode"):
        create_operator("Resize", mode="area").forward(X, None, scales)
    with pytest.raises(ShapeError, match="axes"):
        create_operator("Resize", axes=[4]).forward(X, None, scales[:1])
    with pytest.raises(ShapeError, match=">= 1"):
        create_operator("Upsample").forward(X, np.array([1, 1, 0.5, 1], f32))
    with pytest.raises(Deep500Error, match="no attributes"):
        create_operator("Upsample", nearest_mode="floor")


# -- LpPool -----------------------------------------------------------------------------
LPPOOL_CASES = [
    ((2, 3, 7), {"kernel_shape": [3]}),
    ((1, 2, 6, 7), {"kernel_shape": [3, 2], "p": 3, "strides": [2, 1], "pads": [1, 0, 1, 1]}),
    ((1, 2, 7, 6), {"kernel_shape": [2, 3], "p": 1, "dilations": [2, 1],
                    "pads": [1, 1, 0, 1]}),
    ((1, 2, 7, 6), {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER", "strides": [2, 1]}),
    ((1, 1, 4, 5, 4), {"kernel_shape": [2, 2, 3], "auto_pad": "SAME_LOWER", "p": 4}),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape,attrs", LPPOOL_CASES)
def test_lppool_forward(x_shape, attrs, dtype):
    X = rand(x_shape, dtype)
    got = create_operator("LpPool", **attrs).forward(X)
    assert_same(got, run_onnx("LpPool", [("X", X)], **attrs), TOL[dtype])


@pytest.mark.parametrize("x_shape,attrs", LPPOOL_CASES)
def test_lppool_gradient(x_shape, attrs):
    check_gradient(create_operator("LpPool", **attrs), [rand(x_shape)])


def test_lppool_ceil_mode_and_same_with_dilations():
    # The evaluator scales ceil_mode windows that pass the edge and ignores dilations in
    # SAME padding; check against windows summed here instead.
    X = rand((1, 2, 6, 7))
    Y = create_operator("LpPool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1).forward(X)
    assert Y.shape == (1, 2, 3, 3)
    np.testing.assert_allclose(Y[0, 1, 2, 1], np.sqrt((X[0, 1, 4:6, 2:5] ** 2).sum()),
                               rtol=1e-12)
    Y = create_operator("LpPool", kernel_shape=[2, 2], dilations=[2, 2], p=3,
                        auto_pad="SAME_UPPER").forward(X)
    assert Y.shape == X.shape   # total padding 2 per axis: one before, one after
    np.testing.assert_allclose(Y[0, 0, 0, 0], np.abs(X[0, 0, 1, 1]), rtol=1e-12)
    np.testing.assert_allclose(Y[0, 0, 3, 2], np.cbrt((np.abs(X[0, 0, 2:5:2, 1:4:2]) ** 3
                                                       ).sum()), rtol=1e-12)


def test_lppool_bad_input():
    with pytest.raises(ShapeError, match="kernel_shape is required"):
        create_operator("LpPool").forward(rand((1, 1, 4, 4)))
    with pytest.raises(ShapeError, match="p=0"):
        create_operator("LpPool", kernel_shape=[2, 2], p=0).forward(rand((1, 1, 4, 4)))


# -- Col2Im -----------------------------------------------------------------------------
COL2IM_CASES = [  # (N, C, image_shape, block_shape, attributes)
    (2, 3, [5, 5], [2, 2], {}),
    (1, 2, [6, 7], [3, 2], {"strides": [2, 1], "pads": [1, 0, 1, 1]}),
    (1, 1, [7, 6], [2, 3], {"dilations": [2, 1], "strides": [1, 2]}),
    (1, 2, [3, 4, 3], [2, 2, 1], {}),
]


def col2im_inputs(N, C, image, block, attrs, dtype=np.float64):
    rank = len(image)
    pads = attrs.get("pads", [0] * 2 * rank)
    s, d = attrs.get("strides", [1] * rank), attrs.get("dilations", [1] * rank)
    blocks = np.prod([(n + pads[i] + pads[i + rank] - (d[i] * (k - 1) + 1)) // s[i] + 1
                      for i, (n, k) in enumerate(zip(image, block))])
    return [rand((N, C * int(np.prod(block)), int(blocks)), dtype),
            np.array(image, np.int64), np.array(block, np.int64)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("N,C,image,block,attrs", COL2IM_CASES)
def test_col2im_forward(N, C, image, block, attrs, dtype):
    inputs = col2im_inputs(N, C, image, block, attrs, dtype)
    got = create_operator("Col2Im", **attrs).forward(*inputs)
    want = run_onnx("Col2Im", list(zip(["input", "image_shape", "block_shape"], inputs)),
                    **attrs)
    assert_same(got, want, TOL[dtype])


@pytest.mark.parametrize("N,C,image,block,attrs", COL2IM_CASES)
def test_col2im_gradient(N, C, image, block, attrs):
    check_gradient(create_operator("Col2Im", **attrs),
                   col2im_inputs(N, C, image, block, attrs), wrt=[0])


def test_col2im_backward_matches_torch():
    attrs = {"strides": [2, 1], "pads": [1, 0, 1, 0]}
    inputs = col2im_inputs(2, 2, [6, 7], [3, 2], attrs)
    check_backward(create_operator("Col2Im", **attrs), inputs,
                   lambda x, i, b: torch.nn.functional.fold(
                       x, (6, 7), (3, 2), stride=(2, 1), padding=(1, 0)), wrt=[0])


def test_col2im_bad_input():
    inputs = col2im_inputs(1, 2, [5, 5], [2, 2], {})
    with pytest.raises(ShapeError, match="blocks"):
        create_operator("Col2Im", strides=[2, 2]).forward(*inputs)
    with pytest.raises(ShapeError, match="multiple"):
        create_operator("Col2Im").forward(inputs[0][:, :7], *inputs[1:])


# -- MaxUnpool --------------------------------------------------------------------------
def maxpool_indices(X, **attrs):
    return run_onnx("MaxPool", [("X", X)], n_outputs=2, **attrs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("x_shape,attrs,output_shape", [
    ((2, 3, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}, None),
    ((1, 2, 7, 5), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}, None),
    ((1, 1, 4, 4), {"kernel_shape": [2, 2], "strides": [2, 2]}, [1, 1, 5, 6]),
    ((1, 2, 4, 4, 4), {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}, None),
])
def test_maxunpool_forward(x_shape, attrs, output_shape, dtype):
    pooled, indices = maxpool_indices(rand(x_shape, dtype), **attrs)
    inputs = [("X", pooled), ("I", indices)]
    if output_shape is not None:
        inputs.append(("output_shape", np.array(output_shape, np.int64)))
    got = create_operator("MaxUnpool", **attrs).forward(*[x for _, x in inputs])
    assert_same(got, run_onnx("MaxUnpool", inputs, **attrs), dict(rtol=0, atol=0))
    check_gradient(create_operator("MaxUnpool", **attrs),
                   [pooled.astype(np.float64)] + [x for _, x in inputs[1:]], wrt=[0])


def test_maxunpool_repeated_indices_gradient_goes_to_the_written_value():
    op = create_operator("MaxUnpool", kernel_shape=[2], strides=[1])
    X, I = np.array([[[1.0, 2.0, 3.0]]]), np.array([[[1, 1, 3]]])
    Y = op.forward(X, I)
    np.testing.assert_array_equal(Y, [[[0, 2, 0, 3]]])
    (dX, dI) = op.backward([np.array([[[1.0, 10.0, 100.0, 1000.0]]])], [X, I], [Y])
    np.testing.assert_array_equal(dX, [[[0, 10, 1000]]])
    assert dI is None


def test_maxunpool_bad_input():
    X, I = rand((1, 1, 2, 2)), np.zeros((1, 1, 2, 2), np.int64)
    with pytest.raises(ShapeError, match="kernel_shape"):
        create_operator("MaxUnpool").forward(X, I)
    with pytest.raises(ShapeError, match="indices must lie"):
        create_operator("MaxUnpool", kernel_shape=[2, 2], strides=[2, 2]).forward(X, I + 16)
    with pytest.raises(ShapeError, match="output_shape"):
        create_operator("MaxUnpool", kernel_shape=[2, 2], strides=[2, 2]).forward(
            X, I, np.array([1, 1, 3, 3], np.int64))


# -- GridSample -------------------------------------------------------------------------
def grid_inputs(x_shape, out_spatial, dtype=np.float64, spread=1.2, seed=3):
    rng = np.random.default_rng(seed)
    rank = len(x_shape) - 2
    grid = rng.uniform(-spread, spread, (x_shape[0],) + tuple(out_spatial) + (rank,))
    return [rand(x_shape, dtype), grid.astype(dtype)]


GRID_CASES = [(mode, padding, align) for mode in ("nearest", "linear", "cubic")
              for padding in ("zeros", "border", "reflection") for align in (0, 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode,padding,align", GRID_CASES)
def test_gridsample_forward(mode, padding, align, dtype):
    inputs = grid_inputs((2, 2, 4, 5), (3, 4), dtype, spread=1.6)
    attrs = dict(mode=mode, padding_mode=padding, align_corners=align)
    got = create_operator("GridSample", **attrs).forward(*inputs)
    want = run_onnx("GridSample", list(zip(["X", "grid"], inputs)), **attrs)
    # The evaluator maps grid to pixel coordinates in float32 whatever the dtype.
    assert_same(got, want, TOL[np.float32])


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_gridsample_forward_3d(mode):
    inputs = grid_inputs((1, 2, 3, 4, 3), (2, 2, 3), np.float32)
    attrs = dict(mode=mode, padding_mode="border")
    got = create_operator("GridSample", **attrs).forward(*inputs)
    assert_same(got, run_onnx("GridSample", list(zip(["X", "grid"], inputs)), **attrs),
                TOL[np.float32])


@pytest.mark.parametrize("mode,padding,align", [c for c in GRID_CASES if c[0] != "nearest"])
def test_gridsample_gradient(mode, padding, align):
    op = create_operator("GridSample", mode=mode, padding_mode=padding, align_corners=align)
    check_gradient(op, grid_inputs((1, 2, 3, 4), (2, 3)))


def test_gridsample_nearest_gradient_wrt_x():
    op = create_operator("GridSample", mode="nearest", padding_mode="reflection")
    check_gradient(op, grid_inputs((1, 2, 3, 4), (2, 3)), wrt=[0])


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_gridsample_backward_matches_torch(padding):
    op = create_operator("GridSample", mode="linear", padding_mode=padding)
    check_backward(op, grid_inputs((2, 3, 4, 5), (3, 2)),
                   lambda x, g: torch.nn.functional.grid_sample(
                       x, g, mode="bilinear", padding_mode=padding, align_corners=False))


def test_gridsample_bad_input():
    X, grid = grid_inputs((1, 1, 3, 3), (2, 2))
    with pytest.raises(ShapeError, match="grid must have shape"):
        create_operator("GridSample").forward(X, grid[..., :1])
    with pytest.raises(UnsupportedError, match="padding_mode"):
        create_operator("GridSample", padding_mode="wrap").forward(X, grid)


# -- CenterCropPad ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES + [np.int32])
@pytest.mark.parametrize("x_shape,shape,axes", [
    ((5, 6, 3), [3, 9, 3], None), ((4, 7, 2), [8, 2], [0, 1]), ((3, 5, 6), [2, 7], [2, 1]),
    ((3, 5, 6), [4], [-1]),
])
def test_centercroppad(x_shape, shape, axes, dtype):
    X = rand(x_shape, dtype) if dtype != np.int32 else np.arange(np.prod(x_shape),
                                                                  dtype=dtype).reshape(x_shape)
    attrs = {} if axes is None else {"axes": axes}
    inputs = [("input_data", X), ("shape", np.array(shape, np.int64))]
    got = create_operator("CenterCropPad", **attrs).forward(X, inputs[1][1])
    if axes is None or min(axes) >= 0:
        assert_same(got, run_onnx("CenterCropPad", inputs, **attrs), dict(rtol=0, atol=0))
    if dtype == np.float64:
        check_gradient(create_operator("CenterCropPad", **attrs), [X, inputs[1][1]], wrt=[0])


def test_centercroppad_bad_input():
    with pytest.raises(ShapeError, match="one per axis"):
        create_operator("CenterCropPad").forward(rand((3, 4)), np.array([2], np.int64))
    with pytest.raises(ShapeError, match="axes"):
        create_operator("CenterCropPad", axes=[2]).forward(rand((3, 4)), np.array([2]))
