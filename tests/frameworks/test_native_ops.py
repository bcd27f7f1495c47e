"""PyTorch (d5pt) and TensorFlow (d5tf) native operators against the reference (d5ref):
forward values, backward values on the same upstream gradient, finite-difference
gradients, the native (timed) call, and the errors for what the wrappers do not map."""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")

import deep500 as d5  # noqa: E402
import deep500.frameworks.pytorch as d5pt  # noqa: E402
import deep500.frameworks.reference as d5ref  # noqa: E402
import deep500.frameworks.tensorflow as d5tf  # noqa: E402
from deep500.lv0_operators.custom_op import as_tuple  # noqa: E402
from deep500.utils.errors import UnsupportedError  # noqa: E402

FRAMEWORKS = {"pytorch": d5pt, "tensorflow": d5tf}
TENSOR_TYPES = {"pytorch": torch.Tensor, "tensorflow": tf.Tensor}
DTYPES = {"float32": np.float32, "float64": np.float64}

# (rtol, atol as a fraction of the reference's largest magnitude) between two
# implementations of one operator. Measured differences are ~1e-7 (float32) and ~1e-15
# (float64); any semantic difference (padding, stride, transpose) is O(1).
TOLERANCES = {np.float32: (1e-4, 1e-5), np.float64: (1e-10, 1e-12)}

# name -> (ONNX op, attributes, input shapes, "away_from_zero" for kinks like Relu)
CASES = {
    "conv_stride_pad": ("Conv", dict(strides=[2, 2], pads=[1, 1, 1, 1]),
                        [(2, 2, 5, 5), (3, 2, 3, 3), (3,)]),
    "conv_asym_pads": ("Conv", dict(strides=[2, 1], pads=[1, 0, 2, 1]),
                       [(1, 2, 5, 4), (2, 2, 3, 2), (2,)]),
    "conv_dilations": ("Conv", dict(dilations=[2, 1], pads=[0, 1, 1, 0]),
                       [(1, 2, 6, 5), (2, 2, 2, 3)]),
    "conv_dilations_strides": ("Conv", dict(dilations=[2, 2], strides=[2, 2]),
                               [(1, 2, 7, 7), (2, 2, 2, 2), (2,)]),
    "conv_groups": ("Conv", dict(group=2, pads=[1, 1, 1, 1]),
                    [(1, 4, 4, 4), (4, 2, 2, 2), (4,)]),
    "conv_groups_dilated": ("Conv", dict(group=2, dilations=[1, 2], strides=[1, 2],
                                         pads=[0, 1, 1, 2]),
                            [(1, 4, 4, 5), (4, 2, 2, 2), (4,)]),
    "conv_depthwise": ("Conv", dict(group=3, strides=[2, 2], pads=[1, 1, 1, 1]),
                       [(1, 3, 5, 5), (3, 1, 3, 3), (3,)]),
    "conv_depthwise_x2": ("Conv", dict(group=2, pads=[0, 1, 0, 1]),
                          [(1, 2, 4, 4), (4, 1, 3, 2)]),
    "gemm": ("Gemm", {}, [(3, 4), (4, 5)]),
    "gemm_transA_transB_bias": ("Gemm", dict(transA=1, transB=1, alpha=0.5, beta=2.0),
                                [(4, 3), (5, 4), (5,)]),
    "gemm_alpha_beta_matrix_c": ("Gemm", dict(alpha=1.5, beta=0.25),
                                 [(3, 4), (4, 5), (3, 5)]),
    "gemm_transB_row_c": ("Gemm", dict(transB=1), [(3, 4), (5, 4), (1, 5)]),
    "gemm_beta_zero": ("Gemm", dict(beta=0.0, transA=1), [(4, 3), (4, 5), (3, 5)]),
    "matmul": ("MatMul", {}, [(3, 4), (4, 5)]),
    "matmul_batched": ("MatMul", {}, [(2, 3, 4), (2, 4, 2)]),
    "matmul_broadcast": ("MatMul", {}, [(2, 3, 4), (4, 2)]),
    "matmul_vector_matrix": ("MatMul", {}, [(4,), (4, 3)]),
    "matmul_matrix_vector": ("MatMul", {}, [(3, 4), (4,)]),
    "matmul_dot": ("MatMul", {}, [(4,), (4,)]),
    "relu": ("Relu", {}, [(3, 5)]),
    "relu_scalar": ("Relu", {}, [()]),
    "sigmoid": ("Sigmoid", {}, [(3, 5)]),
    "tanh": ("Tanh", {}, [(2, 3, 4)]),
    "softmax": ("Softmax", {}, [(3, 5)]),
    "softmax_axis0": ("Softmax", dict(axis=0), [(3, 2, 4)]),
    "logsoftmax": ("LogSoftmax", {}, [(3, 5)]),
    "logsoftmax_axis1": ("LogSoftmax", dict(axis=1), [(2, 3, 4)]),
}
OPS_COVERED = {"Conv", "Gemm", "MatMul", "Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax"}


@pytest.fixture(autouse=True, scope="module")
def single_torch_thread():
    """These tensors are tiny: with several OpenMP threads, PyTorch spends milliseconds
    per call handing them work (measured: 0.01 ms with one thread, 15-50 ms with two on a
    2-core machine), which makes the finite-difference checks slow."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def make_inputs(case: str, dtype) -> list:
    op_type, _, shapes = CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    inputs = [rng.standard_normal(shape) for shape in shapes]
    if op_type == "Relu":  # keep finite differences away from the kink at 0
        inputs = [np.sign(x) * (0.2 + np.abs(x)) for x in inputs]
    return [np.asarray(x, dtype=dtype) for x in inputs]


def make_ops(framework: str, case: str):
    op_type, attributes, _ = CASES[case]
    return (FRAMEWORKS[framework].native_operator(op_type, **attributes),
            d5ref.create_operator(op_type, **attributes))


def assert_close(got, want, dtype, what=""):
    rtol, atol = TOLERANCES[np.dtype(dtype).type]
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert got.dtype == np.dtype(dtype), (what, got.dtype)
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * max(scale, 1.0),
                               err_msg=what)


def test_cases_cover_every_mapped_operator():
    assert {op for op, _, _ in CASES.values()} == OPS_COVERED
    assert set(d5pt.native_operator_names()) == OPS_COVERED
    assert set(d5tf.native_operator_names()) == OPS_COVERED


# -- forward ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_forward_matches_reference(framework, case, dtype):
    op, ref = make_ops(framework, case)
    inputs = make_inputs(case, DTYPES[dtype])
    got = as_tuple(op.forward(*inputs))
    want = as_tuple(ref.forward(*inputs))
    assert len(got) == len(want) == 1
    assert_close(got[0], want[0], DTYPES[dtype], f"{framework} {case} forward")
    assert op.framework == framework
    assert op.op_type == CASES[case][0]
    assert op.attributes == CASES[case][1]


# -- backward -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_backward_matches_reference(framework, case, dtype):
    op, ref = make_ops(framework, case)
    inputs = make_inputs(case, DTYPES[dtype])
    outputs = as_tuple(ref.forward(*inputs))
    rng = np.random.default_rng(7)
    upstream = [rng.standard_normal(np.shape(o)).astype(DTYPES[dtype]) for o in outputs]
    got = as_tuple(op.backward(list(upstream), inputs, as_tuple(op.forward(*inputs))))
    want = as_tuple(ref.backward(list(upstream), inputs, outputs))
    assert len(got) == len(inputs)
    for index, (g, w) in enumerate(zip(got, want)):
        assert g is not None, f"no gradient for input {index}"
        assert_close(g, w, DTYPES[dtype], f"{framework} {case} gradient of input {index}")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_gradient_finite_differences_float64(framework, case):
    op, _ = make_ops(framework, case)
    inputs = make_inputs(case, np.float64)
    result = d5.test_op_gradient(op, inputs)
    assert result.passed is True, result.details
    checked = [entry["input"] for entry in result.details["inputs"]]
    assert checked == list(range(len(inputs)))
    assert all(entry["method"] == "full_jacobian" for entry in result.details["inputs"])


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_gradient_finite_differences_random_projections(framework):
    op, _ = make_ops(framework, "conv_groups_dilated")
    inputs = make_inputs("conv_groups_dilated", np.float64)
    result = d5.test_op_gradient(op, inputs, full_jacobian_max_elements=0)
    assert result.passed is True, result.details
    assert {e["method"] for e in result.details["inputs"]} == {"random_projections"}


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_gemm_beta_zero_gives_zero_gradient_for_c(framework):
    op, _ = make_ops(framework, "gemm_beta_zero")
    a, b, c = make_inputs("gemm_beta_zero", np.float64)
    grads = op.backward([np.ones((3, 5))], [a, b, c], None)
    np.testing.assert_array_equal(grads[2], np.zeros_like(c))


# -- the native (timed) call ----------------------------------------------------------------
NATIVE_CALL_CASES = ["conv_asym_pads", "conv_depthwise", "gemm_transA_transB_bias",
                     "matmul_batched", "matmul_dot", "relu", "softmax_axis0"]


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("case", NATIVE_CALL_CASES)
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_native_call_on_framework_tensors(framework, case, dtype):
    op, ref = make_ops(framework, case)
    inputs = make_inputs(case, DTYPES[dtype])
    call, to_numpy = op.native_call(inputs)
    raw = call()
    for tensor in as_tuple(raw):
        assert isinstance(tensor, TENSOR_TYPES[framework]), type(tensor)
        if framework == "pytorch":
            assert not tensor.requires_grad  # the timed call builds no autograd graph
    converted = to_numpy(raw)
    assert isinstance(converted, tuple) and len(converted) == 1
    assert isinstance(converted[0], np.ndarray)
    forward = as_tuple(op.forward(*inputs))
    rtol = 1e-6 if dtype == "float32" else 1e-14
    np.testing.assert_allclose(converted[0], forward[0], rtol=rtol, atol=rtol)
    assert_close(converted[0], as_tuple(ref.forward(*inputs))[0], DTYPES[dtype], case)
    # The call can be repeated (as a benchmark does) with the same result.
    np.testing.assert_allclose(to_numpy(call())[0], forward[0], rtol=rtol, atol=rtol)


def test_tensorflow_conv_runs_nhwc_and_records_it():
    op, ref = make_ops("tensorflow", "conv_asym_pads")
    x, w, b = make_inputs("conv_asym_pads", np.float32)
    expected = ref.forward(x, w, b)  # NCHW: (N, M, H, W)
    call, to_numpy = op.native_call([x, w, b])
    raw = call()
    n, m, h, wd = expected.shape
    assert tuple(raw.shape) == (n, h, wd, m)  # NHWC inside the clock
    assert to_numpy(raw)[0].shape == expected.shape
    assert op.conditions()["native_layout"] == "NHWC"
    result = d5.test_op_forward(op, [x, w, b], [expected],
                                metrics=[d5.L2Error(), d5.WallclockTime(
                                    reruns=3, warmup=1, ci_warn_fraction=np.inf)])
    assert result.conditions["native_layout"] == "NHWC"
    assert result.conditions["execution"] == "eager"
    assert result.conditions["framework"] == "tensorflow"
    assert result.conditions["attributes"] == CASES["conv_asym_pads"][1]
    assert result["L2Error"].value < 1e-5
    assert result["WallclockTime"].conditions["native_layout"] == "NHWC"


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_layout_recorded_only_where_transposed(framework):
    conv, _ = make_ops(framework, "conv_groups")
    gemm, _ = make_ops(framework, "gemm")
    if framework == "tensorflow":
        assert conv.conditions()["native_layout"] == "NHWC"
    else:
        assert "native_layout" not in conv.conditions()
    assert "native_layout" not in gemm.conditions()
    assert conv.conditions()["framework"] == framework


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_forward_through_test_op_forward_matches_reference(framework):
    op, ref = make_ops(framework, "gemm_alpha_beta_matrix_c")
    inputs = make_inputs("gemm_alpha_beta_matrix_c", np.float64)
    result = d5.test_op_forward(op, inputs, [ref.forward(*inputs)],
                                metrics=[d5.MaxError(), d5.L2Error()])
    assert result["MaxError"].value < 1e-12
    assert result["L2Error"].value < 1e-12
    assert result.operator == f"{framework}:Gemm"


# -- what the wrappers do not map -----------------------------------------------------------
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_unsupported_operator(framework):
    with pytest.raises(UnsupportedError, match="NoSuchOp"):
        FRAMEWORKS[framework].native_operator("NoSuchOp")


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_conv_auto_pad_unsupported(framework, auto_pad):
    with pytest.raises(UnsupportedError, match="auto_pad"):
        FRAMEWORKS[framework].native_operator("Conv", auto_pad=auto_pad)
    # The default, spelled out, is accepted.
    op = FRAMEWORKS[framework].native_operator("Conv", auto_pad="NOTSET")
    x, w = np.ones((1, 1, 3, 3)), np.ones((1, 1, 2, 2))
    np.testing.assert_array_equal(op.forward(x, w), np.full((1, 1, 2, 2), 4.0))
