"""``d5tf.custom_op``: an operator written once (C++ or Python) as a differentiable
TensorFlow function, and TensorFlow functions as Deep500 operators.

``custom_op(op)`` takes a ``CppOpDescriptor`` (from ``d5.compile_custom_cppop``), a
``CustomCPPOp`` or a Python ``d5.CustomOp`` and returns a :class:`TensorFlowCustomOp`,
callable on TF tensors eagerly and inside ``tf.function``, with its gradient. A C++
operator is the same loaded library that ``d5ref.custom_op`` and ``d5pt.custom_op`` use;
nothing is recompiled.

How a call runs:

* eagerly on CPU tensors, no gradient tape active, a C++ operator: Deep500's eager
  glue (``glue.py``, a C++ extension) checks the tensors (count, dtype, shape,
  host memory), allocates the outputs as new tensors and calls ``d500_forward`` on the
  tensors' memory, without Python in between: under 1 µs over the C++ call itself.
  Anything else it leaves to the Python path below, as it does when the glue cannot be
  built (``EagerGlueWarning``, once) or ``DEEP500_TF_EAGER_GLUE=0``.
* eagerly, no gradient tape active (the Python path): C++ reads the input tensors'
  host memory in place (``EagerTensor._numpy()``, what ``np.asarray`` returns, is a view
  of a CPU tensor; ``.numpy()`` would copy), writes into new 64-byte aligned NumPy
  buffers, and those become tensors without a copy (DLPack). Tensors are checked
  (count, shape, dtype) before any C++ runs. This path adds a few µs to the C++ call.
* eagerly while a ``GradientTape`` records: the same, wrapped in ``tf.custom_gradient``
  (which adds an identity op per output and the tape's bookkeeping).
* inside ``tf.function``, a C++ operator: the static shapes and dtypes are checked at
  trace time, then the operator becomes one ``D500CustomOp`` node, Deep500's generic
  TensorFlow kernel (``tf_kernel.py``, ``kernel/d500_tf_op.cc``): when the graph runs,
  it checks the shapes, allocates the outputs with the descriptors' shapes and calls
  ``d500_forward`` on the tensors' memory, without Python: about 1 µs per node over the
  C++ call (a call of the ``tf.function`` itself costs what TensorFlow's function call
  costs, as for a function of TensorFlow's own operators).
  Its gradient, registered for the op type, is a ``D500CustomOpGrad`` node calling
  ``d500_backward``. The kernel is compiled once per TensorFlow installation (about
  10 s, then cached, see ``tf_kernel``); if it cannot be built (no compiler, no
  TensorFlow headers) a ``tf_kernel.NativeKernelWarning`` says so once, and C++
  operators take the Python operators' path below. ``DEEP500_TF_NATIVE_KERNEL=0``
  selects that path without trying.
* inside ``tf.function``, a Python operator (or a C++ one without the kernel): checked
  the same way at trace time, it runs through ``tf.numpy_function`` (about 50–100 µs per
  node, and 100–350 µs more per call of a ``tf.function``) with the outputs' static
  shapes set from the descriptors, its gradient through ``tf.custom_gradient``.

In both graph paths shape inference continues past the operator, and errors raised while
the graph runs (a C++ exception, or a shape mismatch in a dimension that was unknown at
trace time) surface as ``tf.errors.OpError`` whose message contains the Deep500 error's
name and message (``CppOperatorError: ... raised: ...``, ``ShapeError: ...``). Such
graphs cannot be compiled with XLA (``jit_compile``; Keras turns it on by default on GPU
machines, so ``model.compile(..., jit_compile=False)``) nor run from a SavedModel: a
``D500CustomOp`` node holds the operator instance's address in this process (the
instance is kept alive as long as a graph that uses it; a node whose instance is not
registered with the kernel, as in a graph loaded elsewhere, fails with
``tf.errors.FailedPreconditionError`` instead of calling it), and ``numpy_function``
calls back into this Python process.

Gradients (reverse mode, first order; ``tf.autodiff.ForwardAccumulator`` gets no JVP
through these operators): C++ ``backward`` gets zero-filled input-gradient buffers; a
missing (None) upstream gradient becomes zeros; integer inputs get None gradients and
integer outputs are not differentiable. In a graph, forward and backward are stateful
nodes (``D500CustomOp``/``D500CustomOpGrad`` or ``numpy_function``), so ``tf.function``'s
automatic control dependencies run them in program order: one call of a ``tf.function``
never runs one operator twice at once.

Devices: C++ operators work on host memory. Eagerly, a GPU input is copied to the host
by ``np.asarray`` and the outputs are CPU tensors (TensorFlow copies them to the GPU when
a GPU kernel consumes them); in a graph, the kernel (CPU only) and ``numpy_function`` are
placed on the CPU and TensorFlow inserts the copies.
"""
from __future__ import annotations

import ctypes
import weakref
from typing import Callable

import numpy as np

from deep500.frameworks._bridge.native_ops import native_function_options
from deep500.frameworks._bridge.nativeop_checks import nativeop_checks
from deep500.frameworks.reference.custom_ops import custom_op as reference_custom_op
from deep500.frameworks.tensorflow import tf_kernel
from deep500.frameworks.tensorflow.glue import GLUE
from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.native_ops import TensorFlowNativeOp
from deep500.lv0_operators.cpp_op import CustomCPPOp, data_pointers
from deep500.lv0_operators.custom_op import CustomOp, as_tuple
from deep500.utils.allocator import aligned_empty
from deep500.utils.errors import Deep500Error, ShapeError

try:  # Private, but one C call: skip tf.custom_gradient's bookkeeping when nothing records.
    from tensorflow.python.eager.record import could_possibly_record as _could_record
except ImportError:  # pragma: no cover - other TensorFlow versions
    def _could_record() -> bool:
        return True


def _from_dlpack(array: np.ndarray):
    return tf.experimental.dlpack.from_dlpack(array.__dlpack__())


def _choose_to_tensor() -> Callable[[np.ndarray], object]:
    """Zero-copy DLPack import where this TensorFlow and NumPy support it, else a copy."""
    try:
        probe = aligned_empty((2,), np.float32)
        probe[:] = (1.0, 2.0)
        if np.asarray(_from_dlpack(probe)).tolist() == [1.0, 2.0]:
            return _from_dlpack
    except Exception:  # noqa: BLE001 - any failure means: copy instead
        pass
    return tf.constant


def _to_tensor(array: np.ndarray):
    """A CPU tensor on ``array`` (64-byte aligned). Chosen at the first call rather than
    at import, since creating a tensor initialises TensorFlow's devices."""
    global _to_tensor
    _to_tensor = _choose_to_tensor()
    return _to_tensor(array)


_glue_call = None  # the eager glue's call(capsule, inputs), once loaded


def _glue_module():
    """The eager glue, or None (Python path): disabled or unavailable."""
    global _glue_call
    glue = GLUE.get()
    if glue is not None:
        _glue_call = glue.call
    return glue


try:
    from tensorflow.python.framework.ops import EagerTensor as _EagerTensor
except ImportError:  # pragma: no cover - then np.asarray takes every input
    _EagerTensor = None


class TensorFlowCustomOp:
    """A Deep500 operator (C++ or Python) as a differentiable TensorFlow function.

    Call it with TF tensors (or anything ``np.asarray`` accepts); it returns one tensor
    for a single output, a tuple otherwise. ``op`` is the NumPy-level operator
    (a ``CustomCPPOp`` for C++ operators) that every framework bridge shares.
    """

    def __init__(self, op):
        self.op: CustomOp = reference_custom_op(op)
        self.is_cpp = isinstance(self.op, CustomCPPOp)
        self.name = self.op.name
        self.__name__ = self.op.op_type  # the name custom_op_from_native records
        self.input_descriptors = self.op.input_descriptors
        self.output_descriptors = self.op.output_descriptors
        self._input_specs = _specs(self.input_descriptors)
        self._output_specs = _specs(self.output_descriptors)
        self._output_layout = ([(d.shape, d.dtype, d.nbytes) for d in self.output_descriptors]
                               if self.output_descriptors else None)
        self._differentiable = tf.custom_gradient(self._forward_with_gradient)
        self._native_attributes = None  # D500CustomOp's attributes, made when first traced
        self._eager_glue = self._glue_operator(self.op.library.forward_fn) if (
            self.is_cpp and _glue_module() is not None) else None

    def __repr__(self) -> str:
        return f"TensorFlowCustomOp({self.name})"

    def _glue_operator(self, forward_fn):
        """The eager glue's record of this operator (a capsule), calling ``forward_fn``:
        the library's ``d500_forward``, or any C function of the same signature."""
        op = self.op
        return _glue_module().make_operator(
            _address(forward_fn), op._handle, op,
            [(d.tf_dtype().as_datatype_enum, tuple(d.shape)) for d in op.input_descriptors],
            [(d.tf_dtype().as_datatype_enum, tuple(d.shape)) for d in op.output_descriptors])

    def __call__(self, *inputs):
        if self._eager_glue is not None:
            outputs = _glue_call(self._eager_glue, inputs)
            if outputs is not NotImplemented:
                if outputs is None:
                    self.op.raise_forward_error()
                return outputs
        if tf.executing_eagerly() and not _could_record():
            if self.is_cpp:
                outputs = self._cpp_eager(inputs)[2]
            else:
                outputs = self._python_eager(inputs)[2]
            return outputs[0] if len(outputs) == 1 else tuple(outputs)
        return self._recorded_or_traced(inputs)

    # Not on __call__: do_not_convert's wrapper costs ~2 us on every eager call.
    @tf.autograph.experimental.do_not_convert  # plain Python: nothing to convert
    def _recorded_or_traced(self, inputs):
        inputs = [x if isinstance(x, tf.Tensor) else tf.convert_to_tensor(x)
                  for x in inputs]
        if self.is_cpp and not tf.executing_eagerly():
            kernel = tf_kernel.kernel_ops()
            if kernel is not None:
                return self._pack(self._native_forward(kernel, inputs))
        return self._differentiable(*inputs)

    # -- eager execution --------------------------------------------------------------
    def _cpp_eager(self, inputs):
        """(input arrays, output arrays, output tensors): C++ on the tensors' memory."""
        op = self.op
        specs = self._input_specs
        if len(inputs) != len(specs):
            op.reject(inputs, specs, "inputs")
        arrays = []
        for x, (shape, dtype) in zip(inputs, specs):
            # EagerTensor._numpy() (what np.asarray calls, without ~1 µs of Python) is a
            # view of a CPU tensor's dense buffer; a GPU tensor is copied to the host.
            array = x._numpy() if type(x) is _EagerTensor else np.asarray(x, order="C")
            if array.shape != shape or array.dtype != dtype:
                op.reject(inputs, specs, "inputs")
            arrays.append(array)
        # 64-byte aligned: TensorFlow aborts the process (CHECK IsAligned) when a kernel
        # reads a tensor less aligned than Eigen's vectors.
        outputs = [aligned_empty(*layout) for layout in self._output_layout]
        pointers = data_pointers(arrays + outputs)
        if op._forward_fn(op._handle, op._forward_pointers(*pointers)):
            op.raise_forward_error()
        return arrays, outputs, [_to_tensor(o) for o in outputs]

    def _python_eager(self, inputs):
        """(input arrays, output arrays, output tensors): a Python op's forward on NumPy."""
        arrays = [np.asarray(x) for x in inputs]
        self.op.check_inputs(arrays)
        outputs = [np.asarray(o) for o in as_tuple(self.op.forward(*arrays))]
        self.op.check_outputs(outputs)
        return arrays, outputs, [tf.convert_to_tensor(o) for o in outputs]

    def _eager_backward(self, upstream, arrays, outputs):
        """Input gradients (tensors, None for integer inputs) from eager upstream grads:
        zeros where an upstream gradient is None or belongs to an integer output."""
        grads = [np.zeros(y.shape, y.dtype) if dy is None or y.dtype.kind != "f"
                 else np.asarray(dy, order="C") for dy, y in zip(upstream, outputs)]
        if not self.is_cpp:
            return [_to_tensor_or_none(g)
                    for g in self._python_backward(grads, arrays, outputs)]
        op = self.op
        if any(g.shape != y.shape or g.dtype != y.dtype for g, y in zip(grads, outputs)):
            op.reject(grads, op.output_specs, "output gradients")
        input_grads = []
        for array in arrays:  # zero-filled: a C++ backward may accumulate
            grad = aligned_empty(array.shape, array.dtype, array.nbytes)
            grad.fill(0)
            input_grads.append(grad)
        op.run_backward([a.ctypes.data for a in (*grads, *arrays, *outputs, *input_grads)])
        return [_to_tensor(g) if g.dtype.kind == "f" else None for g in input_grads]

    def _python_backward(self, grads, arrays, outputs) -> list:
        """The op's NumPy backward, checked: None for integer inputs, zeros for a float
        input the op returned None for."""
        result = list(as_tuple(self.op.backward(grads, arrays, outputs)))
        if len(result) != len(arrays):
            raise ShapeError(f"{self.name}.backward returned {len(result)} gradients for "
                             f"{len(arrays)} inputs")
        checked = []
        for index, (grad, array) in enumerate(zip(result, arrays)):
            if array.dtype.kind != "f":
                checked.append(None)
                continue
            grad = np.zeros_like(array) if grad is None else np.asarray(grad)
            if grad.shape != array.shape:
                raise ShapeError(f"{self.name}.backward: gradient {index} has shape "
                                 f"{grad.shape}; input {index} has {array.shape}")
            checked.append(grad.astype(array.dtype, copy=False))
        return checked

    # -- tf.custom_gradient body ------------------------------------------------------
    def _forward_with_gradient(self, *inputs):
        if tf.executing_eagerly():
            run = self._cpp_eager if self.is_cpp else self._python_eager
            arrays, outputs, tensors = run(inputs)

            def eager_grad(*upstream):
                return self._eager_backward(upstream, arrays, outputs)
            return self._pack(tensors), eager_grad

        tensors = self._graph_forward(inputs)

        def graph_grad(*upstream):
            return self._graph_backward(upstream, inputs, tensors)
        return self._pack(tensors), graph_grad

    def _pack(self, tensors):
        tensors = list(tensors)
        return tensors[0] if len(tensors) == 1 else tuple(tensors)

    # -- graph execution (inside tf.function): Deep500's kernel --------------------------
    def _native_forward(self, kernel, inputs) -> list:
        """The outputs of one ``D500CustomOp`` node; its gradient is ``_native_gradient``."""
        self._check_static(inputs)
        if self._native_attributes is None:
            self._native_attributes = _kernel_attributes(self.op)
        outputs = kernel.d500_custom_op(inputs, name=self.op.op_type,
                                        **self._native_attributes)
        _keep_alive(self.op)
        return list(outputs)

    # -- graph execution (inside tf.function): numpy_function ----------------------------
    def _graph_forward(self, inputs) -> list:
        self._check_static(inputs)
        if self.output_descriptors is None:
            raise Deep500Error(
                f"{self.name} has no output descriptors, so TensorFlow cannot know its "
                f"outputs' dtypes and shapes inside tf.function. Give the CustomOp "
                f"output_descriptors (d5.tensordesc per output), or call it eagerly")
        op, descriptors = self.op, self.output_descriptors

        def forward(*arrays):
            outputs = [np.asarray(o) for o in as_tuple(op.forward(*arrays))]
            op.check_outputs(outputs)
            return outputs
        outputs = tf.numpy_function(forward, list(inputs),
                                    [d.tf_dtype() for d in descriptors],
                                    name=op.op_type)
        for output, desc in zip(outputs, descriptors):
            output.set_shape(desc.shape)
        return list(outputs)

    def _check_static(self, inputs) -> None:
        """Trace-time check of count, dtype and the known part of every static shape."""
        descriptors = self.input_descriptors
        if descriptors is None:
            return
        if len(inputs) != len(descriptors):
            self.op.reject(inputs, self._input_specs, "inputs")
        for index, (tensor, desc) in enumerate(zip(inputs, descriptors)):
            if (tensor.dtype.as_numpy_dtype != desc.dtype
                    or not tensor.shape.is_compatible_with(desc.shape)):
                raise ShapeError(f"{self.name} input {index}: expected {desc}, got a tensor "
                                 f"of static shape {tensor.shape} and dtype "
                                 f"{tensor.dtype.name} (checked when tf.function traced)")

    def _graph_backward(self, upstream, inputs, outputs):
        """Input gradients as graph tensors: the op's NumPy backward via numpy_function."""
        present = [i for i, (dy, y) in enumerate(zip(upstream, outputs))
                   if dy is not None and y.dtype.is_floating]
        differentiable = [x.dtype.is_floating for x in inputs]
        num_inputs = len(inputs)

        def backward(*arrays):
            given = dict(zip(present, arrays[:len(present)]))
            xs = list(arrays[len(present):len(present) + num_inputs])
            ys = list(arrays[len(present) + num_inputs:])
            grads = [given[i] if i in given else np.zeros(y.shape, y.dtype)
                     for i, y in enumerate(ys)]
            if self.is_cpp:
                result = self.op.backward(grads, xs, ys)
            else:
                result = self._python_backward(grads, xs, ys)
            return [g for g, d in zip(result, differentiable) if d]
        wanted = [x.dtype for x in inputs if x.dtype.is_floating]
        if not wanted:
            return [None] * num_inputs
        computed = iter(tf.numpy_function(
            backward, [upstream[i] for i in present] + list(inputs) + list(outputs), wanted,
            name=f"{self.op.op_type}_grad"))
        grads = []
        for x, d in zip(inputs, differentiable):
            if not d:
                grads.append(None)
                continue
            grad = next(computed)
            grad.set_shape(x.shape)
            grads.append(grad)
        return grads


# -- Deep500's TensorFlow kernel: attributes, lifetime, gradient -------------------------
_GRADIENT_ATTRIBUTES = ("input_shapes", "output_shapes", "handle", "instance",
                        "forward_fn", "backward_fn", "last_error_fn", "op_name",
                        "descriptions")
# Operator instances (CustomCPPOp) by their kernel instance number, for the gradient
# function, which sees only the node; and the number of each.
_BY_INSTANCE: "weakref.WeakValueDictionary[int, CustomCPPOp]" = weakref.WeakValueDictionary()
_INSTANCE_OF: "weakref.WeakKeyDictionary[CustomCPPOp, int]" = weakref.WeakKeyDictionary()


def _kernel_attributes(op: CustomCPPOp) -> dict:
    """D500CustomOp's attributes for ``op``: dtypes and shapes from the descriptors, the
    instance's address and number (registered with the kernel), the C ABI functions'
    addresses, the texts its error messages use."""
    instance = _INSTANCE_OF.get(op)
    if instance is None:
        instance = _INSTANCE_OF[op] = tf_kernel.register_instance(op, op._handle)
        _BY_INSTANCE[instance] = op
    # The library CppLibrary loaded (dlopen returns the same handle): the C ABI entry
    # points CppLibrary calls, and d500_last_error, which it does not expose.
    dll = ctypes.CDLL(op.library.path)
    return {"Tout": [d.tf_dtype() for d in op.output_descriptors],
            "input_shapes": [list(d.shape) for d in op.input_descriptors],
            "output_shapes": [list(d.shape) for d in op.output_descriptors],
            "handle": op._handle, "instance": instance,
            "forward_fn": _address(op.library.forward_fn),
            "backward_fn": _address(op.library.backward_fn),
            "last_error_fn": _address(dll.d500_last_error), "op_name": op.name,
            "descriptions": [str(d) for d in (*op.input_descriptors,
                                              *op.output_descriptors)]}


def _address(function) -> int:
    """Where a ctypes function is in this process."""
    return ctypes.cast(function, ctypes.c_void_p).value


def _keep_alive(op: CustomCPPOp) -> None:
    """Keep ``op`` alive as long as the graph being built: its nodes hold the operator
    instance's address, which ``op`` frees (d500_delete) when it is collected."""
    graph = tf.compat.v1.get_default_graph()
    kept = getattr(graph, "_deep500_operators", None)
    if kept is None:
        kept = {}
        setattr(graph, "_deep500_operators", kept)
    kept[id(op)] = op


@tf.RegisterGradient("D500CustomOp")
def _native_gradient(node, *upstream):
    """Input gradients of a D500CustomOp node: one D500CustomOpGrad node (d500_backward
    on zero-filled input-gradient buffers). A missing upstream gradient, or one of an
    integer output, is zeros; integer inputs get None."""
    op = _BY_INSTANCE.get(node.get_attr("instance"))
    if op is None:
        raise Deep500Error(f"The C++ operator of node {node.name} (D500CustomOp) no longer "
                           f"exists in this process; rebuild the graph from its "
                           f"d5tf.custom_op")
    kernel = tf_kernel.kernel_ops(honour_switch=False)  # loaded: the node exists
    inputs, outputs = list(node.inputs), list(node.outputs)
    grads = [tf.zeros(y.shape, y.dtype) if dy is None or not y.dtype.is_floating
             else tf.convert_to_tensor(dy) for dy, y in zip(upstream, outputs)]
    attributes = {name: node.get_attr(name) for name in _GRADIENT_ATTRIBUTES}
    input_grads = kernel.d500_custom_op_grad(grads, inputs, outputs,
                                             name=f"{op.op_type}_grad", **attributes)
    _keep_alive(op)
    return [g if x.dtype.is_floating else None for g, x in zip(input_grads, inputs)]


def _specs(descriptors) -> list | None:
    if descriptors is None:
        return None
    return [(d.shape, d.dtype) for d in descriptors]


def _to_tensor_or_none(array):
    if array is None:
        return None
    return tf.convert_to_tensor(array)


def custom_op(op) -> TensorFlowCustomOp:
    """``op`` (a CppOpDescriptor, a CustomCPPOp or a Python d5.CustomOp) as a
    differentiable TensorFlow function; see :class:`TensorFlowCustomOp`."""
    if isinstance(op, TensorFlowCustomOp):
        return op
    return TensorFlowCustomOp(op)


# -- TensorFlow functions as Deep500 operators ----------------------------------------
class TensorFlowFunctionOp(TensorFlowNativeOp):
    """A TensorFlow function as a d5.CustomOp on NumPy arrays, whose backward is
    ``tf.GradientTape``; inputs and outputs are checked against the descriptors."""

    def forward(self, *inputs):
        outputs = super().forward(*inputs)
        self.check_outputs(as_tuple(outputs))
        return outputs


def custom_op_from_native(fn: Callable, input_descriptors=None, output_descriptors=None,
                          name: str | None = None, device=None) -> TensorFlowFunctionOp:
    """``fn`` (a function of TF tensors: ``tf.linalg.matmul``, ``tf.nn.conv2d`` in a
    lambda, a ``tf.function``, a ``d5tf.custom_op``) as a ``d5.CustomOp`` on NumPy arrays:
    forward runs ``fn`` on TF tensors, backward is ``tf.GradientTape`` over ``fn``.

    The descriptors, when given, are checked on every forward call; ``name`` defaults to
    the function's name.
    """
    return TensorFlowFunctionOp(fn, device=device, **native_function_options(
        fn, "TF tensors", name, input_descriptors, output_descriptors))


# -- checks of TensorFlow operators against the reference (deep500.lv0_operators.nativeop_validation)
def _from_native(fn: Callable) -> TensorFlowFunctionOp:
    """A function of TF tensors (a ``d5tf.custom_op`` included, so that it is tested
    through TensorFlow and its registered gradient) wrapped by ``custom_op_from_native``
    with the function's descriptors if it has them."""
    return custom_op_from_native(fn, getattr(fn, "input_descriptors", None),
                                 getattr(fn, "output_descriptors", None))


test_nativeop_forward, test_nativeop_gradient = nativeop_checks(
    _from_native, "TF tensors", __name__)
