// Deep500's PyTorch glue: calls a Deep500 C++ operator (the C ABI of deep500.h,
// d500_forward/d500_backward on an array of data pointers) on torch tensors from C++,
// so that a d5pt.custom_op call does its checks, output allocation, kernel call and
// autograd recording without Python frames (see glue.py for why: after a kernel
// that streams more than the last-level cache, each Python-level torch call costs ~10 µs).
//
// Built once per PyTorch installation (glue.py), like the TensorFlow kernel. The
// operator's library is the same one the reference and TensorFlow bridges call.
//
// Python API (module d500_torch_glue):
//   make_operator(forward, backward, last_error, handle, name, error_type, owner,
//                 inputs, outputs, differentiable) -> capsule
//       forward/backward/last_error: addresses of d500_forward, d500_backward (0: no
//       backward) and d500_last_error; handle: the operator instance; inputs/outputs:
//       lists of (torch.dtype, shape tuple); differentiable: one bool per input; owner:
//       kept alive as long as the capsule or any autograd node using it (it owns handle).
//   call(module, inputs) -> tensor | tuple | NotImplemented
//       module: the PyTorchCppOp, whose __dict__ holds the capsule under "_d500_glue"
//       and nn.Module's hook dictionaries. NotImplemented means "take the Python path":
//       a hook, tracing, functorch, a tensor that is not a plain contiguous CPU tensor
//       of the declared dtype and shape (the Python path copies or explains), or an
//       operator without C++ backward asked to record a gradient.
//   configure(global_hooks, parameter_type)
//       nn.Module's four module-global hook dicts (a tuple) and torch.nn.Parameter.
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>

#include <ATen/EmptyTensor.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using CallFn = int32_t (*)(void*, void* const*);
using LastErrorFn = const char* (*)();

constexpr int kMaxPointers = 64;
// As custom_ops.SECOND_ORDER_ERROR.
constexpr const char* kSecondOrderError =
    "trying to differentiate twice a function that was marked with @once_differentiable "
    "(Deep500 C++ operators are differentiable once)";  // inputs + outputs (forward), 2x more (backward)

// --------------------------------------------------------------------------------------
// Output memory: malloc, as NumPy's buffers (which the Python path used), not c10's
// posix_memalign. glibc's adaptive mmap threshold never admits a 16 MiB posix_memalign
// to the heap, so every such tensor is fresh mmap memory (~400 page faults per 16 MiB,
// measured); malloc'ed buffers are reused from the heap once freed. Buffers of 4 MiB and
// more are advised to use transparent huge pages, as NumPy does.
struct HeapAllocator final : c10::Allocator {
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kHugePageAdviceBytes = size_t(4) << 20;

  static void release(void* context) { std::free(context); }

  c10::DataPtr allocate(size_t bytes) override {
    void* raw = std::malloc(bytes + kAlignment);
    if (raw == nullptr) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, "Deep500 PyTorch glue: could not allocate ",
                       bytes, " bytes");
    }
    auto address = reinterpret_cast<uintptr_t>(raw);
    void* data = reinterpret_cast<void*>((address + kAlignment - 1) & ~(kAlignment - 1));
    if (bytes >= kHugePageAdviceBytes) {
      const uintptr_t page = 4096;
      uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) & ~(page - 1);
      uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(page - 1);
      if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
    }
    return {data, raw, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* destination, const void* source, size_t count) const override {
    std::memcpy(destination, source, count);
  }
};

HeapAllocator heap_allocator;

at::Tensor new_tensor(const std::vector<int64_t>& shape, at::ScalarType dtype) {
  return at::detail::empty_generic(shape, &heap_allocator,
                                   c10::DispatchKeySet(c10::DispatchKey::CPU), dtype,
                                   std::nullopt);
}

at::Tensor new_zeros(const std::vector<int64_t>& shape, at::ScalarType dtype) {
  at::Tensor tensor = new_tensor(shape, dtype);
  std::memset(tensor.data_ptr(), 0, tensor.nbytes());
  return tensor;
}

// --------------------------------------------------------------------------------------
struct TensorSpec {
  std::vector<int64_t> shape;
  at::ScalarType dtype;
};

// One operator instance as seen from C++. Reference counted: the capsule in the module
// holds one reference, each autograd node recorded with it another.
struct Operator : torch::CustomClassHolder {
  CallFn forward = nullptr;
  CallFn backward = nullptr;
  LastErrorFn last_error = nullptr;
  void* handle = nullptr;
  std::string name;
  PyObject* error_type = nullptr;  // owned
  PyObject* owner = nullptr;       // owned: keeps `handle` alive
  std::vector<TensorSpec> inputs, outputs;
  std::vector<bool> differentiable;  // per input
  std::vector<int64_t> integer_outputs;

  ~Operator() override {
    if (Py_IsInitialized()) {
      pybind11::gil_scoped_acquire gil;
      Py_XDECREF(error_type);
      Py_XDECREF(owner);
    }
  }

  // Raises error_type("<name>.<method> raised: <message>") as a Python exception,
  // thrown as torch::python_error so that it crosses C++ frames and threads.
  [[noreturn]] void raise(const char* method) const {
    pybind11::gil_scoped_acquire gil;
    const char* message = last_error();
    std::string text = name + "." + method + " raised: " +
                       ((message != nullptr && *message != 0) ? message : "(no message)");
    PyObject* value = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()),
                                           "replace");
    if (value != nullptr) {
      PyErr_SetObject(error_type, value);
      Py_DECREF(value);
    }
    python_error error;
    error.persist();
    throw error;
  }

  std::vector<at::Tensor> run_forward(const at::Tensor* given) const {
    std::vector<at::Tensor> results;
    results.reserve(outputs.size());
    for (const auto& spec : outputs) results.push_back(new_tensor(spec.shape, spec.dtype));
    void* pointers[kMaxPointers];
    size_t count = 0;
    for (size_t i = 0; i < inputs.size(); ++i) pointers[count++] = given[i].data_ptr();
    for (auto& result : results) pointers[count++] = result.data_ptr();
    int32_t status;
    {
      // As a ctypes call does: other Python threads run while the kernel does.
      pybind11::gil_scoped_release no_gil;
      status = forward(handle, pointers);
    }
    if (status != 0) raise("forward");
    return results;
  }
};

Operator* unpack(PyObject* capsule) {
  return static_cast<Operator*>(PyCapsule_GetPointer(capsule, "d500_torch_glue.Operator"));
}

// --------------------------------------------------------------------------------------
// Autograd: forward and backward of one call (the Python path's CustomOpFunction).
struct CustomOpFunction : torch::autograd::Function<CustomOpFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList inputs,
                                                c10::intrusive_ptr<Operator> op) {
    std::vector<at::Tensor> outputs = op->run_forward(inputs.data());
    ctx->set_materialize_grads(false);  // unused outputs: zeros made in backward
    std::vector<at::Tensor> saved(inputs.begin(), inputs.end());
    saved.insert(saved.end(), outputs.begin(), outputs.end());
    ctx->save_for_backward(std::move(saved));
    if (!op->integer_outputs.empty()) {
      std::vector<at::Tensor> integer;
      for (int64_t index : op->integer_outputs) integer.push_back(outputs[index]);
      ctx->mark_non_differentiable(integer);
    }
    ctx->saved_data["op"] = c10::IValue::make_capsule(op);
    return outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto op = c10::static_intrusive_pointer_cast<Operator>(ctx->saved_data["op"].toCapsule());
    const size_t num_inputs = op->inputs.size(), num_outputs = op->outputs.size();
    std::vector<at::Tensor> saved = ctx->get_saved_variables();
    std::vector<at::Tensor> dense(num_outputs), input_grads(num_inputs);
    bool record = c10::GradMode::is_enabled();
    bool upstream_requires_grad = false;  // or a saved input: see below
    for (size_t j = 0; j < num_outputs; ++j) {
      const TensorSpec& spec = op->outputs[j];
      if (!grads[j].defined()) {
        dense[j] = new_zeros(spec.shape, spec.dtype);
      } else {
        upstream_requires_grad |= grads[j].requires_grad();
        // Upstream gradients are often broadcast views (stride 0): C++ needs dense.
        dense[j] = grads[j].to(spec.dtype).contiguous();
      }
    }
    for (size_t i = 0; i < num_inputs; ++i) {
      input_grads[i] = new_zeros(op->inputs[i].shape, op->inputs[i].dtype);
    }
    void* pointers[2 * kMaxPointers];
    size_t count = 0;
    for (auto& grad : dense) pointers[count++] = grad.data_ptr();
    for (auto& tensor : saved) pointers[count++] = tensor.data_ptr();
    for (size_t i = 0; i < num_inputs; ++i) upstream_requires_grad |= saved[i].requires_grad();
    for (auto& grad : input_grads) pointers[count++] = grad.data_ptr();
    if (op->backward(op->handle, pointers) != 0) op->raise("backward");
    torch::autograd::variable_list result(num_inputs);
    for (size_t i = 0; i < num_inputs; ++i) {
      if (op->differentiable[i]) result[i] = input_grads[i];
    }
    if (record && upstream_requires_grad) {
      // The C++ backward is not differentiable itself: a second backward through it
      // must fail, not silently miss a term (custom_ops._refuse_second_order).
      std::vector<at::Tensor> defined;
      std::vector<size_t> where;
      for (size_t i = 0; i < result.size(); ++i) {
        if (!result[i].defined()) continue;
        // DelayedError gives a grad_fn only to outputs of inputs that require grad.
        at::Tensor alias = result[i].detach();
        alias.set_requires_grad(true);
        defined.push_back(alias);
        where.push_back(i);
      }
      auto error = std::make_shared<torch::autograd::DelayedError>(
          kSecondOrderError,
          static_cast<int64_t>(defined.size()));
      auto wrapped = error->apply(std::move(defined));
      for (size_t k = 0; k < where.size(); ++k) result[where[k]] = wrapped[k];
    }
    result.emplace_back();  // for forward's operator argument
    return result;
  }
};

// --------------------------------------------------------------------------------------
PyObject* global_hooks = nullptr;  // tuple of nn.Module's four global hook dicts
PyTypeObject* parameter_type = nullptr;  // torch.nn.Parameter
PyObject* key_glue = nullptr;
PyObject* key_hooks[4] = {nullptr, nullptr, nullptr, nullptr};
PyObject* key_compiled = nullptr;

bool truthy_dict(PyObject* dict) { return dict != nullptr && PyDict_Check(dict) && PyDict_GET_SIZE(dict) > 0; }

// True when nn.Module.__call__ would do more than call forward: a hook registered on
// this module or globally, or a compiled call.
bool module_needs_standard_call(PyObject* dict) {
  for (PyObject* key : key_hooks) {
    PyObject* hooks = PyDict_GetItemWithError(dict, key);  // borrowed
    if (hooks == nullptr || !PyDict_Check(hooks) || PyDict_GET_SIZE(hooks) > 0) return true;
  }
  PyObject* compiled = PyDict_GetItemWithError(dict, key_compiled);
  if (compiled != nullptr && compiled != Py_None) return true;
  if (global_hooks == nullptr) return true;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(global_hooks); ++i) {
    PyObject* hooks = PyTuple_GET_ITEM(global_hooks, i);
    if (!PyDict_Check(hooks) || PyDict_GET_SIZE(hooks) > 0) return true;
  }
  return false;
}

// A functorch transform (grad, vmap, ...) is active: it includes its dispatch key in the
// thread's set while its layer is on the stack (what _are_functorch_transforms_active
// reports); torch.autograd.Function's Python apply says what functorch needs.
bool functorch_active() {
  return c10::impl::tls_local_dispatch_key_set().included_.has(
      c10::DispatchKey::FuncTorchDynamicLayerFrontMode);
}

PyObject* not_implemented() { Py_RETURN_NOTIMPLEMENTED; }

PyObject* wrap_outputs(std::vector<at::Tensor>&& outputs) {
  if (outputs.size() == 1) return THPVariable_Wrap(std::move(outputs[0]));
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(outputs.size()));
  if (tuple == nullptr) return nullptr;
  for (size_t i = 0; i < outputs.size(); ++i) {
    PyObject* item = THPVariable_Wrap(std::move(outputs[i]));
    if (item == nullptr) { Py_DECREF(tuple); return nullptr; }
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), item);
  }
  return tuple;
}

PyObject* call(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 2 || !PyTuple_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "call(module, inputs: tuple)");
    return nullptr;
  }
  PyObject* dict = PyObject_GenericGetDict(args[0], nullptr);
  if (dict == nullptr) return nullptr;
  PyObject* capsule = PyDict_GetItemWithError(dict, key_glue);  // borrowed
  bool standard = capsule == nullptr || module_needs_standard_call(dict);
  Py_DECREF(dict);  // the module keeps it
  if (PyErr_Occurred()) return nullptr;
  if (standard) return not_implemented();
  Operator* op = unpack(capsule);
  if (op == nullptr) return nullptr;

  PyObject* given = args[1];
  const Py_ssize_t count = PyTuple_GET_SIZE(given);
  if (count != static_cast<Py_ssize_t>(op->inputs.size())) return not_implemented();
  if (torch::jit::tracer::isTracing()) return not_implemented();
  at::Tensor inputs[kMaxPointers];
  bool requires_grad = false;
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* item = PyTuple_GET_ITEM(given, i);
    // Plain tensors and parameters only: a subclass may override __torch_function__.
    PyTypeObject* type = Py_TYPE(item);
    if (!THPVariable_CheckTypeExact(type) && type != parameter_type) return not_implemented();
    const at::Tensor& tensor = THPVariable_Unpack(item);
    const TensorSpec& spec = op->inputs[i];
    if (tensor.scalar_type() != spec.dtype || tensor.layout() != c10::kStrided ||
        !tensor.device().is_cpu() || tensor.sizes() != c10::IntArrayRef(spec.shape) ||
        !tensor.is_contiguous() || !tensor.has_storage()) {
      return not_implemented();
    }
    requires_grad |= tensor.requires_grad();
    inputs[i] = tensor;
  }
  std::vector<at::Tensor> outputs;
  if (requires_grad && c10::GradMode::is_enabled()) {
    if (op->backward == nullptr || functorch_active()) {
      return not_implemented();  // the Python path explains, or lets functorch see it
    }
    outputs = CustomOpFunction::apply(at::TensorList(inputs, count),
                                      c10::intrusive_ptr<Operator>::reclaim_copy(op));
  } else {
    outputs = op->run_forward(inputs);
  }
  return wrap_outputs(std::move(outputs));
  END_HANDLE_TH_ERRORS
}

bool read_specs(PyObject* list, std::vector<TensorSpec>& specs) {
  if (!PyList_Check(list)) {
    PyErr_SetString(PyExc_TypeError, "expected a list of (torch.dtype, shape) pairs");
    return false;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); ++i) {
    PyObject* pair = PyList_GET_ITEM(list, i);
    PyObject* dtype = nullptr;
    PyObject* shape = nullptr;
    if (!PyArg_ParseTuple(pair, "OO!", &dtype, &PyTuple_Type, &shape)) return false;
    if (!THPDtype_Check(dtype)) {
      PyErr_SetString(PyExc_TypeError, "expected a torch.dtype");
      return false;
    }
    TensorSpec spec;
    spec.dtype = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
    for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(shape); ++d) {
      int64_t size = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
      if (size == -1 && PyErr_Occurred()) return false;
      spec.shape.push_back(size);
    }
    specs.push_back(std::move(spec));
  }
  return true;
}

void release_capsule(PyObject* capsule) {
  Operator* op = unpack(capsule);
  if (op != nullptr) c10::intrusive_ptr<Operator>::reclaim(op);  // drops the reference
}

PyObject* make_operator(PyObject* /*self*/, PyObject* args) {
  HANDLE_TH_ERRORS
  unsigned long long forward, backward, last_error, handle;
  const char* name;
  PyObject *error_type, *owner, *inputs, *outputs, *differentiable;
  if (!PyArg_ParseTuple(args, "KKKKsOOOOO", &forward, &backward, &last_error, &handle,
                        &name, &error_type, &owner, &inputs, &outputs, &differentiable)) {
    return nullptr;
  }
  auto op = c10::make_intrusive<Operator>();
  op->forward = reinterpret_cast<CallFn>(forward);
  op->backward = reinterpret_cast<CallFn>(backward);
  op->last_error = reinterpret_cast<LastErrorFn>(last_error);
  op->handle = reinterpret_cast<void*>(handle);
  op->name = name;
  Py_INCREF(error_type);
  op->error_type = error_type;
  Py_INCREF(owner);
  op->owner = owner;
  if (!read_specs(inputs, op->inputs) || !read_specs(outputs, op->outputs)) return nullptr;
  if (op->inputs.size() + op->outputs.size() > kMaxPointers) {
    PyErr_SetString(PyExc_ValueError, "too many tensors for the glue");
    return nullptr;
  }
  if (!PyList_Check(differentiable) ||
      PyList_GET_SIZE(differentiable) != static_cast<Py_ssize_t>(op->inputs.size())) {
    PyErr_SetString(PyExc_TypeError, "differentiable: one bool per input");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(differentiable); ++i) {
    op->differentiable.push_back(PyObject_IsTrue(PyList_GET_ITEM(differentiable, i)) == 1);
  }
  for (size_t j = 0; j < op->outputs.size(); ++j) {
    if (!c10::isFloatingType(op->outputs[j].dtype)) op->integer_outputs.push_back(j);
  }
  return PyCapsule_New(op.release(), "d500_torch_glue.Operator", &release_capsule);
  END_HANDLE_TH_ERRORS
}

PyObject* configure(PyObject* /*self*/, PyObject* args) {
  PyObject *hooks, *parameter;
  if (!PyArg_ParseTuple(args, "O!O!", &PyTuple_Type, &hooks, &PyType_Type, &parameter)) {
    return nullptr;
  }
  Py_INCREF(hooks);
  Py_XSETREF(global_hooks, hooks);
  Py_INCREF(parameter);
  Py_XSETREF(parameter_type, reinterpret_cast<PyTypeObject*>(parameter));
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(call)), METH_FASTCALL,
     "call(module, inputs) -> outputs, or NotImplemented for the Python path"},
    {"make_operator", make_operator, METH_VARARGS, "make_operator(...) -> capsule"},
    {"configure", configure, METH_VARARGS,
     "configure(global hook dicts: tuple, torch.nn.Parameter)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_definition = {PyModuleDef_HEAD_INIT, "d500_torch_glue",
                                 "Deep500's PyTorch glue for C++ operators", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_d500_torch_glue() {
  key_glue = PyUnicode_InternFromString("_d500_glue");
  const char* names[4] = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                          "_backward_pre_hooks"};
  for (int i = 0; i < 4; ++i) key_hooks[i] = PyUnicode_InternFromString(names[i]);
  key_compiled = PyUnicode_InternFromString("_compiled_call_impl");
  return PyModule_Create(&module_definition);
}
