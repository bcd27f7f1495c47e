// Deep500's TensorFlow eager glue: calls a Deep500 C++ operator (the C ABI of deep500.h,
// d500_forward on an array of data pointers) on eager tensors from C++, so that an eager
// d5tf.custom_op call does its checks, output allocation and kernel call without
// Python frames (see glue.py for why: after a kernel that streams more than the
// last-level cache, each Python-level call costs ~10 µs).
//
// Built once per TensorFlow installation (glue.py) against TensorFlow's C API and
// the EagerTensor functions its Python extension exports. The operator's library is the
// same one the reference and PyTorch bridges and the graph kernel (d500_tf_op.cc) call.
//
// Python API (module d500_tf_eager_glue):
//   make_operator(forward, handle, owner, inputs, outputs) -> capsule
//       forward: the address of d500_forward; handle: the operator instance; owner: kept
//       alive as long as the capsule (it owns handle); inputs/outputs: lists of
//       (TF_DataType number, shape tuple).
//   call(capsule, inputs) -> tensor | tuple | None | NotImplemented
//       inputs: a tuple. The outputs are new CPU EagerTensors on memory this glue
//       allocated. None: d500_forward returned nonzero (the caller raises the operator's
//       thread-local error). NotImplemented: take the Python path, which handles or
//       explains everything else: not executing eagerly (tf.function tracing), a
//       gradient tape recording, an input that is not an EagerTensor of the declared
//       dtype and shape in host memory.
#include <Python.h>

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tensorflow/c/c_api.h"
#include "tensorflow/c/eager/c_api.h"
#include "tensorflow/c/eager/c_api_experimental.h"
#include "tensorflow/python/eager/pywrap_tfe.h"

// Exported by TensorFlow's Python extension (pywrap_tensor.h, whose NumPy includes this
// file does not need).
bool EagerTensor_CheckExact(const PyObject* o);
TFE_TensorHandle* EagerTensor_Handle(const PyObject* o);

namespace {

using ForwardFn = int32_t (*)(void*, void* const*);

constexpr int kMaxPointers = 64;

struct TensorSpec {
  TF_DataType dtype;
  std::vector<int64_t> shape;
  size_t bytes;
};

struct Operator {
  ForwardFn forward = nullptr;
  void* handle = nullptr;
  PyObject* owner = nullptr;  // owned: keeps `handle` alive
  std::vector<TensorSpec> inputs, outputs;
};

Operator* unpack(PyObject* capsule) {
  return static_cast<Operator*>(PyCapsule_GetPointer(capsule, "d500_tf_eager_glue.Operator"));
}

// One TF_Status per thread, reused: TF_NewStatus allocates.
TF_Status* thread_status() {
  thread_local TF_Status* status = TF_NewStatus();
  return status;
}

// --------------------------------------------------------------------------------------
// Output memory: malloc (reused from the heap once freed, as NumPy's buffers), 64-byte
// aligned as Eigen requires, ≥4 MiB advised to use transparent huge pages as NumPy does.
// TensorFlow's own CPU allocator (posix_memalign) gets fresh mmap memory for every large
// tensor under glibc's adaptive threshold: hundreds of page faults per 16 MiB.
constexpr size_t kAlignment = 64;
constexpr size_t kHugePageAdviceBytes = size_t(4) << 20;

void release(void* /*data*/, size_t /*bytes*/, void* raw) { std::free(raw); }

TF_Tensor* new_output(const TensorSpec& spec) {
  void* raw = std::malloc(spec.bytes + kAlignment);
  if (raw == nullptr) return nullptr;
  auto address = reinterpret_cast<uintptr_t>(raw);
  void* data = reinterpret_cast<void*>((address + kAlignment - 1) & ~(kAlignment - 1));
  if (spec.bytes >= kHugePageAdviceBytes) {
    const uintptr_t page = 4096;
    uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) & ~(page - 1);
    uintptr_t end = (reinterpret_cast<uintptr_t>(data) + spec.bytes) & ~(page - 1);
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  }
  TF_Tensor* tensor = TF_NewTensor(spec.dtype, spec.shape.data(),
                                   static_cast<int>(spec.shape.size()), data, spec.bytes,
                                   &release, raw);
  if (tensor == nullptr) std::free(raw);
  return tensor;
}

// --------------------------------------------------------------------------------------
// As tf.executing_eagerly() and record.could_possibly_record(), without Python frames.
// -1: a Python error is set.
int eager_and_not_recording() {
  PyObject* context = GetPyEagerContext();  // new reference
  if (context == nullptr) {
    PyErr_Clear();  // no context yet: the Python path creates it
    return 0;
  }
  tensorflow::EagerContextThreadLocalData* local =
      tensorflow::GetEagerContextThreadLocalData(context);
  Py_DECREF(context);  // TensorFlow's module keeps it
  if (local == nullptr) return -1;
  if (!local->is_eager) return 0;
  PyObject* empty = TFE_Py_TapeSetIsEmpty();  // new reference to a bool
  if (empty == nullptr) return -1;
  bool recording = empty != Py_True;
  Py_DECREF(empty);
  return recording ? 0 : 1;
}

// The host memory of an EagerTensor matching `spec`; nullptr when the Python path must
// take it (not an EagerTensor, another dtype or shape, device memory).
void* host_data(PyObject* item, const TensorSpec& spec, TF_Status* status) {
  if (!EagerTensor_CheckExact(item)) return nullptr;
  TFE_TensorHandle* handle = EagerTensor_Handle(item);
  if (handle == nullptr || TFE_TensorHandleDataType(handle) != spec.dtype) return nullptr;
  int dims = TFE_TensorHandleNumDims(handle, status);
  if (TF_GetCode(status) != TF_OK || dims != static_cast<int>(spec.shape.size())) {
    return nullptr;
  }
  for (int d = 0; d < dims; ++d) {
    if (TFE_TensorHandleDim(handle, d, status) != spec.shape[d] || TF_GetCode(status) != TF_OK) {
      return nullptr;
    }
  }
  const char* device = TFE_TensorHandleBackingDeviceName(handle, status);
  if (TF_GetCode(status) != TF_OK || device == nullptr ||
      std::strstr(device, "device:CPU:") == nullptr) {
    return nullptr;
  }
  void* data = TFE_TensorHandleDevicePointer(handle, status);
  if (TF_GetCode(status) != TF_OK) return nullptr;
  return data;
}

// A new EagerTensor owning `tensor`'s buffer (TF_Tensor released here), or nullptr
// with a Python error set.
PyObject* eager_tensor(TF_Tensor* tensor, TF_Status* status) {
  TFE_TensorHandle* handle = TFE_NewTensorHandle(tensor, status);
  TF_DeleteTensor(tensor);  // the handle holds its own reference to the buffer
  if (TF_GetCode(status) != TF_OK) {
    PyErr_Format(PyExc_RuntimeError, "Deep500 TensorFlow eager glue: %s", TF_Message(status));
    return nullptr;
  }
  return EagerTensorFromHandle(handle);  // takes the handle
}

PyObject* not_implemented() { Py_RETURN_NOTIMPLEMENTED; }

PyObject* call(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyTuple_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "call(capsule, inputs: tuple)");
    return nullptr;
  }
  Operator* op = unpack(args[0]);
  if (op == nullptr) return nullptr;
  PyObject* given = args[1];
  const Py_ssize_t count = PyTuple_GET_SIZE(given);
  if (count != static_cast<Py_ssize_t>(op->inputs.size())) return not_implemented();
  int eager = eager_and_not_recording();
  if (eager < 0) return nullptr;
  if (eager == 0) return not_implemented();

  TF_Status* status = thread_status();
  void* pointers[kMaxPointers];
  for (Py_ssize_t i = 0; i < count; ++i) {
    pointers[i] = host_data(PyTuple_GET_ITEM(given, i), op->inputs[i], status);
    if (pointers[i] == nullptr) return not_implemented();
  }
  const size_t num_outputs = op->outputs.size();
  TF_Tensor* outputs[kMaxPointers];
  for (size_t j = 0; j < num_outputs; ++j) {
    outputs[j] = new_output(op->outputs[j]);
    if (outputs[j] == nullptr) {
      for (size_t k = 0; k < j; ++k) TF_DeleteTensor(outputs[k]);
      return PyErr_NoMemory();
    }
    pointers[count + j] = TF_TensorData(outputs[j]);
  }
  int32_t result;
  Py_BEGIN_ALLOW_THREADS  // as a ctypes call does: other Python threads run meanwhile
  result = op->forward(op->handle, pointers);
  Py_END_ALLOW_THREADS
  if (result != 0) {
    for (size_t j = 0; j < num_outputs; ++j) TF_DeleteTensor(outputs[j]);
    Py_RETURN_NONE;
  }
  if (num_outputs == 1) return eager_tensor(outputs[0], status);
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(num_outputs));
  for (size_t j = 0; j < num_outputs; ++j) {
    PyObject* item = tuple == nullptr ? nullptr : eager_tensor(outputs[j], status);
    if (item == nullptr) {
      for (size_t k = tuple == nullptr ? j : j + 1; k < num_outputs; ++k) {
        TF_DeleteTensor(outputs[k]);
      }
      Py_XDECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(j), item);
  }
  return tuple;
}

// --------------------------------------------------------------------------------------
bool read_specs(PyObject* list, std::vector<TensorSpec>& specs) {
  if (!PyList_Check(list)) {
    PyErr_SetString(PyExc_TypeError, "expected a list of (TF_DataType, shape) pairs");
    return false;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); ++i) {
    int dtype;
    PyObject* shape = nullptr;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(list, i), "iO!", &dtype, &PyTuple_Type, &shape)) {
      return false;
    }
    TensorSpec spec;
    spec.dtype = static_cast<TF_DataType>(dtype);
    size_t elements = 1;
    for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(shape); ++d) {
      int64_t size = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
      if (size == -1 && PyErr_Occurred()) return false;
      if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "shapes must be fully known");
        return false;
      }
      spec.shape.push_back(size);
      elements *= static_cast<size_t>(size);
    }
    size_t item = TF_DataTypeSize(spec.dtype);
    if (item == 0) {
      PyErr_Format(PyExc_ValueError, "TF_DataType %d has no fixed size", dtype);
      return false;
    }
    spec.bytes = elements * item;
    specs.push_back(std::move(spec));
  }
  return true;
}

void release_capsule(PyObject* capsule) {
  Operator* op = unpack(capsule);
  if (op == nullptr) return;
  Py_XDECREF(op->owner);
  delete op;
}

PyObject* make_operator(PyObject* /*self*/, PyObject* args) {
  unsigned long long forward, handle;
  PyObject *owner, *inputs, *outputs;
  if (!PyArg_ParseTuple(args, "KKOOO", &forward, &handle, &owner, &inputs, &outputs)) {
    return nullptr;
  }
  auto* op = new Operator;
  op->forward = reinterpret_cast<ForwardFn>(forward);
  op->handle = reinterpret_cast<void*>(handle);
  if (!read_specs(inputs, op->inputs) || !read_specs(outputs, op->outputs)) {
    delete op;
    return nullptr;
  }
  if (op->inputs.size() + op->outputs.size() > kMaxPointers) {
    delete op;
    PyErr_SetString(PyExc_ValueError, "too many tensors for the glue");
    return nullptr;
  }
  Py_INCREF(owner);
  op->owner = owner;
  PyObject* capsule = PyCapsule_New(op, "d500_tf_eager_glue.Operator", &release_capsule);
  if (capsule == nullptr) {
    Py_DECREF(owner);
    delete op;
  }
  return capsule;
}

PyMethodDef methods[] = {
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(call)), METH_FASTCALL,
     "call(capsule, inputs) -> outputs, None (forward failed) or NotImplemented"},
    {"make_operator", make_operator, METH_VARARGS, "make_operator(...) -> capsule"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_definition = {PyModuleDef_HEAD_INIT, "d500_tf_eager_glue",
                                 "Deep500's TensorFlow eager glue for C++ operators", -1,
                                 methods};

}  // namespace

PyMODINIT_FUNC PyInit_d500_tf_eager_glue() { return PyModule_Create(&module_definition); }
