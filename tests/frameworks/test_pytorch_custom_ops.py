"""d5pt.custom_op (C++ and Python operators on torch tensors, with autograd),
d5pt.custom_op_from_native and the d5pt.test_nativeop_* checks against the reference.

The C++ operators are in tests/frameworks/cpp_ops/ (shared with the TensorFlow tests);
each is compiled once per session into the session's DEEP500_CACHE (tests/conftest.py).
Every test runs twice: through Deep500's PyTorch glue (C++, the default) and through the
Python path (ctypes, what runs when the glue cannot be built), which must behave the same."""
from __future__ import annotations

import ctypes
import gc
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import deep500 as d5  # noqa: E402
import deep500.frameworks.pytorch as d5pt  # noqa: E402
import deep500.frameworks.reference as d5ref  # noqa: E402
from deep500.frameworks.pytorch import custom_ops, glue  # noqa: E402
from deep500.lv0_operators import cpp_library  # noqa: E402

SOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpp_ops")
F32 = d5.tensordesc("float32", [4, 5])
F64 = d5.tensordesc("float64", [3, 4])
ROWS = d5.tensordesc("float64", [3, 5])
TABLE, INDEX = d5.tensordesc("float32", [5, 3]), d5.tensordesc("int32", [4])


# -- fixtures: the session's build cache and the compiled operators ----------------------
@pytest.fixture(scope="session")
def deep500_cache():
    """The session's private cache (DEEP500_CACHE, set by tests/conftest.py). A folder of
    this module's own, left set for the rest of the session, made every later test
    build Deep500's glue libraries a second time."""
    return os.environ["DEEP500_CACHE"]


@pytest.fixture(autouse=True, scope="module")
def single_torch_thread():
    """Tiny tensors: with several threads PyTorch spends more time handing out work."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def compile_op(name, inputs, outputs):
    return d5.compile_custom_cppop(name, os.path.join(SOURCES, f"{name}.cpp"), inputs,
                                   outputs)


@pytest.fixture(scope="session")
def scale_add(deep500_cache):  # z = 2x + y, float32 [4, 5]
    return compile_op("scale_add", [F32, F32], [F32])


@pytest.fixture(scope="session")
def mul_tanh(deep500_cache):  # z = x * tanh(y), float64 [3, 4]
    return compile_op("mul_tanh", [F64, F64], [F64])


@pytest.fixture(scope="session")
def row_max(deep500_cache):  # (max, argmax) per row: float64 and int64 outputs
    return compile_op("row_max", [ROWS], [d5.tensordesc("float64", [3]),
                                          d5.tensordesc("int64", [3])])


@pytest.fixture(scope="session")
def gather_rows(deep500_cache):  # table[index], int32 index
    return compile_op("gather_rows", [TABLE, INDEX], [d5.tensordesc("float32", [4, 3])])


@pytest.fixture(scope="session")
def negate(deep500_cache):  # -x, no backward
    return compile_op("negate", [F32], [F32])


@pytest.fixture(autouse=True, params=["native glue", "Python path"])
def call_path(request, monkeypatch):
    """Which way d5pt.custom_op calls C++ operators in this test."""
    if request.param == "Python path":
        monkeypatch.setenv(glue.GLUE.switch, "0")
    else:
        monkeypatch.delenv(glue.GLUE.switch, raising=False)
        assert glue.GLUE.get() is not None, glue.LOADER.failure
    return request.param


_SPY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))


@pytest.fixture
def spied(scale_add):
    """scale_add on torch tensors, recording the pointers every C++ forward receives."""
    module = d5pt.custom_op(scale_add)
    calls = []
    forward = module._forward_fn  # the library's d500_forward, called through ctypes

    def recording(handle, pointers):
        calls.append([pointers[i] for i in range(3)])
        return forward(handle, ctypes.cast(pointers, ctypes.c_void_p))
    if isinstance(module, custom_ops.PyTorchGlueCppOp):  # the glue calls a C function
        spy = _SPY(recording)
        module._d500_glue = module._glue_operator(glue.GLUE.get(), spy)
        module._spy = spy  # the callback must outlive the calls
    else:
        module._forward_fn = recording
    return module, calls


def randn(*shape, dtype=torch.float32, requires_grad=False, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=dtype).requires_grad_(
        requires_grad)


# -- C++ operators: values, gradients, one library ---------------------------------------
def test_forward_and_backward_match_numpy_cppop_on_one_library(scale_add):
    pt, ref = d5pt.custom_op(scale_add), d5ref.custom_op(scale_add)
    assert isinstance(pt, torch.nn.Module) and isinstance(pt, d5pt.PyTorchCppOp)
    x, y = randn(4, 5, requires_grad=True, seed=1), randn(4, 5, requires_grad=True, seed=2)
    z = pt(x, y)
    assert z.dtype == torch.float32 and z.shape == (4, 5)
    np.testing.assert_array_equal(z.detach().numpy(),
                                  ref.forward(x.detach().numpy(), y.detach().numpy()))
    upstream = randn(4, 5, seed=3)
    gx, gy = torch.autograd.grad(z, (x, y), upstream)
    want = ref.backward([upstream.numpy()], [x.detach().numpy(), y.detach().numpy()],
                        [z.detach().numpy()])
    np.testing.assert_array_equal(gx.numpy(), want[0])
    np.testing.assert_array_equal(gy.numpy(), want[1])
    np.testing.assert_allclose(gx.numpy(), 2 * upstream.numpy(), rtol=0, atol=0)

    # One loaded library serves both bridges; compiling again is a cache hit.
    path = os.path.realpath(scale_add.library_path)
    assert pt.op.library is ref.library is cpp_library._LOADED[path]
    assert [key for key in cpp_library._LOADED if key == path] == [path]
    loaded = len(cpp_library._LOADED)
    again = compile_op("scale_add", [F32, F32], [F32])
    assert again.cache_hit and again.library_path == scale_add.library_path
    assert d5pt.custom_op(again).op.library is pt.op.library
    assert len(cpp_library._LOADED) == loaded


def test_cpp_reads_and_writes_tensor_memory_without_copies(spied):
    op, calls = spied
    x, y = randn(4, 5, seed=1), randn(4, 5, seed=2)
    z = op(x, y)
    assert calls == [[x.data_ptr(), y.data_ptr(), z.data_ptr()]]
    # A non-contiguous input is copied to contiguous memory first (and still
    # differentiable through the copy).
    base = randn(5, 4, seed=4, requires_grad=True)
    xt = base.t()
    assert not xt.is_contiguous()
    z = op(xt, y)
    assert calls[-1][0] != xt.data_ptr() and calls[-1][1] == y.data_ptr()
    np.testing.assert_allclose(z.detach().numpy(), 2 * xt.detach().numpy() + y.numpy(),
                               rtol=1e-6, atol=1e-6)
    z.sum().backward()
    np.testing.assert_array_equal(base.grad.numpy(), np.full((5, 4), 2.0, np.float32))


def test_autograd_only_when_needed(scale_add):
    op = d5pt.custom_op(scale_add)
    x, y = randn(4, 5, requires_grad=True), randn(4, 5)
    assert op(x, y).grad_fn is not None
    assert op(x.detach(), y).grad_fn is None
    with torch.no_grad():
        z = op(x, y)
    assert z.grad_fn is None and not z.requires_grad
    np.testing.assert_allclose(z.numpy(), 2 * x.detach().numpy() + y.numpy(), rtol=1e-6)


def test_module_hooks_still_run(scale_add):
    """Calls skip nn.Module.__call__ only while no hook of any kind is registered."""
    from torch.nn.modules import module as module_source
    op = d5pt.custom_op(scale_add)
    x, y = randn(4, 5, requires_grad=True), randn(4, 5)
    seen = []
    handles = [op.register_forward_pre_hook(lambda m, args: seen.append("pre")),
               op.register_forward_hook(lambda m, args, out: seen.append("post")),
               module_source.register_module_forward_hook(
                   lambda m, args, out: seen.append("global"))]
    try:
        z = op(x, y)
    finally:
        for handle in handles:
            handle.remove()
    assert seen == ["pre", "global", "post"]
    # A full backward hook sees the gradient of the output.
    grads = []
    handle = op.register_full_backward_hook(lambda m, gin, gout: grads.append(gout[0]))
    try:
        op(x, y).sum().backward()
    finally:
        handle.remove()
    assert len(grads) == 1 and torch.equal(grads[0], torch.ones(4, 5))
    np.testing.assert_array_equal(x.grad.numpy(), np.full((4, 5), 2.0, np.float32))
    # Without hooks the result is the same.
    seen.clear()
    assert torch.equal(op(x, y), z) and seen == []


def test_functorch_transforms_get_torchs_own_error(scale_add):
    op = d5pt.custom_op(scale_add)
    x, y = randn(4, 5), randn(4, 5)
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda a: op(a, y).sum())(x)


def test_gradcheck_float64(mul_tanh):
    op = d5pt.custom_op(mul_tanh)
    x = randn(3, 4, dtype=torch.float64, requires_grad=True, seed=5)
    y = randn(3, 4, dtype=torch.float64, requires_grad=True, seed=6)
    # check_undefined_grad (on by default) also passes None upstream gradients.
    assert torch.autograd.gradcheck(op, (x, y), eps=1e-6, atol=1e-8, rtol=1e-6)
    np.testing.assert_allclose(op(x, y).detach().numpy(),
                               x.detach().numpy() * np.tanh(y.detach().numpy()),
                               rtol=1e-14, atol=1e-14)


def test_training_steps_in_a_module_decrease_the_loss(scale_add):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(5, 5)
            self.bias = torch.nn.Parameter(torch.zeros(4, 5))
            self.scale_add = d5pt.custom_op(scale_add)

        def forward(self, x):
            return self.scale_add(self.linear(x), self.bias)

    torch.manual_seed(0)
    net = Net()
    assert "scale_add" in dict(net.named_children())
    x, target = randn(4, 5, seed=7), randn(4, 5, seed=8)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    losses = []
    for _ in range(10):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert net.bias.grad is not None and net.linear.weight.grad is not None
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.5 * losses[0], losses


def test_multiple_outputs_with_an_int64_output(row_max):
    op, ref = d5pt.custom_op(row_max), d5ref.custom_op(row_max)
    x = randn(3, 5, dtype=torch.float64, requires_grad=True, seed=9)
    values, index = op(x)
    assert values.dtype == torch.float64 and index.dtype == torch.int64
    assert values.requires_grad and not index.requires_grad
    array = x.detach().numpy()
    np.testing.assert_array_equal(values.detach().numpy(), array.max(axis=1))
    np.testing.assert_array_equal(index.numpy(), array.argmax(axis=1))
    upstream = randn(3, dtype=torch.float64, seed=10)
    (grad,) = torch.autograd.grad(values, x, upstream)
    want = ref.backward([upstream.numpy(), None], [array], ref.forward(array))
    np.testing.assert_array_equal(grad.numpy(), want[0])
    assert torch.autograd.gradcheck(op, (x,), eps=1e-6, atol=1e-8, rtol=1e-6)


def test_int32_input_and_a_cpp_exception(gather_rows):
    op = d5pt.custom_op(gather_rows)
    table = randn(5, 3, requires_grad=True, seed=11)
    index = torch.tensor([4, 0, 4, 2], dtype=torch.int32)
    out = op(table, index)
    np.testing.assert_array_equal(out.detach().numpy(),
                                  table.detach().numpy()[[4, 0, 4, 2]])
    upstream = randn(4, 3, seed=12)
    (grad,) = torch.autograd.grad(out, table, upstream)
    want = np.zeros((5, 3), np.float32)
    np.add.at(want, [4, 0, 4, 2], upstream.numpy())  # row 4 accumulates twice
    np.testing.assert_allclose(grad.numpy(), want, rtol=1e-6, atol=1e-7)
    with pytest.raises(d5.CppOperatorError, match="index 7 is outside the table's 5 rows"):
        op(table, torch.tensor([0, 7, 1, 2], dtype=torch.int32))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_cpp_exception_becomes_cpp_operator_error(scale_add, requires_grad):
    op = d5pt.custom_op(scale_add)
    x = torch.zeros(4, 5)
    x[0, 0] = -12345
    with pytest.raises(d5.CppOperatorError, match="magic value"):
        op(x.requires_grad_(requires_grad), torch.zeros(4, 5))


def test_operator_without_backward(negate):
    op = d5pt.custom_op(negate)
    x = randn(4, 5, seed=13)
    model = torch.nn.Sequential(op, torch.nn.ReLU())
    with torch.no_grad():
        np.testing.assert_array_equal(model(x.requires_grad_()).numpy(),
                                      np.maximum(-x.detach().numpy(), 0))
    y = op(x)  # forward works; differentiating it does not
    with pytest.raises(d5.CppOperatorError, match="no backward method in C\\+\\+"):
        y.sum().backward()


def test_call_path_is_the_one_selected(scale_add, call_path):
    op = d5pt.custom_op(scale_add)
    through_glue = call_path == "native glue"
    assert isinstance(op, custom_ops.PyTorchGlueCppOp) == through_glue
    if through_glue:
        assert custom_ops._glue_call is glue.GLUE.get().call
    z = op(randn(4, 5, requires_grad=True), randn(4, 5))
    assert (type(z.grad_fn).__name__ == "CppFunction") == through_glue


def test_cpp_backward_exception_becomes_cpp_operator_error(scale_add):
    z = d5pt.custom_op(scale_add)(randn(4, 5, requires_grad=True), randn(4, 5))
    upstream = torch.ones(4, 5)
    upstream[0, 0] = -12345
    with pytest.raises(d5.CppOperatorError, match="scale_add.backward raised: magic gradient"):
        z.backward(upstream)


def test_gradient_outlives_the_module(scale_add):
    x = randn(4, 5, requires_grad=True)
    z = d5pt.custom_op(scale_add)(x, randn(4, 5))
    gc.collect()  # the module is gone; the autograd graph keeps the operator
    z.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((4, 5), 2.0, np.float32))


def test_second_order_gradients_are_refused(mul_tanh):
    op = d5pt.custom_op(mul_tanh)
    x = randn(3, 4, dtype=torch.float64, requires_grad=True, seed=5)
    y = randn(3, 4, dtype=torch.float64, seed=6)
    (grad,) = torch.autograd.grad(op(x, y).sum(), x, create_graph=True)
    np.testing.assert_allclose(grad.detach().numpy(), np.tanh(y.numpy()), rtol=1e-14)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        grad.sum().backward()


def test_parameters_and_threads(scale_add):
    """Parameters are plain tensors to the operator; calls from several threads (the
    kernel runs without the GIL) give each thread its own result."""
    import concurrent.futures
    op = d5pt.custom_op(scale_add)
    weight = torch.nn.Parameter(randn(4, 5, seed=3))
    np.testing.assert_allclose(op(weight, weight).detach().numpy(),
                               3 * weight.detach().numpy(), rtol=1e-6)
    inputs = [randn(4, 5, seed=seed) for seed in range(16)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda t: op(t, t), inputs))
    for tensor, result in zip(inputs, results):
        np.testing.assert_allclose(result.numpy(), 3 * tensor.numpy(), rtol=1e-6)


# -- checks before any C++ runs ----------------------------------------------------------
EXPECTED = r"expected tensordesc\(float32, \[4, 5\]\)"
BAD_CALLS = {  # name -> (inputs, error, message)
    "too_few": (lambda: (torch.zeros(4, 5),), d5.ShapeError, "expected 2 inputs, got 1"),
    "too_many": (lambda: (torch.zeros(4, 5),) * 3, d5.ShapeError,
                 "expected 2 inputs, got 3"),
    "dtype": (lambda: (torch.zeros(4, 5), torch.zeros(4, 5, dtype=torch.float64)),
              d5.ShapeError, rf"inputs? 1: {EXPECTED}.*float64"),
    "shape": (lambda: (torch.zeros(5, 4), torch.zeros(4, 5)), d5.ShapeError,
              rf"inputs? 0: {EXPECTED}, got .* shape \(5, 4\)"),
    "numpy": (lambda: (np.zeros((4, 5), np.float32), torch.zeros(4, 5)), d5.Deep500Error,
              "input 0 is a ndarray; d5pt.custom_op operators take torch tensors"),
    "not_cpu": (lambda: (torch.zeros(4, 5, device="meta"), torch.zeros(4, 5)),
                d5.UnsupportedError, r"input 0 is on meta; C\+\+ operators take CPU"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_inputs_are_refused_before_cpp_runs(spied, case):
    op, calls = spied
    make, error, message = BAD_CALLS[case]
    with pytest.raises(error, match=message):
        op(*make())
    assert calls == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_gpu_tensors_are_refused(scale_add):
    op = d5pt.custom_op(scale_add)
    with pytest.raises(d5.UnsupportedError, match="C\\+\\+ operators take CPU tensors"):
        op(torch.zeros(4, 5, device="cuda"), torch.zeros(4, 5, device="cuda"))


def test_custom_op_refuses_other_objects():
    with pytest.raises(d5.Deep500Error, match="d5pt.custom_op takes a CppOpDescriptor"):
        d5pt.custom_op(torch.matmul)


# -- Python operators --------------------------------------------------------------------
def mul_tanh_python():
    def forward(x, y):
        return x * np.tanh(y)

    def backward(grads, fwd_inputs, fwd_outputs):
        (g,), (x, y) = grads, fwd_inputs
        return [g * np.tanh(y), g * x * (1 - np.tanh(y) ** 2)]
    return d5.CustomPythonOp(forward, backward, [F64, F64], [F64], name="mul_tanh_py")


def test_python_op_matches_cpp_and_passes_gradcheck(mul_tanh):
    op, cpp = d5pt.custom_op(mul_tanh_python()), d5pt.custom_op(mul_tanh)
    assert isinstance(op, d5pt.PyTorchPythonOp)
    x = randn(3, 4, dtype=torch.float64, requires_grad=True, seed=14)
    y = randn(3, 4, dtype=torch.float64, requires_grad=True, seed=15)
    np.testing.assert_allclose(op(x, y).detach().numpy(), cpp(x, y).detach().numpy(),
                               rtol=1e-14, atol=1e-14)
    assert torch.autograd.gradcheck(op, (x, y), eps=1e-6, atol=1e-8, rtol=1e-6)
    with pytest.raises(d5.ShapeError, match="mul_tanh_py input 1"):
        op(x, torch.zeros(3, 4))
    with pytest.raises(d5.UnsupportedError,
                       match="Python operators on NumPy arrays take CPU"):
        op(x, torch.zeros(3, 4, dtype=torch.float64, device="meta"))


def test_python_op_integer_output_and_aliasing():
    def forward(x):
        return x, np.argmax(x, axis=1)  # returns its input: must not alias the tensor

    def backward(grads, fwd_inputs, fwd_outputs):
        assert grads[1] is None  # integer outputs get no upstream gradient
        return [grads[0]]
    op = d5pt.custom_op(d5.CustomPythonOp(forward, backward, name="identity_argmax"))
    x = randn(3, 5, requires_grad=True, seed=16)
    same, index = op(x)
    assert same.data_ptr() != x.data_ptr()
    assert index.dtype == torch.int64 and not index.requires_grad
    np.testing.assert_array_equal(index.numpy(), x.detach().numpy().argmax(axis=1))
    same.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((3, 5), np.float32))


# -- PyTorch functions as Deep500 operators, checked against the reference ---------------
MATMUL_INPUTS = [d5.tensordesc("float64", [3, 4]), d5.tensordesc("float64", [4, 5])]


def matmul_inputs(dtype=np.float64):
    rng = np.random.default_rng(17)
    return [rng.standard_normal(shape).astype(dtype) for shape in [(3, 4), (4, 5)]]


def test_custom_op_from_native_is_a_checked_customop():
    op = d5pt.custom_op_from_native(torch.matmul, MATMUL_INPUTS,
                                    [d5.tensordesc("float64", [3, 5])])
    assert isinstance(op, d5.CustomOp) and op.op_type == "matmul"
    a, b = matmul_inputs()
    np.testing.assert_allclose(op(a, b), a @ b, rtol=1e-14, atol=1e-14)
    reference = d5ref.create_operator("MatMul")
    upstream = [np.ones((3, 5))]
    for got, want in zip(op.backward(upstream, [a, b], [a @ b]),
                         reference.backward(upstream, [a, b], [a @ b])):
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)
    with pytest.raises(d5.ShapeError, match="input 1"):
        op(a, b.T)
    # On torch tensors it is torch.matmul itself, with PyTorch's own autograd.
    module = d5pt.custom_op(op)
    ta = torch.from_numpy(a).requires_grad_()
    assert "Mm" in type(module(ta, torch.from_numpy(b)).grad_fn).__name__


def test_nativeop_forward_against_reference():
    inputs = matmul_inputs(np.float32)
    result = d5pt.test_nativeop_forward(torch.matmul, inputs, reference_op="MatMul",
                                        metrics=[d5.L2Error()])
    assert result.passed is True, result.details
    assert result["L2Error"].value < 1e-6
    assert result.details["outputs"][0]["rtol"] == 1e-4
    # Given arrays instead of a reference operator; no reference only measures.
    given = d5pt.test_nativeop_forward(torch.matmul, inputs, [inputs[0] @ inputs[1]])
    assert given.passed is True
    assert d5pt.test_nativeop_forward(torch.matmul, inputs).passed is None


def test_nativeop_forward_detects_a_wrong_function():
    wrong = d5pt.custom_op_from_native(lambda a, b: torch.matmul(a, b) * 1.001,
                                       name="wrong_matmul")
    result = d5pt.test_nativeop_forward(wrong, matmul_inputs(), reference_op="MatMul")
    assert result.passed is False
    assert result.details["outputs"][0]["max_abs_error"] > 1e-5
    # A looser tolerance accepts it.
    assert d5pt.test_nativeop_forward(wrong, matmul_inputs(), reference_op="MatMul",
                                      rtol=1e-2).passed is True


def test_nativeop_gradient_against_reference_and_finite_differences():
    result = d5pt.test_nativeop_gradient(torch.matmul, matmul_inputs(), "MatMul",
                                         metrics=[d5.MaxError()])
    assert result.passed is True, result.details
    assert [c["passed"] for c in result.details["reference"]] == [True, True]
    assert [e["input"] for e in result.details["finite_differences"]] == [0, 1]
    assert all(m.value < 1e-12 for m in result.metrics)
    sigmoid = d5pt.test_nativeop_gradient(torch.sigmoid, [matmul_inputs()[0]],
                                          d5ref.create_operator("Sigmoid"))
    assert sigmoid.passed is True, sigmoid.details


def test_nativeop_gradient_detects_a_wrong_gradient():
    # Correct values, but b is detached: autograd gives b no gradient (zeros).
    detached = d5pt.custom_op_from_native(lambda a, b: torch.matmul(a, b.detach()),
                                          name="detached_matmul")
    result = d5pt.test_nativeop_gradient(detached, matmul_inputs(), "MatMul")
    assert result.passed is False
    assert [c["passed"] for c in result.details["reference"]] == [True, False]
    assert [e["passed"] for e in result.details["finite_differences"]] == [True, False]
    only_fd = d5pt.test_nativeop_gradient(detached, matmul_inputs(),
                                          metrics=[d5.MaxError()])
    assert only_fd.passed is False and "reference" not in only_fd.details
    assert [m.conditions["input"] for m in only_fd.metrics] == [0, 1]
    assert only_fd.metrics[0].value < 1e-6 and only_fd.metrics[1].value > 0.5
    with pytest.raises(d5.Deep500Error, match="needs a reference_op"):
        d5pt.test_nativeop_gradient(detached, matmul_inputs(), finite_differences=False)


def test_cpp_op_through_torch_checked_against_the_numpy_bridge(mul_tanh):
    # The C++ operator on torch tensors (its backward via CustomOpFunction) against the
    # same library on NumPy arrays, and against finite differences.
    rng = np.random.default_rng(18)
    inputs = [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))]
    reference = d5ref.custom_op(mul_tanh)
    assert d5pt.test_nativeop_forward(d5pt.custom_op(mul_tanh), inputs,
                                      reference_op=reference).passed is True
    result = d5pt.test_nativeop_gradient(d5pt.custom_op(mul_tanh), inputs, reference,
                                         finite_differences={"eps": 1e-6})
    assert result.passed is True, result.details
