"""Deep500's TensorFlow kernel (deep500/frameworks/tensorflow/tf_kernel.py): inside
tf.function a C++ operator is a D500CustomOp node (its gradient a D500CustomOpGrad
node), not a numpy_function; values and gradients equal the NumPy CustomCPPOp's and the
numpy_function fallback's bit for bit; errors from C++ and from shape checks surface as
tf.errors with their messages; the graph keeps the operator alive, and a node of an
unknown instance fails instead of calling it. Building, caching and the fallback when
the kernel cannot be had: test_glue_loading.py."""
from __future__ import annotations

import gc
import pathlib
import weakref

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import deep500 as d5  # noqa: E402
import deep500.frameworks.reference as d5ref  # noqa: E402
import deep500.frameworks.tensorflow as d5tf  # noqa: E402
from deep500.frameworks.tensorflow import tf_kernel  # noqa: E402

SOURCES = pathlib.Path(__file__).parent / "cpp_ops"
EXACT = dict(rtol=0, atol=0)
NUMPY_FUNCTION_TYPES = {"PyFunc", "PyFuncStateless", "EagerPyFunc"}


def desc(dtype, shape):
    return d5.tensordesc(dtype, shape)


@pytest.fixture(scope="module")
def kernel():
    """The kernel, built (or found in the session cache) and loaded once per process."""
    if not tf_kernel.GLUE.enabled():
        pytest.skip(f"{tf_kernel.GLUE.switch}=0 selects the numpy_function fallback")
    ops = tf_kernel.kernel_ops()
    assert ops is not None, f"the kernel could not be had: {tf_kernel.LOADER.failure}"
    return ops


@pytest.fixture(scope="module")
def scale_add():
    """z = 2x + y on float64 [4, 5]; forward throws on x[0] == -12345."""
    return d5.compile_custom_cppop("scale_add", str(SOURCES / "scale_add.cpp"),
                                   [desc("float64", [4, 5])] * 2, [desc("float64", [4, 5])])


@pytest.fixture(scope="module")
def pick_argmax():
    """(x [3, 4] float32, idx [3] int64) -> (x[i, idx[i]], argmax_j x[i]); throws on a
    bad index; its backward accumulates into the zero-filled gradient."""
    return d5.compile_custom_cppop(
        "pick_argmax", str(SOURCES / "pick_argmax.cpp"),
        [desc("float32", [3, 4]), desc("int64", [3])],
        [desc("float32", [3]), desc("int64", [3])])


def op_types(function, *args) -> list[str]:
    graph = function.get_concrete_function(*args).graph
    return [node.type for node in graph.get_operations()]


def value_and_gradient(op):
    """A fresh tf.function: the outputs and d sum(picked · w) / dx of pick_argmax."""
    @tf.function
    def run(x, idx, w):
        with tf.GradientTape() as tape:
            tape.watch(x)
            picked, argmax = op(x, idx)
            loss = tf.reduce_sum(picked * w)
        return picked, argmax, tape.gradient(loss, x)
    return run


def pick_inputs():
    rng = np.random.default_rng(0)
    return (tf.constant(rng.standard_normal((3, 4)).astype(np.float32)),
            tf.constant([2, 0, 3], tf.int64),
            tf.constant(rng.standard_normal(3).astype(np.float32)))


def test_tf_function_runs_the_kernel_and_matches_fallback_and_numpy(kernel, pick_argmax,
                                                                    monkeypatch):
    op = d5tf.custom_op(pick_argmax)
    inputs = pick_inputs()
    native = value_and_gradient(op)
    types = op_types(native, *inputs)
    assert types.count("D500CustomOp") == 1 and types.count("D500CustomOpGrad") == 1
    assert not NUMPY_FUNCTION_TYPES & set(types)
    picked, argmax, dx = native(*inputs)

    monkeypatch.setenv(tf_kernel.GLUE.switch, "0")
    fallback = value_and_gradient(op)
    fallback_types = op_types(fallback, *inputs)
    assert "D500CustomOp" not in fallback_types
    assert NUMPY_FUNCTION_TYPES & set(fallback_types)
    want = [t.numpy() for t in fallback(*inputs)]

    x, idx, w = (t.numpy() for t in inputs)
    numpy_op = d5ref.custom_op(pick_argmax)
    want_picked, want_argmax = numpy_op.forward(x, idx)
    want_dx, _ = numpy_op.backward([w, None], [x, idx], [want_picked, want_argmax])
    for got, fallback_value, reference in zip((picked, argmax, dx), want,
                                              (want_picked, want_argmax, want_dx)):
        assert got.shape == reference.shape and got.dtype == reference.dtype
        np.testing.assert_allclose(got.numpy(), fallback_value, **EXACT)
        np.testing.assert_allclose(got.numpy(), reference, **EXACT)


def test_gradient_of_a_tf_function_from_outside(kernel, scale_add):
    """An eager tape around a tf.function: TensorFlow builds the backward function from
    the gradient registered for D500CustomOp."""
    op = d5tf.custom_op(scale_add)
    traced = tf.function(lambda x, y: op(x, y))
    x, y = tf.ones((4, 5), tf.float64), tf.fill((4, 5), tf.constant(3.0, tf.float64))
    with tf.GradientTape() as tape:
        tape.watch([x, y])
        z = traced(x, y)
        loss = tf.reduce_sum(z * z)
    dx, dy = tape.gradient(loss, [x, y])
    np.testing.assert_allclose(z.numpy(), np.full((4, 5), 5.0), **EXACT)
    np.testing.assert_allclose(dx.numpy(), np.full((4, 5), 20.0), **EXACT)
    np.testing.assert_allclose(dy.numpy(), np.full((4, 5), 10.0), **EXACT)


def test_calls_are_ordered_not_merged(kernel, scale_add):
    """Stateful: two identical calls stay two nodes, the second after the first."""
    op = d5tf.custom_op(scale_add)
    traced = tf.function(lambda x: (op(x, x), op(x, x)))
    graph = traced.get_concrete_function(tf.ones((4, 5), tf.float64)).graph
    first, second = [n for n in graph.get_operations() if n.type == "D500CustomOp"]
    assert first in second.control_inputs


def test_cpp_exception_surfaces_with_its_message(kernel, scale_add):
    op = d5tf.custom_op(scale_add)
    traced = tf.function(lambda x, y: op(x, y))
    x = np.ones((4, 5))
    x[0, 0] = -12345.0
    with pytest.raises(tf.errors.UnknownError,
                       match=r"CppOperatorError: .*scale_add\.forward raised: magic value"):
        traced(tf.constant(x), tf.ones((4, 5), tf.float64))


def test_runtime_shape_check_before_cpp(kernel, scale_add):
    """A dimension unknown when traced is checked by the kernel before C++ runs."""
    op = d5tf.custom_op(scale_add)
    traced = tf.function(lambda x, y: op(x, y),
                         input_signature=[tf.TensorSpec([None, 5], tf.float64)] * 2)
    x = np.ones((3, 5))
    x[0, 0] = -12345.0  # C++ would throw "magic value" if it ran
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"ShapeError: .*scale_add input 0: expected "
                             r"tensordesc\(float64, \[4, 5\]\), got a tensor of shape "
                             r"\(3, 5\)"):
        traced(tf.constant(x), tf.constant(x))


def test_graph_keeps_the_operator_alive(kernel, scale_add):
    ops = [d5tf.custom_op(scale_add)]  # emptied below: the function's closure lets go
    instance = weakref.ref(ops[0].op)
    traced = tf.function(lambda x, y: ops[0](x, y))
    x = tf.ones((4, 5), tf.float64)
    traced(x, x)
    ops.clear()
    gc.collect()
    assert instance() is not None  # the node holds its address: still valid
    np.testing.assert_allclose(traced(x, x).numpy(), np.full((4, 5), 3.0), **EXACT)
    del traced
    gc.collect()
    assert instance() is None  # freed with the last graph that used it


def test_unregistered_instance_fails_instead_of_being_called(kernel, scale_add):
    """A node whose operator instance is not registered with the kernel (a graph saved
    and loaded elsewhere, or imported) fails when its kernel is created."""
    op = d5tf.custom_op(scale_add)
    x = tf.ones((4, 5), tf.float64)
    tf.function(lambda x: op(x, x))(x)  # registers the instance
    attributes = dict(op._native_attributes, instance=0)  # numbers start at 1
    forged = tf.function(lambda x: kernel.d500_custom_op([x, x], **attributes))
    with pytest.raises(tf.errors.FailedPreconditionError,
                       match="operator instance that does not exist in this process"):
        forged(x)


