"""Custom operators in PyTorch (``d5pt.custom_op``) and PyTorch functions as Deep500
operators (``custom_op_from_native``), with checks against the reference operators
(``test_nativeop_forward``, ``test_nativeop_gradient``).

``custom_op(op)`` turns an operator written once — a C++ operator (``CppOpDescriptor``
or ``CustomCPPOp``) or a Python ``d5.CustomOp`` on NumPy arrays — into a
``torch.nn.Module`` taking torch tensors, differentiable through a
``torch.autograd.Function``:

* C++ operators are called through Deep500's PyTorch glue (``glue.py``, a C++
  extension built once per PyTorch installation): one C++ function checks the module's
  hooks and the tensors, allocates the outputs, calls the kernel with the GIL released
  and records the gradient (a C++ autograd function). 0.5 µs over a bare ctypes call
  without autograd, 2 µs with; after a kernel that evicted the caches, 15-25 µs where
  the Python path below costs 70-110 µs (``benchmarks/lv0_cppop_overhead.py``). Calls
  it does not handle (hooks, tracing, functorch, tensors it would copy or refuse) and
  every call when the glue cannot be built take the Python path, which behaves the same.
* C++ operators get the tensors' own memory (``data_ptr()``), no copies: outputs are
  allocated uninitialised (``torch.empty_like``), input gradients zero-filled (the C++
  backward may accumulate), and C++ writes into them. A non-contiguous input is made
  contiguous first, which is a copy. C++ operators take CPU tensors only.
* Count, shape and dtype are checked against the operator's descriptors before any C++
  runs; a mismatch raises ``d5.ShapeError``.
* Without an input that requires grad (or with grad mode off) the call skips
  ``autograd.Function`` entirely, so an inference call costs the checks, the output
  allocation and one ctypes call (a few microseconds above the bare ctypes call).
* Integer outputs are non-differentiable; the gradient of an unused output is zeros.
  Gradients are first order: differentiating a gradient (``create_graph=True``, then a
  second backward) raises instead of silently missing the operator's term.
* Python operators run on NumPy views of the tensors (``tensor.detach().numpy()``);
  their results become tensors with ``torch.from_numpy``.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Callable

import numpy as np

from deep500.frameworks._bridge.native_ops import native_function_options
from deep500.frameworks._bridge.nativeop_checks import nativeop_checks
from deep500.frameworks.pytorch.glue import GLUE
from deep500.frameworks.pytorch.native_ops import PyTorchNativeOp
from deep500.lv0_operators.cpp_compiler import CppOpDescriptor
from deep500.lv0_operators.cpp_library import CppOperatorError
from deep500.lv0_operators.cpp_op import CustomCPPOp
from deep500.lv0_operators.custom_op import CustomOp, as_tuple
from deep500.utils.allocator import aligned_empty
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError, require
from deep500.utils.tensor_desc import TensorDescriptor

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
_Tensor = torch.Tensor
_grad_enabled = torch.is_grad_enabled
_empty_like = torch.empty_like
_contiguous = torch.contiguous_format
_from_numpy = torch.from_numpy
_tracing = torch._C._get_tracing_state
_functorch_active = torch._C._are_functorch_transforms_active


# -- the autograd function shared by every custom operator ---------------------------------
class CustomOpFunction(torch.autograd.Function):
    """Forward and backward of a ``PyTorchCustomOp``; its first argument is the module."""

    @staticmethod
    def forward(ctx, module, *inputs):
        outputs = module._forward_tensors(inputs)
        ctx.module = module
        ctx.num_inputs = len(inputs)
        # Unused outputs arrive as None; the module fills in zeros of the right dtype.
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(*inputs, *outputs)
        integer = module._integer_outputs
        if integer is None:  # output dtypes are only known now (Python operators)
            integer = [index for index, o in enumerate(outputs)
                       if not o.is_floating_point()]
        if integer:
            ctx.mark_non_differentiable(*[outputs[index] for index in integer])
        return outputs if len(outputs) > 1 else outputs[0]

    @staticmethod
    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        inputs, outputs = saved[:ctx.num_inputs], saved[ctx.num_inputs:]
        with torch.no_grad():
            result = ctx.module._backward_tensors(grads, inputs, outputs)
        if _grad_enabled() and any(t is not None and t.requires_grad
                                   for t in (*grads, *inputs)):
            result = _refuse_second_order(result)
        return (None, *result)


SECOND_ORDER_ERROR = ("trying to differentiate twice a function that was marked with "
                      "@once_differentiable (Deep500 C++ operators are differentiable once)")


def _refuse_second_order(gradients: tuple) -> tuple:
    """``gradients`` behind a node that fails when differentiated (``create_graph=True``
    then a second backward): the backward ran on raw memory, so a second-order term
    would otherwise be silently missing. Unlike ``@once_differentiable`` this also looks
    at the saved inputs, on which the gradients usually depend."""
    # DelayedError gives a grad_fn only to outputs of inputs that require grad.
    defined = [g.detach().requires_grad_() for g in gradients if g is not None]
    if not defined:
        return gradients
    wrapped = torch._C._functions.DelayedError(SECOND_ORDER_ERROR, len(defined))(*defined)
    wrapped = iter(wrapped if isinstance(wrapped, tuple) else (wrapped,))
    return tuple(None if g is None else next(wrapped) for g in gradients)


class PyTorchCustomOp(torch.nn.Module):
    """A Deep500 operator as a ``torch.nn.Module`` (see the module docstring).

    Calling it with torch tensors returns one tensor, or a tuple for several outputs.
    ``op`` is the wrapped ``d5.CustomOp``.
    """
    kind = "custom operators"  # for error messages
    # Indices of the integer (non-differentiable) outputs; None: known only per call.
    _integer_outputs = None

    def __init__(self, op: CustomOp):
        super().__init__()
        self.op = op

    def __call__(self, *inputs, **kwargs):
        # nn.Module.__call__ goes through two more frames to find out that no hook is
        # registered; that is a tenth of a small C++ operator's call, and several times
        # more right after a large kernel has evicted the caches. With a hook, keyword
        # arguments or a compiled call, the standard path runs.
        if (kwargs or self._forward_hooks or self._forward_pre_hooks or self._backward_hooks
                or self._backward_pre_hooks or self._compiled_call_impl is not None
                or any(_GLOBAL_HOOKS) or _tracing()):
            return super().__call__(*inputs, **kwargs)
        return self.forward(*inputs)

    def forward(self, *inputs):
        inputs = self._prepare(inputs)
        if _grad_enabled():
            for tensor in inputs:
                if tensor.requires_grad:
                    return CustomOpFunction.apply(self, *inputs)
        outputs = self._forward_tensors(inputs)
        return outputs if len(outputs) > 1 else outputs[0]

    # Subclasses: checked inputs, outputs from inputs, input gradients from output
    # gradients (None for an unused output).
    def _prepare(self, inputs: tuple) -> tuple:
        raise NotImplementedError

    def _forward_tensors(self, inputs: tuple) -> tuple:
        raise NotImplementedError

    def _backward_tensors(self, grads: tuple, inputs: tuple, outputs: tuple) -> tuple:
        raise NotImplementedError

    def _not_a_cpu_tensor(self, index: int, value):
        if not isinstance(value, _Tensor):
            raise Deep500Error(f"{self.op.name}: input {index} is a "
                               f"{type(value).__name__}; d5pt.custom_op operators take "
                               f"torch tensors "
                               f"(torch.from_numpy converts an array without copying)")
        raise UnsupportedError(f"{self.op.name}: input {index} is on {value.device}; "
                               f"{self.kind} take CPU tensors. Move it with .cpu(), or use "
                               f"a framework-native operator on the GPU")

    def extra_repr(self) -> str:
        if self.op.input_descriptors is None:
            return self.op.name
        inputs = ", ".join(map(str, self.op.input_descriptors))
        outputs = ", ".join(map(str, self.op.output_descriptors or []))
        return f"{self.op.name}: ({inputs}) -> ({outputs})"


class PyTorchCppOp(PyTorchCustomOp):
    """A C++ operator on the memory of CPU torch tensors.

    The library is the one ``CustomCPPOp`` loaded (shared with the reference and the
    TensorFlow bridges); this module only checks tensors and passes their pointers.
    """
    kind = "C++ operators"

    def __init__(self, op: CustomCPPOp):
        super().__init__(op)
        # Precomputed so the per-call check is a few identity and tuple comparisons.
        self._in_specs = [(torch.Size(d.shape), d.torch_dtype())
                          for d in op.input_descriptors]
        # One-element tensors broadcast to each output's shape: empty_like/zeros_like on
        # them allocate a contiguous tensor faster than torch.empty(shape, dtype=...).
        self._out_templates = [_template(d) for d in op.output_descriptors]
        self._out_allocators = [_allocator(d, t) for d, t in
                                zip(op.output_descriptors, self._out_templates)]
        self._in_templates = [_template(d) for d in op.input_descriptors]
        self._differentiable = list(op.differentiable)
        self._integer_outputs = tuple(index for index, d in enumerate(op.output_descriptors)
                                      if d.dtype.kind != "f")
        self._forward_fn = op.library.forward_fn
        self._forward_pointers = op._forward_pointers
        self._handle = op._handle
        self._run_backward = op.run_backward
        self._has_backward = op.library.backward_signature is not None

    def forward(self, *inputs):
        specs = self._in_specs
        if len(inputs) != len(specs):
            self._reject(inputs)
        needs_grad = False
        for index, tensor in enumerate(inputs):
            shape, dtype = specs[index]
            if not (isinstance(tensor, _Tensor) and tensor.dtype is dtype
                    and tensor.shape == shape and tensor.is_cpu):
                self._reject(inputs)
            if not tensor.is_contiguous():
                inputs = (*inputs[:index], tensor.contiguous(), *inputs[index + 1:])  # copy
            if tensor.requires_grad:
                needs_grad = True
        if needs_grad and _grad_enabled():
            if _functorch_active():  # the standard apply says what functorch needs
                return CustomOpFunction.apply(self, *inputs)
            return _apply_custom_op(self, *inputs)
        outputs = self._forward_tensors(inputs)
        return outputs if len(outputs) > 1 else outputs[0]

    def _reject(self, inputs):
        """Raise the error explaining why ``inputs`` were refused."""
        for index, tensor in enumerate(inputs):
            if not isinstance(tensor, _Tensor) or not tensor.is_cpu:
                self._not_a_cpu_tensor(index, tensor)
        self.op.reject(inputs, self.op.input_specs, "inputs")

    def _forward_tensors(self, inputs):
        outputs = tuple([allocate() for allocate in self._out_allocators])
        if self._forward_fn(self._handle, self._forward_pointers(
                *[t.data_ptr() for t in inputs], *[o.data_ptr() for o in outputs])):
            self.op.raise_forward_error()
        return outputs

    def _backward_tensors(self, grads, inputs, outputs):
        if not self._has_backward:
            raise CppOperatorError(
                f"{self.op.name} has no backward method in C++, so it cannot be "
                f"differentiated. Add backward(...) to the C++ class, or call it under "
                f"torch.no_grad() / on inputs that do not require grad")
        dense = []
        for grad, template in zip(grads, self._out_templates):
            if grad is None:
                grad = torch.zeros_like(template, memory_format=_contiguous)
            else:
                # Upstream gradients are often broadcast views (stride 0): C++ needs dense.
                grad = grad.to(template.dtype).contiguous()
            dense.append(grad)
        input_grads = [torch.zeros_like(t, memory_format=_contiguous)
                       for t in self._in_templates]
        self._run_backward([t.data_ptr() for t in (*dense, *inputs, *outputs,
                                                   *input_grads)])
        return tuple(g if differentiable else None
                     for g, differentiable in zip(input_grads, self._differentiable))


class PyTorchGlueCppOp(PyTorchCppOp):
    """A C++ operator called through Deep500's PyTorch glue (``glue.py``): one
    C++ function checks the call, allocates the outputs, calls the kernel and records
    the gradient (a C++ ``torch::autograd::Function`` whose backward calls
    ``d500_backward`` as ``_backward_tensors`` does). Whatever the glue does not handle
    (a hook, keyword arguments, tracing, functorch, a tensor it would have to copy or
    refuse, a gradient of an operator without C++ backward) takes this class's Python
    path, so behaviour and errors are the same either way."""

    def __init__(self, op: CustomCPPOp, glue):
        super().__init__(op)
        self._d500_glue = self._glue_operator(glue, op.library.forward_fn)

    def _glue_operator(self, glue, forward_fn):
        """The glue's record of this operator (a capsule), calling ``forward_fn``: the
        library's ``d500_forward``, or any C function of the same signature."""
        op = self.op
        return glue.make_operator(
            _address(forward_fn),
            _address(op.library.backward_fn) if self._has_backward else 0,
            _address(op.library.last_error_fn), op._handle, op.name, CppOperatorError, op,
            [(d.torch_dtype(), tuple(d.shape)) for d in op.input_descriptors],
            [(d.torch_dtype(), tuple(d.shape)) for d in op.output_descriptors],
            list(op.differentiable))

    def __call__(self, *inputs, **kwargs):
        if not kwargs:
            result = _glue_call(self, inputs)
            if result is not NotImplemented:
                return result
        return PyTorchCustomOp.__call__(self, *inputs, **kwargs)


def _address(function) -> int:
    return ctypes.cast(function, ctypes.c_void_p).value


_glue_call = None  # the glue's call(module, inputs), once loaded and configured
_glue_lock = threading.Lock()


def _native_glue():
    """The configured PyTorch glue, or None (Python path): disabled, unavailable, or a
    torch that keeps nn.Module's global hooks where Deep500 cannot check them."""
    global _glue_call
    if _GLOBAL_HOOKS == (True,):
        return None
    glue = GLUE.get()
    if glue is not None and _glue_call is None:
        with _glue_lock:
            if _glue_call is None:
                glue.configure(_GLOBAL_HOOKS, torch.nn.Parameter)
                _glue_call = glue.call
    return glue


# PyTorch's CPU allocator maps fresh pages for every large tensor (measured: ~290 page
# faults per 16 MB output, +290 µs per call on a 4 M-element elementwise kernel); NumPy's
# malloc-backed buffers are reused by the C heap. Large outputs are therefore NumPy
# memory under a tensor (64-byte aligned, allocated as every path allocates outputs:
# deep500.utils.allocator), small ones come from empty_like (faster below ~1 MiB).
LARGE_OUTPUT_BYTES = 1 << 20


def _allocator(descriptor: TensorDescriptor, template: "torch.Tensor"):
    """A function returning a new contiguous CPU tensor for this output."""
    if descriptor.nbytes >= LARGE_OUTPUT_BYTES:
        layout = (descriptor.shape, descriptor.dtype, descriptor.nbytes)
        return lambda: _from_numpy(aligned_empty(*layout))
    return lambda: _empty_like(template, memory_format=_contiguous)


def _find_global_hooks() -> tuple:
    """The dictionaries of hooks registered for every module
    (``torch.nn.modules.module.register_module_forward_hook`` and siblings), which
    ``nn.Module._call_impl`` checks as well; ``(True,)`` when this torch version keeps
    them elsewhere, which makes every call take the standard path."""
    from torch.nn.modules import module as module_source
    names = ("_global_forward_hooks", "_global_forward_pre_hooks",
             "_global_backward_hooks", "_global_backward_pre_hooks")
    hooks = tuple(getattr(module_source, name, None) for name in names)
    return (True,) if any(h is None for h in hooks) else hooks


def _direct_apply(function: type) -> Callable:
    """``function.apply`` without ``autograd.Function.apply``'s Python prologue (an
    ``inspect`` check for ``setup_context`` and a pass over the arguments for functorch,
    1.5-2 µs of a custom operator's call), i.e. the C++ ``_FunctionBase.apply`` it ends
    in. Callers take the standard ``apply`` while functorch transforms are active."""
    base = getattr(torch._C, "_FunctionBase", None)
    raw = None if base is None else base.__dict__.get("apply")
    return function.apply if raw is None else raw.__get__(None, function)


_GLOBAL_HOOKS = _find_global_hooks()
_apply_custom_op = _direct_apply(CustomOpFunction)


def _template(descriptor: TensorDescriptor) -> "torch.Tensor":
    return torch.empty((), dtype=descriptor.torch_dtype()).expand(descriptor.shape)


class PyTorchPythonOp(PyTorchCustomOp):
    """A Python ``d5.CustomOp`` (on NumPy arrays) on CPU torch tensors, through NumPy
    views of their memory."""
    kind = "Python operators on NumPy arrays"

    def _prepare(self, inputs):
        for index, tensor in enumerate(inputs):
            if not isinstance(tensor, _Tensor) or not tensor.is_cpu:
                self._not_a_cpu_tensor(index, tensor)
        self.op.check_inputs([t.detach().numpy() for t in inputs])
        return inputs

    def _forward_tensors(self, inputs):
        arrays = [t.detach().numpy() for t in inputs]
        results = as_tuple(self.op.forward(*arrays))
        return tuple(_to_tensor(r, arrays) for r in results)

    def _backward_tensors(self, grads, inputs, outputs):
        # Unused float outputs get zero gradients; integer outputs get None, as in
        # d5.test_op_gradient.
        upstream = [g.detach().numpy() if g is not None
                    else (torch.zeros_like(o).numpy() if o.is_floating_point() else None)
                    for g, o in zip(grads, outputs)]
        result = list(as_tuple(self.op.backward(
            upstream, [t.detach().numpy() for t in inputs],
            [o.detach().numpy() for o in outputs])))
        result += [None] * (len(inputs) - len(result))
        input_grads = []
        for index, (grad, tensor) in enumerate(zip(result, inputs)):
            if grad is None or not tensor.is_floating_point():
                input_grads.append(None)
                continue
            grad = torch.from_numpy(np.array(grad, copy=True, order="C"))
            if grad.shape != tensor.shape:
                raise ShapeError(f"{self.op.name}.backward: the gradient of input {index} "
                                 f"has shape {tuple(grad.shape)}, the input has "
                                 f"{tuple(tensor.shape)}")
            input_grads.append(grad.to(tensor.dtype))
        return tuple(input_grads)


class PyTorchNativeModule(PyTorchCustomOp):
    """A ``PyTorchNativeOp`` (e.g. from ``custom_op_from_native``) on torch tensors: its
    function is called directly and differentiated by autograd."""

    def forward(self, *inputs):
        if self.op.input_descriptors is not None:
            CustomOp.check_inputs(self.op, inputs)
        return self.op.fn(*inputs)


def custom_op(op) -> PyTorchCustomOp:
    """A ``torch.nn.Module`` running ``op`` on torch tensors (see the module docstring).

    ``op`` is a ``CppOpDescriptor`` (from ``d5.compile_custom_cppop`` or
    ``d5.load_custom_cppop``), a ``d5.CustomCPPOp``, a ``PyTorchNativeOp`` (called
    directly), or any Python ``d5.CustomOp`` on NumPy arrays.
    """
    if isinstance(op, CppOpDescriptor):
        op = CustomCPPOp(op)  # what d5ref.custom_op builds: the process-wide library
    if isinstance(op, CustomCPPOp):
        glue = _native_glue()
        return PyTorchCppOp(op) if glue is None else PyTorchGlueCppOp(op, glue)
    if isinstance(op, PyTorchNativeOp):
        return PyTorchNativeModule(op)
    if isinstance(op, CustomOp):
        return PyTorchPythonOp(op)
    raise Deep500Error(f"d5pt.custom_op takes a CppOpDescriptor (d5.compile_custom_cppop), "
                       f"a d5.CustomCPPOp or a d5.CustomOp, got {type(op).__name__}")


def _to_tensor(result, arrays) -> "torch.Tensor":
    """A tensor on a Python operator's result; copied when the result is read-only or
    shares memory with an input (autograd must see a new tensor)."""
    array = np.asarray(result)
    if (not array.flags.writeable or not array.flags.c_contiguous
            or any(np.may_share_memory(array, a) for a in arrays)):
        array = np.array(array, copy=True, order="C")
    return torch.from_numpy(array)


# -- PyTorch functions as Deep500 operators -----------------------------------------------
def custom_op_from_native(fn: Callable, input_descriptors=None, output_descriptors=None,
                          name: str | None = None) -> PyTorchNativeOp:
    """``fn`` (a function of torch tensors, e.g. ``torch.matmul``) as a ``d5.CustomOp`` on
    NumPy arrays: forward runs ``fn``, backward is PyTorch's autograd of ``fn``.

    The descriptors, when given, are checked on every call; ``name`` defaults to the
    function's name.
    """
    return PyTorchNativeOp(fn, **native_function_options(
        fn, "torch tensors", name, input_descriptors, output_descriptors))


# -- checks of PyTorch operators against the reference (deep500.lv0_operators.nativeop_validation)
test_nativeop_forward, test_nativeop_gradient = nativeop_checks(
    custom_op_from_native, "torch tensors", __name__)
