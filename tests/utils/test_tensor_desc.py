"""TensorDescriptor: NumPy / PyTorch / TensorFlow conversions, validation, and the C
``tensor_t`` struct, checked against a C library compiled with the system compiler."""
import ctypes
import dataclasses
import shutil
import subprocess
import textwrap

import numpy as np
import pytest

import deep500 as d5
from deep500.utils.errors import ShapeError, UnsupportedError
from deep500.utils.tensor_desc import (DTYPE_CODES, DTYPES_BY_CODE, MAX_DIMS,
                                       TensorDescriptor, tensor_t, tensordesc)

DTYPES = ["float32", "float64", "int32", "int64"]
EXPECTED_CODES = {"float32": 0, "float64": 1, "int32": 2, "int64": 3, "float16": 4,
                  "uint8": 5, "int8": 6, "bool": 7}


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def tf():
    return pytest.importorskip("tensorflow")


def test_public_names():
    assert d5.TensorDescriptor is TensorDescriptor is tensordesc
    assert d5.tensordesc is tensordesc and d5.tensor_t is tensor_t


def test_dtype_codes_are_stable():
    # Shared with C++: append only, never renumber.
    assert {str(k): v for k, v in DTYPE_CODES.items()} == EXPECTED_CODES
    assert all(DTYPES_BY_CODE[code] == dtype for dtype, code in DTYPE_CODES.items())


# -- NumPy -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", DTYPES)
def test_numpy_round_trip(name):
    array = np.zeros((2, 3, 5), dtype=name)
    desc = TensorDescriptor.from_numpy(array)
    assert desc.dtype == np.dtype(name) and isinstance(desc.dtype, np.dtype)
    assert desc.shape == (2, 3, 5) and desc.layout is None
    assert desc == TensorDescriptor(name, [2, 3, 5]) == TensorDescriptor(np.dtype(name), (2, 3, 5))
    empty = desc.empty()
    assert empty.dtype == np.dtype(name) and empty.shape == (2, 3, 5)
    assert desc.matches(array)
    assert not desc.matches(array.astype(np.float16))
    assert not desc.matches(array.reshape(6, 5))
    assert desc.ndim == 3 and desc.size == 30
    assert desc.nbytes == 30 * np.dtype(name).itemsize


def test_sizes_of_scalars_and_empty_tensors():
    scalar = TensorDescriptor(np.float64, ())
    assert scalar.ndim == 0 and scalar.size == 1 and scalar.nbytes == 8
    empty = TensorDescriptor(np.int32, (4, 0, 3))
    assert empty.size == 0 and empty.nbytes == 0


# -- PyTorch ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", DTYPES)
def test_torch_conversions(torch, name):
    torch_dtype = getattr(torch, name)
    desc = TensorDescriptor(torch_dtype, (4, 2))
    assert desc.dtype == np.dtype(name)
    assert desc.torch_dtype() == torch_dtype
    tensor = torch.zeros((4, 2), dtype=torch_dtype)
    from_tensor = TensorDescriptor.from_torch(tensor, layout="NC")
    assert from_tensor.dtype == np.dtype(name) and from_tensor.shape == (4, 2)
    assert from_tensor.layout == "NC"
    assert desc.matches(tensor)
    assert not desc.matches(tensor.T)
    # NumPy and PyTorch views of the same data describe the same tensor.
    assert TensorDescriptor.from_numpy(tensor.numpy()) == TensorDescriptor.from_torch(tensor)


def test_torch_dtype_without_numpy_counterpart(torch):
    with pytest.raises(UnsupportedError, match="bfloat16"):
        TensorDescriptor(torch.bfloat16, (2,))


# -- TensorFlow ------------------------------------------------------------------------
@pytest.mark.parametrize("name", DTYPES)
def test_tensorflow_conversions(tf, name):
    tf_dtype = getattr(tf, name)
    desc = TensorDescriptor(tf_dtype, (3, 1, 2))
    assert desc.dtype == np.dtype(name)
    assert desc.tf_dtype() == tf_dtype
    tensor = tf.zeros((3, 1, 2), dtype=tf_dtype)
    from_tensor = TensorDescriptor.from_tf(tensor)
    assert from_tensor == desc
    assert all(isinstance(s, int) for s in from_tensor.shape)
    assert desc.matches(tensor)
    assert not desc.matches(tf.zeros((3, 2), dtype=tf_dtype))
    assert TensorDescriptor.from_numpy(tensor.numpy()) == from_tensor


# -- validation ------------------------------------------------------------------------
def test_layout_must_name_every_axis():
    desc = TensorDescriptor(np.float32, (1, 3, 8, 8), "NCHW")
    assert desc.layout == "NCHW"
    assert str(desc) == "tensordesc(float32, [1, 3, 8, 8], layout=NCHW)"
    assert desc.to_dict() == {"dtype": "float32", "shape": [1, 3, 8, 8], "layout": "NCHW"}
    with pytest.raises(ShapeError, match="'NCH' names 3 axes"):
        TensorDescriptor(np.float32, (1, 3, 8, 8), "NCH")
    with pytest.raises(ShapeError):
        TensorDescriptor(np.float32, (1, 3), "NCHW")
    # Layouts distinguish otherwise equal descriptors.
    assert desc != TensorDescriptor(np.float32, (1, 3, 8, 8), "NHWC")
    assert desc != TensorDescriptor(np.float32, (1, 3, 8, 8))


def test_negative_extent_raises():
    with pytest.raises(ShapeError, match="negative"):
        TensorDescriptor(np.float32, (2, -1))


def test_unknown_dtype_raises():
    with pytest.raises(UnsupportedError, match="Unknown dtype 'notadtype'"):
        TensorDescriptor("notadtype", (2,))


def test_descriptor_is_immutable_and_hashable():
    desc = TensorDescriptor(np.float32, (2, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        desc.shape = (3,)
    assert len({desc, TensorDescriptor("float32", [2, 2]), TensorDescriptor(np.int32, (2, 2))}) == 2


def test_check_passes_and_raises_shape_error():
    desc = TensorDescriptor(np.float32, (2, 3))
    desc.check(np.zeros((2, 3), np.float32), "input 0")  # no error
    with pytest.raises(ShapeError) as info:
        desc.check(np.zeros((3, 2), np.float32), "input 0 of Conv")
    message = str(info.value)
    assert message.startswith("input 0 of Conv:")
    assert "(3, 2)" in message and "[2, 3]" in message
    with pytest.raises(ShapeError, match="dtype float64"):
        desc.check(np.zeros((2, 3), np.float64), "input 1")


def test_check_accepts_framework_tensors(torch):
    desc = TensorDescriptor(np.float32, (2, 3))
    desc.check(torch.zeros(2, 3), "torch input")
    with pytest.raises(ShapeError, match="torch input"):
        desc.check(torch.zeros(2, 3, dtype=torch.float64), "torch input")


# -- tensor_t --------------------------------------------------------------------------
def test_tensor_t_layout():
    assert ctypes.sizeof(tensor_t) == 4 + 4 + 8 * MAX_DIMS == 72
    assert tensor_t.dtype.offset == 0 and tensor_t.dtype.size == 4
    assert tensor_t.ndim.offset == 4 and tensor_t.ndim.size == 4
    assert tensor_t.shape.offset == 8 and tensor_t.shape.size == 8 * MAX_DIMS


@pytest.mark.parametrize("name", DTYPES + ["float16", "uint8", "int8", "bool"])
@pytest.mark.parametrize("shape", [(), (7,), (2, 3, 4), (1, 2, 3, 4, 5, 6, 7, 8)])
def test_tensor_t_round_trip(name, shape):
    desc = TensorDescriptor(name, shape)
    c_desc = desc.to_tensor_t()
    assert c_desc.dtype == EXPECTED_CODES[name]
    assert c_desc.ndim == len(shape)
    assert list(c_desc.shape) == list(shape) + [0] * (MAX_DIMS - len(shape))
    assert TensorDescriptor.from_tensor_t(c_desc) == desc


def test_tensor_t_drops_layout():
    back = TensorDescriptor.from_tensor_t(TensorDescriptor(np.float32, (1, 2), "NC").to_tensor_t())
    assert back.layout is None and back.shape == (1, 2)


def test_too_many_dimensions_raise():
    desc = TensorDescriptor(np.float32, (1,) * (MAX_DIMS + 1))
    with pytest.raises(UnsupportedError, match="at most 8 dimensions"):
        desc.to_tensor_t()


@pytest.mark.parametrize("dtype", [np.complex64, np.uint16, np.uint32, np.object_])
def test_unsupported_dtype_raises(dtype):
    with pytest.raises(UnsupportedError, match="cannot be passed to C"):
        TensorDescriptor(dtype, (2,)).to_tensor_t()


def test_invalid_tensor_t_raises():
    bad_code = tensor_t()
    bad_code.dtype, bad_code.ndim = 99, 1
    with pytest.raises(UnsupportedError, match="dtype code 99"):
        TensorDescriptor.from_tensor_t(bad_code)
    for ndim in (-1, MAX_DIMS + 1):
        bad_ndim = tensor_t()
        bad_ndim.dtype, bad_ndim.ndim = 0, ndim
        with pytest.raises(UnsupportedError, match="ndim"):
            TensorDescriptor.from_tensor_t(bad_ndim)


C_SOURCE = textwrap.dedent("""
    #include <stddef.h>
    #include <stdint.h>

    /* The layout documented in deep500/utils/tensor_desc.py. */
    #define D500_MAX_DIMS 8
    typedef struct {
        int32_t dtype;
        int32_t ndim;
        int64_t shape[D500_MAX_DIMS];
    } tensor_t;

    int64_t numel(const tensor_t* t) {
        int64_t n = 1;
        for (int32_t i = 0; i < t->ndim; ++i) n *= t->shape[i];
        return n;
    }
    int32_t dtype_code(const tensor_t* t) { return t->dtype; }
    int32_t rank(const tensor_t* t) { return t->ndim; }
    int64_t extent(const tensor_t* t, int32_t axis) { return t->shape[axis]; }
    /* Passed by value: the whole struct travels in registers or on the stack. */
    int64_t numel_by_value(tensor_t t) { return numel(&t); }
    /* Sum of unused shape entries (must be 0). */
    int64_t unused_sum(const tensor_t* t) {
        int64_t s = 0;
        for (int32_t i = t->ndim; i < D500_MAX_DIMS; ++i) s += t->shape[i];
        return s;
    }
    /* Written by C, read by Python. */
    void make(tensor_t* t, int32_t dtype, int32_t ndim, const int64_t* shape) {
        t->dtype = dtype;
        t->ndim = ndim;
        for (int32_t i = 0; i < D500_MAX_DIMS; ++i) t->shape[i] = i < ndim ? shape[i] : 0;
    }
    size_t struct_size(void) { return sizeof(tensor_t); }
    size_t shape_offset(void) { return offsetof(tensor_t, shape); }
""")


@pytest.fixture(scope="module")
def c_library(tmp_path_factory):
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.fail("No C compiler (cc, gcc or clang) on PATH: the tensor_t ABI test needs "
                    "one; install gcc (apt-get install gcc)")
    directory = tmp_path_factory.mktemp("tensor_t_abi")
    source = directory / "tensor_t_abi.c"
    library = directory / "libtensor_t_abi.so"
    source.write_text(C_SOURCE)
    build = subprocess.run([compiler, "-std=c99", "-O1", "-Wall", "-Werror", "-shared", "-fPIC",
                            "-o", str(library), str(source)], capture_output=True, text=True,
                           timeout=120)
    assert build.returncode == 0, f"compiling the ABI test library failed:\n{build.stderr}"
    lib = ctypes.CDLL(str(library))
    pointer = ctypes.POINTER(tensor_t)
    signatures = {
        "numel": ([pointer], ctypes.c_int64),
        "dtype_code": ([pointer], ctypes.c_int32),
        "rank": ([pointer], ctypes.c_int32),
        "extent": ([pointer, ctypes.c_int32], ctypes.c_int64),
        "numel_by_value": ([tensor_t], ctypes.c_int64),
        "unused_sum": ([pointer], ctypes.c_int64),
        "make": ([pointer, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_int64)],
                 None),
        "struct_size": ([], ctypes.c_size_t),
        "shape_offset": ([], ctypes.c_size_t),
    }
    for name, (argtypes, restype) in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, restype
    return lib


def test_c_struct_has_the_python_layout(c_library):
    assert c_library.struct_size() == ctypes.sizeof(tensor_t)
    assert c_library.shape_offset() == tensor_t.shape.offset


@pytest.mark.parametrize("name, shape", [
    ("float32", (2, 3, 4)),
    ("float64", ()),
    ("int32", (5,)),
    ("int64", (1, 2, 3, 4, 5, 6, 7, 8)),
    ("bool", (3, 0)),
    ("float32", (3_000_000_000, 5)),  # extents beyond 32 bits
])
def test_c_reads_python_descriptors(c_library, name, shape):
    c_desc = TensorDescriptor(name, shape).to_tensor_t()
    expected_numel = int(np.prod(shape, dtype=np.int64))
    assert c_library.dtype_code(ctypes.byref(c_desc)) == EXPECTED_CODES[name]
    assert c_library.rank(ctypes.byref(c_desc)) == len(shape)
    assert c_library.numel(ctypes.byref(c_desc)) == expected_numel
    assert c_library.numel_by_value(c_desc) == expected_numel
    assert [c_library.extent(ctypes.byref(c_desc), i) for i in range(len(shape))] == list(shape)
    assert c_library.unused_sum(ctypes.byref(c_desc)) == 0


@pytest.mark.parametrize("name, shape", [("int64", (9, 8, 7)), ("uint8", ())])
def test_python_reads_c_descriptors(c_library, name, shape):
    c_desc = tensor_t()
    extents = (ctypes.c_int64 * MAX_DIMS)(*shape)
    c_library.make(ctypes.byref(c_desc), EXPECTED_CODES[name], len(shape), extents)
    assert TensorDescriptor.from_tensor_t(c_desc) == TensorDescriptor(name, shape)
