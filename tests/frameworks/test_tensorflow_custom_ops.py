"""d5tf.custom_op: C++ operators (the library d5ref.custom_op loads) and Python CustomOps
as TensorFlow functions, eagerly (through Deep500's eager glue and through the Python
path: every test runs both ways) and inside tf.function: values and GradientTape
gradients against the NumPy CustomCPPOp, static shapes, integer tensors, errors (before
C++ runs, and from C++), a few training steps; d5tf.custom_op_from_native and the
d5tf.test_nativeop_* checks against the reference operators."""
from __future__ import annotations

import os
import pathlib

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import deep500 as d5  # noqa: E402
import deep500.frameworks.reference as d5ref  # noqa: E402
import deep500.frameworks.tensorflow as d5tf  # noqa: E402
from deep500.frameworks.tensorflow import glue  # noqa: E402
from deep500.lv0_operators.custom_op import as_tuple  # noqa: E402

SOURCES = pathlib.Path(__file__).parent / "cpp_ops"
MODES = ["eager", "function"]
DTYPES = [np.float32, np.float64]
# The bridge runs the same C++ code as the NumPy CustomCPPOp: results agree bit for bit.
EXACT = dict(rtol=0, atol=0)


@pytest.fixture(scope="session")
def build_cache():
    """C++ operators of this file, and Deep500's TensorFlow kernel, are built in the
    session's cache folder (DEEP500_CACHE, set by tests/conftest.py)."""
    return os.environ["DEEP500_CACHE"]


def desc(dtype, shape):
    return d5.tensordesc(dtype, shape)


@pytest.fixture(autouse=True, params=["eager glue", "Python path"])
def eager_path(request, monkeypatch):
    """Which way an eager d5tf.custom_op call runs C++ operators in this test (graphs
    are the same either way)."""
    if request.param == "Python path":
        monkeypatch.setenv(glue.GLUE.switch, "0")
    else:
        monkeypatch.delenv(glue.GLUE.switch, raising=False)
        assert glue.GLUE.get() is not None, glue.LOADER.failure
    return request.param


@pytest.fixture(scope="session")
def scale_add(build_cache):
    """z = 2x + y on [4, 5], per float dtype; throws on x[0] == -12345."""
    return {np.dtype(dt): d5.compile_custom_cppop(
        "scale_add", str(SOURCES / "scale_add.cpp"), [desc(dt, [4, 5])] * 2,
        [desc(dt, [4, 5])]) for dt in DTYPES}


@pytest.fixture(scope="session")
def linear(build_cache):
    """y = x @ w, x [8, 3], w [3, 2]."""
    return d5.compile_custom_cppop("linear", str(SOURCES / "linear.cpp"),
                                   [desc("float32", [8, 3]), desc("float32", [3, 2])],
                                   [desc("float32", [8, 2])])


@pytest.fixture(scope="session")
def pick_argmax(build_cache):
    """(x [3, 4] float32, idx [3] int64) -> (x[i, idx[i]] float32, argmax_j x[i] int64)."""
    return d5.compile_custom_cppop(
        "pick_argmax", str(SOURCES / "pick_argmax.cpp"),
        [desc("float32", [3, 4]), desc("int64", [3])],
        [desc("float32", [3]), desc("int64", [3])])


def run(mode, fn, *args):
    """fn(*args) eagerly, or inside a fresh tf.function."""
    return fn(*args) if mode == "eager" else tf.function(fn)(*args)


def forward_and_grads(op, inputs, upstream, wrt):
    """(outputs, d sum(outputs·upstream) / d inputs[wrt]) through a GradientTape."""
    with tf.GradientTape() as tape:
        for index in wrt:
            tape.watch(inputs[index])
        outputs = as_tuple(op(*inputs))
        loss = tf.add_n([tf.reduce_sum(o * g) for o, g in zip(outputs, upstream)
                         if g is not None])
    return outputs, tape.gradient(loss, [inputs[i] for i in wrt])


def rand(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# -- C++ operators: values and gradients --------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_cpp_forward_matches_numpy_op(scale_add, mode, dtype):
    op = d5tf.custom_op(scale_add[np.dtype(dtype)])
    numpy_op = d5ref.custom_op(scale_add[np.dtype(dtype)])
    rng = np.random.default_rng(0)
    x, y = rand(rng, (4, 5), dtype), rand(rng, (4, 5), dtype)
    z = run(mode, op, tf.constant(x), tf.constant(y))
    assert isinstance(z, tf.Tensor) and z.dtype == tf.as_dtype(dtype) and z.shape == (4, 5)
    np.testing.assert_allclose(z.numpy(), numpy_op.forward(x, y), **EXACT)
    np.testing.assert_allclose(z.numpy(), 2 * x + y, rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_cpp_gradient_matches_numpy_op(scale_add, mode, dtype):
    op = d5tf.custom_op(scale_add[np.dtype(dtype)])
    numpy_op = d5ref.custom_op(scale_add[np.dtype(dtype)])
    rng = np.random.default_rng(1)
    x, y, g = (rand(rng, (4, 5), dtype) for _ in range(3))
    (z,), grads = run(mode, lambda a, b: forward_and_grads(op, [a, b], [g], [0, 1]),
                      tf.constant(x), tf.constant(y))
    expected = numpy_op.backward([g], [x, y], [numpy_op.forward(x, y)])
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got.numpy(), want, **EXACT)
    np.testing.assert_allclose(grads[0].numpy(), 2 * g, rtol=1e-6)


def test_cpp_op_is_shared_with_the_reference(scale_add):
    """No rebuild: both bridges use the library the descriptor names."""
    descriptor = scale_add[np.dtype(np.float32)]
    op = d5tf.custom_op(descriptor)
    assert isinstance(op.op, d5.CustomCPPOp)
    assert op.op.library is d5ref.custom_op(descriptor).library
    assert d5tf.custom_op(op) is op


def test_eager_accepts_numpy_and_variables(scale_add):
    op = d5tf.custom_op(scale_add[np.dtype(np.float32)])
    x = np.arange(20, dtype=np.float32).reshape(5, 4).T.copy()  # a C-ordered copy
    strided = np.arange(40, dtype=np.float32).reshape(4, 10)[:, ::2]  # a strided view
    w = tf.Variable(np.ones((4, 5), np.float32))
    np.testing.assert_allclose(op(x, w).numpy(), 2 * x + 1, **EXACT)
    np.testing.assert_allclose(op(strided, w).numpy(), 2 * strided + 1, **EXACT)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(op(x, w))
    np.testing.assert_allclose(tape.gradient(loss, w).numpy(), np.ones((4, 5)), **EXACT)


def test_outputs_own_their_memory(scale_add):
    """Each call returns new tensors; earlier results are not overwritten."""
    op = d5tf.custom_op(scale_add[np.dtype(np.float32)])
    x = tf.ones((4, 5))
    first = op(x, x)
    second = op(x, tf.zeros((4, 5)))
    np.testing.assert_allclose(first.numpy(), np.full((4, 5), 3.0), **EXACT)
    np.testing.assert_allclose(second.numpy(), np.full((4, 5), 2.0), **EXACT)
    assert tf.reduce_sum(tf.matmul(first, second, transpose_b=True)).numpy() == 24 * 20


@pytest.mark.parametrize("mode", MODES)
def test_multiple_outputs_with_int64(pick_argmax, mode):
    op = d5tf.custom_op(pick_argmax)
    numpy_op = d5ref.custom_op(pick_argmax)
    rng = np.random.default_rng(2)
    x = rand(rng, (3, 4))
    idx = np.array([0, 3, 1], np.int64)
    weights = rand(rng, (3,))

    def body(x, idx):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            picked, argmax = op(x, idx)
            # Only the float output is used: argmax's upstream gradient is None.
            loss = tf.reduce_sum(picked * weights)
            from_int = tf.reduce_sum(tf.cast(argmax, tf.float32))
        grads = tape.gradient(loss, [x, idx])
        return picked, argmax, grads, tape.gradient(from_int, x)

    picked, argmax, (dx, didx), d_from_int = run(mode, body, tf.constant(x),
                                                 tf.constant(idx))
    want_picked, want_argmax = numpy_op.forward(x, idx)
    assert argmax.dtype == tf.int64 and picked.dtype == tf.float32
    assert picked.shape == (3,) and argmax.shape == (3,)
    np.testing.assert_allclose(picked.numpy(), want_picked, **EXACT)
    np.testing.assert_array_equal(argmax.numpy(), want_argmax)
    np.testing.assert_array_equal(argmax.numpy(), x.argmax(axis=1))
    # backward writes one element per row: the rest must be the zero fill.
    expected = np.zeros_like(x)
    expected[np.arange(3), idx] = weights
    np.testing.assert_allclose(dx.numpy(), expected, **EXACT)
    assert didx is None  # integer input
    assert d_from_int is None  # integer output: not differentiable


def test_static_shapes_flow_downstream(linear):
    op = d5tf.custom_op(linear)
    seen = {}

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32),
                                  tf.TensorSpec([3, 2], tf.float32)])
    def model(x, w):
        y = op(x, w)
        seen["shape"] = y.shape
        return tf.reshape(y, [-1])  # needs no dynamic shape: 16 elements

    rng = np.random.default_rng(3)
    x, w = rand(rng, (8, 3)), rand(rng, (3, 2))
    np.testing.assert_allclose(model(x, w).numpy(), (x @ w).ravel(), rtol=1e-5, atol=1e-6)
    assert seen["shape"] == (8, 2)
    # The batch dimension was unknown when traced: checked when run, before C++.
    with pytest.raises(tf.errors.OpError, match="ShapeError.*expected tensordesc"):
        model(rand(rng, (5, 3)), w)


@pytest.mark.parametrize("mode", MODES)
def test_training_loss_decreases(linear, mode):
    """Gradient descent on w in y = x @ w through the C++ operator."""
    op = d5tf.custom_op(linear)
    rng = np.random.default_rng(4)
    x = tf.constant(rand(rng, (8, 3)))
    target = x @ tf.constant(rand(rng, (3, 2)))
    w = tf.Variable(tf.zeros((3, 2)))

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(op(x, w) - target))
        grad = tape.gradient(loss, w)
        w.assign_sub(0.2 * grad)
        return loss, grad

    step_fn = step if mode == "eager" else tf.function(step)
    losses = []
    for iteration in range(6):
        loss, grad = step_fn()
        if iteration == 0:  # w = 0: d mean((xw − t)²)/dw = −2 xᵀt / size
            np.testing.assert_allclose(grad.numpy(), -2 * x.numpy().T @ target.numpy() / 16,
                                       rtol=1e-5, atol=1e-6)
        losses.append(float(loss))
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.5 * losses[0]


def test_keras_layer_trains_with_cpp_op(linear):
    keras = pytest.importorskip("keras")
    op = d5tf.custom_op(linear)

    class CppDense(keras.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(3, 2), initializer="zeros")

        def call(self, x):
            return op(x, self.w)

    rng = np.random.default_rng(5)
    x = rand(rng, (8, 3))
    y = x @ rand(rng, (3, 2))
    model = keras.Sequential([keras.Input((3,), batch_size=8), CppDense()])
    # jit_compile=False: Keras picks XLA on GPU machines, and XLA cannot compile the
    # operator's node (Deep500's D500CustomOp kernel, or the numpy_function fallback).
    model.compile(optimizer=keras.optimizers.SGD(0.2), loss="mse", jit_compile=False)
    history = model.fit(x, y, batch_size=8, epochs=5, verbose=0).history["loss"]
    assert history[-1] < 0.5 * history[0], history


# -- errors --------------------------------------------------------------------------------
MAGIC = -12345.0  # scale_add's C++ forward throws on it: proves C++ did not run


def magic_x(dtype=np.float32, shape=(4, 5)):
    x = np.ones(shape, dtype)
    x.flat[0] = MAGIC
    return x


@pytest.mark.parametrize("case,match", [
    ("count", "expected 2 inputs, got 3"),
    ("dtype", "inputs? 0: expected tensordesc\\(float32, \\[4, 5\\]\\).*float64"),
    ("shape", "inputs? 0: expected tensordesc\\(float32, \\[4, 5\\]\\).*\\(5, 4\\)"),
])
@pytest.mark.parametrize("mode", MODES)
def test_mismatch_raises_shape_error_before_cpp(scale_add, case, match, mode):
    op = d5tf.custom_op(scale_add[np.dtype(np.float32)])
    y = tf.ones((4, 5))
    inputs = {"count": [tf.constant(magic_x()), y, y],
              "dtype": [tf.constant(magic_x(np.float64)), y],
              "shape": [tf.constant(magic_x(shape=(5, 4))), y]}[case]
    with pytest.raises(d5.ShapeError, match=match):
        run(mode, op, *inputs)  # in a tf.function: raised while tracing


def test_cpp_exception_eager(scale_add):
    op = d5tf.custom_op(scale_add[np.dtype(np.float32)])
    with pytest.raises(d5.CppOperatorError, match="scale_add.forward raised: magic value"):
        op(tf.constant(magic_x()), tf.ones((4, 5)))
    with tf.GradientTape(), pytest.raises(d5.CppOperatorError, match="magic value"):
        op(tf.constant(magic_x()), tf.ones((4, 5)))


def test_cpp_exception_in_tf_function(pick_argmax):
    op = d5tf.custom_op(pick_argmax)
    fn = tf.function(lambda x, idx: op(x, idx))
    x = tf.zeros((3, 4))
    fn(x, tf.constant([0, 1, 2], tf.int64))  # traced and run once
    with pytest.raises(tf.errors.OpError) as info:
        fn(x, tf.constant([0, 7, 2], tf.int64))
    assert "CppOperatorError" in str(info.value)
    assert "pick_argmax.forward raised: index 7 in row 1 is out of range" in str(info.value)


def test_inference_only_cpp_op(build_cache):
    descriptor = d5.compile_custom_cppop("square_inference",
                                         str(SOURCES / "square_inference.cpp"),
                                         [desc("float32", [6])], [desc("float32", [6])])
    op = d5tf.custom_op(descriptor)
    x = tf.range(6, dtype=tf.float32)
    np.testing.assert_allclose(op(x).numpy(), np.arange(6) ** 2, **EXACT)
    np.testing.assert_allclose(tf.function(op)(x).numpy(), np.arange(6) ** 2, **EXACT)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = op(x)
    with pytest.raises(d5.CppOperatorError, match="no backward method"):
        tape.gradient(y, x)

    @tf.function
    def gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = op(x)
        return tape.gradient(y, x)
    with pytest.raises(tf.errors.OpError, match="no backward method"):
        gradient(x)


# -- Python CustomOps ------------------------------------------------------------------------
def scaled_op(with_descriptors=True):
    """(x float64 [2, 3], k int64 [2, 3]) -> x·k, backward g·k (and None for k)."""
    descriptors = ([desc("float64", [2, 3]), desc("int64", [2, 3])],
                   [desc("float64", [2, 3])]) if with_descriptors else (None, None)
    return d5.CustomPythonOp(lambda x, k: x * k,
                             lambda grads, inputs, outputs: [grads[0] * inputs[1], None],
                             *descriptors, name="scaled")


@pytest.mark.parametrize("mode", MODES)
def test_python_custom_op(mode):
    op = d5tf.custom_op(scaled_op())
    rng = np.random.default_rng(6)
    x, g = rand(rng, (2, 3), np.float64), rand(rng, (2, 3), np.float64)
    k = np.array([[1, 2, 3], [-1, 0, 4]], np.int64)
    (y,), (dx, dk) = run(mode, lambda a, b: forward_and_grads(op, [a, b], [g], [0, 1]),
                         tf.constant(x), tf.constant(k))
    np.testing.assert_allclose(y.numpy(), x * k, **EXACT)
    np.testing.assert_allclose(dx.numpy(), g * k, **EXACT)
    assert dk is None


def test_python_op_without_descriptors():
    op = d5tf.custom_op(scaled_op(with_descriptors=False))
    x, k = tf.ones((2, 2), tf.float64), tf.constant([[2, 3], [4, 5]], tf.int64)
    np.testing.assert_allclose(op(x, k).numpy(), [[2, 3], [4, 5]], **EXACT)
    with pytest.raises(d5.Deep500Error, match="no output descriptors.*tf.function"):
        tf.function(op)(x, k)


def test_python_op_wrong_output_is_reported():
    bad = d5.CustomPythonOp(lambda x: x.astype(np.float32), None,
                            [desc("float64", [2])], [desc("float64", [2])], name="bad")
    with pytest.raises(d5.ShapeError, match="bad.forward output 0"):
        d5tf.custom_op(bad)(tf.ones(2, tf.float64))


def test_custom_op_rejects_other_types():
    with pytest.raises(d5.Deep500Error, match="CppOpDescriptor"):
        d5tf.custom_op(lambda x: x)


# -- native TensorFlow functions and the reference --------------------------------------------
def matmul_inputs(dtype=np.float32):
    rng = np.random.default_rng(7)
    return [rand(rng, (3, 4), dtype), rand(rng, (4, 2), dtype)]


def test_custom_op_from_native_matmul():
    matmul = d5tf.custom_op_from_native(tf.linalg.matmul, [desc("float32", [3, 4]),
                                                           desc("float32", [4, 2])],
                                        [desc("float32", [3, 2])])
    a, b = matmul_inputs()
    assert isinstance(matmul, d5.CustomOp) and matmul.op_type == "matmul"
    np.testing.assert_allclose(matmul.forward(a, b), a @ b, rtol=1e-5, atol=1e-6)
    g = np.ones((3, 2), np.float32)
    da, db = matmul.backward([g], [a, b], [a @ b])
    np.testing.assert_allclose(da, g @ b.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(db, a.T @ g, rtol=1e-5, atol=1e-6)
    with pytest.raises(d5.ShapeError, match="input 0"):
        matmul(b, a)
    wrong_output = d5tf.custom_op_from_native(tf.linalg.matmul, None,
                                              [desc("float32", [2, 3])])
    with pytest.raises(d5.ShapeError, match="matmul.forward output 0"):
        wrong_output.forward(a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_nativeop_checks_pass_against_reference(dtype):
    inputs = matmul_inputs(dtype)
    forward = d5tf.test_nativeop_forward(tf.linalg.matmul, inputs, reference_op="MatMul",
                                         metrics=[d5.L2Error()])
    assert forward.passed is True, forward.details
    assert forward["L2Error"].value < {np.float32: 1e-6, np.float64: 1e-14}[dtype]
    gradient = d5tf.test_nativeop_gradient(tf.linalg.matmul, inputs, "MatMul",
                                           metrics=[d5.MaxError()])
    assert gradient.passed is True, gradient.details
    assert [c["passed"] for c in gradient.details["reference"]] == [True, True]
    assert [c["passed"] for c in gradient.details["finite_differences"]] == [True, True]
    assert len(gradient.metrics) == 2


def test_nativeop_checks_fail_for_a_wrong_function():
    def wrong(a, b):  # a typical slip: scaled result
        return tf.linalg.matmul(a, b) * 1.01
    inputs = matmul_inputs()
    forward = d5tf.test_nativeop_forward(wrong, inputs, reference_op="MatMul")
    assert forward.passed is False
    assert forward.details["outputs"][0]["max_abs_error"] > 1e-3
    gradient = d5tf.test_nativeop_gradient(wrong, inputs, "MatMul", finite_differences=False)
    assert gradient.passed is False
    # Its backward is its forward's true derivative: finite differences alone agree.
    assert d5tf.test_nativeop_gradient(wrong, inputs).passed is True
    # A gradient that disagrees with the forward fails the finite differences.
    @tf.custom_gradient
    def bad_gradient(a, b):
        return tf.linalg.matmul(a, b), lambda dy: (dy @ tf.transpose(b), tf.zeros_like(b))
    assert d5tf.test_nativeop_gradient(bad_gradient, inputs).passed is False


def test_nativeop_checks_with_given_outputs_and_no_reference():
    inputs = matmul_inputs()
    given = d5tf.test_nativeop_forward(tf.linalg.matmul, inputs, [inputs[0] @ inputs[1]])
    assert given.passed is True
    assert d5tf.test_nativeop_forward(tf.linalg.matmul, inputs).passed is None
    with pytest.raises(d5.Deep500Error, match="needs a reference_op"):
        d5tf.test_nativeop_gradient(tf.linalg.matmul, inputs, finite_differences=False)


def test_nativeop_conv2d_finite_differences():
    """tf.nn.conv2d (NHWC, HWIO) against the reference Conv (NCHW, OIHW), given outputs."""
    rng = np.random.default_rng(8)
    x, w = rand(rng, (1, 5, 5, 2), np.float64), rand(rng, (3, 3, 2, 2), np.float64)
    conv = d5tf.custom_op_from_native(
        lambda x, w: tf.nn.conv2d(x, w, strides=1, padding="VALID"),
        [desc("float64", x.shape), desc("float64", w.shape)], name="conv2d")
    reference = d5ref.create_operator("Conv").forward(x.transpose(0, 3, 1, 2),
                                                      w.transpose(3, 2, 0, 1))
    forward = d5tf.test_nativeop_forward(conv, [x, w], [reference.transpose(0, 2, 3, 1)])
    assert forward.passed is True, forward.details
    gradient = d5tf.test_nativeop_gradient(conv, [x, w])
    assert gradient.passed is True, gradient.details


def test_nativeop_checks_through_the_cpp_bridge(linear):
    """A d5tf.custom_op is tested through TensorFlow: its registered gradient included."""
    op = d5tf.custom_op(linear)
    rng = np.random.default_rng(9)
    inputs = [rand(rng, (8, 3)), rand(rng, (3, 2))]
    forward = d5tf.test_nativeop_forward(op, inputs, reference_op="MatMul")
    assert forward.passed is True, forward.details
    gradient = d5tf.test_nativeop_gradient(op, inputs, "MatMul")
    assert gradient.passed is True, gradient.details
