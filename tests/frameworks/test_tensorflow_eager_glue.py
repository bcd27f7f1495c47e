"""Deep500's TensorFlow eager glue (deep500/frameworks/tensorflow/glue.py): an eager
call of a d5tf.custom_op on plain CPU tensors runs C++ on the tensors' own memory and
returns tensors on the memory C++ wrote; everything else takes the Python path; outputs
outlive the operator; threads; no reference leaks. What the operators compute is tested
in test_tensorflow_custom_ops.py, whose every test runs through both paths; building,
caching and the fallback when the glue cannot be had, in test_glue_loading.py."""
from __future__ import annotations

import ctypes
import gc
import pathlib
import sys
import threading
import weakref

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import deep500 as d5  # noqa: E402
import deep500.frameworks.tensorflow as d5tf  # noqa: E402
from deep500.frameworks.tensorflow import custom_ops, glue  # noqa: E402

SOURCES = pathlib.Path(__file__).parent / "cpp_ops"
F32 = d5.tensordesc("float32", [4, 5])
EXACT = dict(rtol=0, atol=0)
_SPY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p))


@pytest.fixture(scope="module")
def scale_add():
    """z = 2x + y on float32 [4, 5]; forward throws on x[0] == -12345."""
    return d5.compile_custom_cppop("scale_add", str(SOURCES / "scale_add.cpp"),
                                   [F32, F32], [F32])


@pytest.fixture
def loaded(monkeypatch):
    monkeypatch.delenv(glue.GLUE.switch, raising=False)
    assert glue.GLUE.get() is not None, glue.LOADER.failure
    return glue.LOADER.loaded_build


@pytest.fixture
def spied(scale_add, loaded):
    """scale_add whose glue calls a spy recording the pointers every forward receives."""
    op = d5tf.custom_op(scale_add)
    calls = []
    forward = op.op.library.forward_fn

    def recording(handle, pointers):
        calls.append([pointers[i] for i in range(3)])
        return forward(handle, ctypes.cast(pointers, ctypes.c_void_p))
    spy = _SPY(recording)
    op._eager_glue = op._glue_operator(spy)
    op._spy = spy  # the callback must outlive the calls
    return op, calls


def address(tensor) -> int:
    """Where a CPU tensor's data is (its NumPy view shares the buffer)."""
    return np.asarray(tensor).ctypes.data


def test_plain_eager_call_runs_cpp_on_the_tensors_memory(spied):
    op, calls = spied
    x, y = tf.constant(np.arange(20, dtype=np.float32).reshape(4, 5)), tf.ones((4, 5))
    z = op(x, y)
    assert len(calls) == 1
    x_pointer, y_pointer, z_pointer = calls[0]
    assert (x_pointer, y_pointer) == (address(x), address(y))  # read in place
    assert z_pointer % 64 == 0 and address(z) == z_pointer  # the tensor is what C++ wrote
    assert type(z) is type(x) and z.dtype == tf.float32 and z.shape == (4, 5)
    assert z.device.endswith("CPU:0")
    np.testing.assert_array_equal(z.numpy(), 2 * x.numpy() + 1)
    np.testing.assert_array_equal(tf.matmul(z, z, transpose_b=True).numpy(),
                                  z.numpy() @ z.numpy().T)


@pytest.mark.parametrize("case", ["numpy input", "variable", "gradient tape",
                                  "tf.function", "another shape"])
def test_other_calls_take_the_python_path(spied, case):
    op, calls = spied
    x = np.full((4, 5), 2.0, np.float32)
    if case == "numpy input":
        z = op(x, x)
    elif case == "variable":
        z = op(tf.Variable(x), tf.constant(x))
    elif case == "gradient tape":
        with tf.GradientTape():
            z = op(tf.constant(x), tf.constant(x))
    elif case == "tf.function":
        z = tf.function(lambda a: op(a, a))(tf.constant(x))
    else:
        with pytest.raises(d5.ShapeError, match="expected tensordesc"):
            op(tf.ones((5, 4)), tf.ones((5, 4)))
        assert not calls
        return
    assert not calls, "the glue ran C++ for a call it must leave to the Python path"
    np.testing.assert_array_equal(np.asarray(z), np.full((4, 5), 6.0, np.float32))


def test_cpp_error_is_raised_from_the_glue(spied):
    op, calls = spied
    x = np.ones((4, 5), np.float32)
    x.flat[0] = -12345
    with pytest.raises(d5.CppOperatorError, match="scale_add.forward raised: magic value"):
        op(tf.constant(x), tf.ones((4, 5)))
    assert len(calls) == 1


def test_outputs_outlive_the_operator(scale_add, loaded):
    op = d5tf.custom_op(scale_add)
    numpy_op = weakref.ref(op.op)
    outputs = [op(tf.fill((4, 5), float(i)), tf.ones((4, 5))) for i in range(3)]
    del op
    gc.collect()
    assert numpy_op() is None, "the glue's record keeps the operator alive"
    for i, z in enumerate(outputs):
        np.testing.assert_array_equal(z.numpy(), np.full((4, 5), 2.0 * i + 1, np.float32))


def test_calls_leak_no_references(scale_add, loaded):
    op = d5tf.custom_op(scale_add)
    x, y = tf.ones((4, 5)), tf.ones((4, 5))
    watched = (op.op, x, y, True, False, None, NotImplemented)
    before = [sys.getrefcount(o) for o in watched]
    for _ in range(1000):
        op(x, y)
        op(x, np.ones((4, 5), np.float32))  # NotImplemented, then the Python path
    assert [sys.getrefcount(o) for o in watched] == before


def test_threads_get_their_own_results(scale_add, loaded):
    """The kernel runs without the GIL; four threads calling at once."""
    op = d5tf.custom_op(scale_add)
    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(50):
            x, y = rng.standard_normal((2, 4, 5)).astype(np.float32)
            z = op(tf.constant(x), tf.constant(y))
            if not np.array_equal(z.numpy(), np.float32(2) * x + y):
                failures.append(seed)
    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_glue_is_used_by_default(scale_add, loaded):
    op = d5tf.custom_op(scale_add)
    assert op._eager_glue is not None
    assert custom_ops._glue_call is glue.GLUE.get().call
    assert d5tf.custom_op(d5.CustomPythonOp(lambda x: x, None, [F32], [F32]))._eager_glue is None
