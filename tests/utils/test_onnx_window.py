"""ONNX window geometry (deep500.utils.onnx_interop.window) against onnx's reference
evaluator as the oracle, and PyTorch's pooling for the ceil_mode rule."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from deep500.utils.errors import ShapeError, UnsupportedError
from deep500.utils.onnx_interop.window import (conv_transpose_geometry, resolve_pads,
                                               same_pads, window_counts, window_geometry)


def _oracle_shape(op_type, x_shape, attributes, w_shape=None, evaluate=False):
    """Output shape of a one-node model by ONNX shape inference (strict), or with
    ``evaluate`` as onnx.reference.ReferenceEvaluator computes it (the only one of the
    two that drops a ceil_mode window starting in the end padding, as the spec says;
    its SAME_LOWER pooling is off by one, so it is not the oracle elsewhere)."""
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    feeds = {"X": np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)}
    names = ["X"]
    if w_shape is not None:
        inputs.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, w_shape))
        feeds["W"] = np.ones(w_shape, np.float32)
        names.append("W")
    node = helper.make_node(op_type, names, ["Y"], **attributes)
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    if evaluate:
        return ReferenceEvaluator(model).run(None, feeds)[0].shape
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    return tuple(d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim)


WINDOWS = [
    # (input spatial, kernel, attributes)
    ((7,), (3,), {}),
    ((7, 9), (3, 2), {"strides": [2, 3]}),
    ((8, 8), (3, 3), {"pads": [1, 0, 2, 1], "strides": [2, 2]}),
    ((9, 6), (2, 3), {"dilations": [2, 1], "pads": [0, 1, 1, 0]}),
    ((5, 7), (2, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 3]}),
    ((5, 7), (2, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((6, 7), (3, 2), {"auto_pad": "SAME_UPPER", "dilations": [2, 2]}),
    ((6, 7), (3, 2), {"auto_pad": "VALID", "strides": [2, 2]}),
    ((4, 5, 6), (2, 2, 3), {"strides": [1, 2, 2], "pads": [1, 0, 1, 0, 1, 1]}),
]


@pytest.mark.parametrize("spatial,kernel,attributes", WINDOWS)
def test_conv_output_matches_onnx(spatial, kernel, attributes):
    x_shape = (1, 2) + spatial
    expected = _oracle_shape("Conv", x_shape, attributes, (3, 2) + kernel)
    geometry = window_geometry("Conv", spatial, kernel, **attributes)
    assert (1, 3) + geometry.output == expected
    dilations = attributes.get("dilations", [1] * len(kernel))
    assert geometry.extents == tuple((k - 1) * d + 1 for k, d in zip(kernel, dilations))


@pytest.mark.parametrize("ceil_mode", [0, 1])
@pytest.mark.parametrize("spatial,kernel,attributes", WINDOWS)
def test_pool_output_matches_onnx(spatial, kernel, attributes, ceil_mode):
    attributes = dict(attributes, ceil_mode=ceil_mode)
    # ceil_mode with explicit pads: only the evaluator drops windows that would start in
    # the end padding; with auto_pad, shape inference follows the spec's formulas
    evaluate = bool(ceil_mode) and attributes.get("auto_pad", "NOTSET") == "NOTSET"
    expected = _oracle_shape("MaxPool", (1, 2) + spatial,
                             dict(attributes, kernel_shape=list(kernel)), evaluate=evaluate)
    geometry = window_geometry("MaxPool", spatial, kernel, **attributes)
    assert (1, 2) + geometry.output == expected


def test_same_pads_put_the_odd_element_where_onnx_says():
    # input 5, kernel 2, stride 2: output 3, total padding (3-1)·2 + 2 - 5 = 1
    assert same_pads([5], [2], [2], [1], "SAME_UPPER") == ((0,), (1,))
    assert same_pads([5], [2], [2], [1], "SAME_LOWER") == ((1,), (0,))
    # dilation 2 widens a 3-tap window to 5: total (6-1)·1 + 5 - 6 = 4, split evenly
    assert same_pads([6], [3], [1], [2], "SAME_UPPER") == ((2,), (2,))
    geometry = window_geometry("Conv", [5], [2], strides=[2], auto_pad="SAME_LOWER")
    assert geometry.pads == [1, 0] and geometry.output == (3,)


@pytest.mark.parametrize("size,kernel,stride,pad", [(5, 2, 2, 1), (4, 3, 2, 1), (6, 3, 3, 1),
                                                    (7, 4, 3, 2)])
def test_ceil_mode_last_window_starts_inside_input_or_left_padding(size, kernel, stride, pad):
    torch = pytest.importorskip("torch")
    x = torch.zeros(1, 1, size)
    expected = torch.nn.functional.max_pool1d(x, kernel, stride, pad, ceil_mode=True).shape[-1]
    geometry = window_geometry("MaxPool", [size], [kernel], strides=[stride],
                               pads=[pad, pad], ceil_mode=True)
    assert geometry.output == (expected,)
    last_start = (geometry.output[0] - 1) * stride
    assert last_start < size + pad
    # ceil_mode's overhang is what the last window reads past the end padding
    assert geometry.padded[0] == max(size + 2 * pad, last_start + kernel)


def test_ceil_mode_drops_a_window_that_would_start_in_the_end_padding():
    # 5 + 1 + 1 = 7 padded, kernel 2, stride 2: ceil gives 4 windows; the 4th starts at
    # 6, in the end padding, so ONNX keeps 3
    geometry = window_geometry("MaxPool", [5], [2], strides=[2], pads=[1, 1], ceil_mode=True)
    assert geometry.output == (3,)
    assert _oracle_shape("MaxPool", (1, 1, 5), {"kernel_shape": [2], "strides": [2],
                                                "pads": [1, 1], "ceil_mode": 1},
                         evaluate=True) == (1, 1, 3)


def test_window_counts_match_onnx_average_pool():
    spatial, kernel = (5, 6), (3, 2)
    attributes = {"strides": [2, 2], "pads": [1, 0, 1, 1], "ceil_mode": 1}
    geometry = window_geometry("AveragePool", spatial, kernel, **attributes)
    for include in (0, 1):
        node = helper.make_node("AveragePool", ["X"], ["Y"], count_include_pad=include,
                                kernel_shape=list(kernel), **attributes)
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("X", TensorProto.DOUBLE, None)],
            [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
        ramp = np.arange(np.prod(spatial), dtype=np.float64).reshape((1, 1) + spatial) + 1
        mean = ReferenceEvaluator(model).run(None, {"X": ramp})[0][0, 0]
        counts = window_counts(geometry, bool(include))
        assert counts.shape == geometry.output
        padded = np.zeros(geometry.padded)
        padded[tuple(slice(b, b + n) for b, n in zip(geometry.pads_begin, spatial))] = ramp[0, 0]
        sums = np.zeros(geometry.output)
        for _, slices in geometry.kernel_slices():
            sums += padded[slices]
        np.testing.assert_allclose(sums / counts, mean, rtol=1e-12)


TRANSPOSED = [
    ((3, 4), (3, 3), {}),
    ((3, 4), (3, 2), {"strides": [2, 3], "output_padding": [1, 2]}),
    ((5, 4), (3, 3), {"strides": [2, 2], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
    ((3, 4), (3, 3), {"strides": [2, 2], "output_shape": [6, 9]}),
    ((3, 3), (3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),   # beyond the full 9, 7
    ((3, 4), (3, 3), {"strides": [2, 2], "output_shape": [6, 8], "auto_pad": "SAME_UPPER"}),
    ((3, 4), (2, 3), {"strides": [2, 3], "auto_pad": "SAME_UPPER"}),
    ((3, 4), (2, 3), {"strides": [2, 3], "auto_pad": "SAME_LOWER"}),
    ((3, 4), (2, 3), {"strides": [2, 1], "auto_pad": "VALID"}),
]


@pytest.mark.parametrize("spatial,kernel,attributes", TRANSPOSED)
def test_conv_transpose_matches_onnx(spatial, kernel, attributes):
    x_shape, w_shape = (1, 2) + spatial, (2, 3) + kernel
    expected = _oracle_shape("ConvTranspose", x_shape, attributes, w_shape)
    geometry = conv_transpose_geometry("ConvTranspose", spatial, kernel, **attributes)
    assert (1, 3) + geometry.output == expected
    assert all(f - b - e == o for f, b, e, o in zip(geometry.full, geometry.pads_begin,
                                                    geometry.pads_end, geometry.output))


def test_conv_transpose_pads_from_output_shape_follow_the_spec():
    # full = 2·(3-1) + 0 + 3 = 7; output_shape 4 → total 3: NOTSET puts the larger half
    # first, SAME_UPPER last
    notset = conv_transpose_geometry("ConvTranspose", [3], [3], strides=[2], output_shape=[4])
    upper = conv_transpose_geometry("ConvTranspose", [3], [3], strides=[2], output_shape=[4],
                                    auto_pad="SAME_UPPER")
    assert (notset.pads_begin, notset.pads_end) == ((2,), (1,))
    assert (upper.pads_begin, upper.pads_end) == ((1,), (2,))


def test_bad_attributes_raise_clear_errors():
    with pytest.raises(UnsupportedError, match="auto_pad='SAME'"):
        window_geometry("Conv", [5], [2], auto_pad="SAME")
    with pytest.raises(ShapeError, match="strides=.*must have 2 values"):
        window_geometry("Conv", [5, 5], [2, 2], strides=[1])
    with pytest.raises(ShapeError, match="cannot be combined with auto_pad"):
        window_geometry("Conv", [5], [2], pads=[1, 1], auto_pad="VALID")
    with pytest.raises(ShapeError, match="larger than the padded input"):
        window_geometry("MaxPool", [2], [4])
    with pytest.raises(ShapeError, match="needs the input's spatial extents"):
        resolve_pads("Conv", [None], [3], auto_pad="SAME_UPPER")
    assert resolve_pads("Conv", [None], [3], pads=[1, 2]) == ((1,), (2,))
    with pytest.raises(ShapeError, match="leave no output"):
        conv_transpose_geometry("ConvTranspose", [3], [3], pads=[3, 3])
