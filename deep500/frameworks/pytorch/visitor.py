"""Building an :class:`OnnxModule` from a parsed ONNX model.

``PyTorchVisitor`` has one ``visit_<op>`` per supported ONNX operator. Each reads the
node's attributes (with the semantics of the opset the model imports, see
https://onnx.ai/onnx/operators/) once and returns to the module a closure over
``torch`` functions; nothing about a node is interpreted again when the graph runs.

Parameters are the model's floating-point initializers other than batch-norm running
statistics (``OnnxModel.parameters``); they are never folded, since they train. Values
known while building (other initializers, ``Constant`` nodes, the shape of a fed input
whose shape the model fixes, and any node computed only from such values) are folded:
the node runs once here, on the CPU, and its outputs become constants.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import onnx
import onnx.numpy_helper

from deep500.utils.errors import ShapeError, UnsupportedError, require
from deep500.frameworks.pytorch.ops_sequence import SequenceOps
from deep500.frameworks.pytorch.ops_tensor import TensorOps
from deep500.utils.onnx_interop.visitor import OnnxBaseVisitor
from deep500.utils.onnx_interop.window import (conv_transpose_geometry, resolve_pads,
                                               window_geometry)

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional

_CONV = {1: torch.conv1d, 2: torch.conv2d, 3: torch.conv3d}
_CONV_TRANSPOSE = {1: torch.conv_transpose1d, 2: torch.conv_transpose2d,
                   3: torch.conv_transpose3d}
_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate",
              "wrap": "circular"}


def torch_dtype(onnx_type) -> "torch.dtype":
    """The torch dtype of an ONNX element type (enum value, or name before opset 6)."""
    if isinstance(onnx_type, str):
        onnx_type = onnx.TensorProto.DataType.Value(onnx_type.upper())
    try:
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(onnx_type)
        return torch.from_numpy(np.empty(0, np_dtype)).dtype
    except (KeyError, TypeError, ValueError):
        name = onnx.TensorProto.DataType.Name(onnx_type)
        raise UnsupportedError(f"The PyTorch executor has no tensor type for ONNX "
                               f"{name}") from None


def _as_tensor(array: np.ndarray) -> "torch.Tensor":
    # A copy in PyTorch's allocator: 64-byte aligned, as kernels expect for their
    # fastest paths (NumPy's buffers are only 16-byte aligned).
    return torch.tensor(np.asarray(array, order="C"))


class _BatchNormInference(torch.autograd.Function):
    """ONNX BatchNormalization in inference mode with gradients for every input,
    including the statistics (PyTorch's kernel treats them as constants):
    Y = (X - mean)·scale/sqrt(var + eps) + B, so dmean = -dB·scale·inv_std and
    dvar = -dscale·scale·inv_std²/2."""

    @staticmethod
    def forward(ctx, x, scale, bias, mean, var, eps):
        ctx.save_for_backward(x, scale, mean, var)
        ctx.eps = eps
        return torch.batch_norm(x, scale, bias, mean, var, False, 0.0, eps, True)

    @staticmethod
    def backward(ctx, dy):
        x, scale, mean, var = ctx.saved_tensors
        dx, dscale, dbias = torch.ops.aten.native_batch_norm_backward(
            dy, x, scale, mean, var, None, None, False, ctx.eps, [True, True, True])
        d_mean = d_var = None
        if ctx.needs_input_grad[3] or ctx.needs_input_grad[4]:
            inv_std = torch.rsqrt(var + ctx.eps)
            d_mean = -dbias * scale * inv_std
            d_var = dscale * scale * inv_std * inv_std * -0.5
        return dx, dscale, dbias, d_mean, d_var, None


def _torch_pads(pads) -> list:
    """ONNX [b1, b2, ..., e1, e2, ...] → F.pad's (b_last, e_last, ..., b1, e1)."""
    half = len(pads) // 2
    result = []
    for axis in reversed(range(half)):
        result += [pads[axis], pads[half + axis]]
    return result


def _ceil_crop(op_type, spatial, pads, kernel, strides, dilations):
    """Pooling an explicitly padded input with ceil_mode lets a last window start in
    the end padding; ONNX (like PyTorch's own padding) drops such windows. The index
    that keeps the valid ones."""
    output = window_geometry(op_type, spatial, kernel, strides=strides,
                             dilations=dilations, pads=pads, ceil_mode=True).output
    return (slice(None), slice(None)) + tuple(slice(0, count) for count in output)


def _reshape_target(shape, input_shape, allowzero):
    """ONNX Reshape's target: 0 copies the input's dimension (unless allowzero)."""
    if allowzero:
        return shape
    return [input_shape[i] if d == 0 else d for i, d in enumerate(shape)]


def _unsqueeze_fn(axes):
    def unsqueeze(x):
        rank = x.dim() + len(axes)
        for axis in sorted(a % rank for a in axes):
            x = x.unsqueeze(axis)
        return x
    return unsqueeze


def _slice(x, starts, ends, axes, steps):
    """ONNX Slice; Python's slice semantics clamp exactly as ONNX does (for negative
    steps too, via range), but torch views take positive steps only."""
    rank = x.dim()
    key = [slice(None)] * rank
    negative = []
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis %= rank
        if step > 0:
            key[axis] = slice(start, end, step)
        else:
            negative.append((axis, range(x.shape[axis])[start:end:step]))
    x = x[tuple(key)] if any(k != slice(None) for k in key) else x
    for axis, indices in negative:
        x = x.index_select(axis, torch.tensor(list(indices), dtype=torch.int64,
                                              device=x.device))
    return x


class PyTorchVisitor(TensorOps, SequenceOps, OnnxBaseVisitor):
    """Builds ``network.module`` (an :class:`OnnxModule`) from an ``OnnxModel``.

    Args:
        static_shapes: use the ranks and element types ONNX shape inference found for
            computed tensors (to pick code paths); off after graph edits.
    """
    framework = "The PyTorch executor (deep500.frameworks.pytorch)"
    errors = "pytorch"

    def __init__(self, static_shapes: bool = True):
        self.static_shapes = static_shapes

    # -- hooks -------------------------------------------------------------------
    def visit_graph(self, model, network) -> None:
        self.module = network.module
        self.module.reset_graph()
        self.known: dict = {}     # name -> CPU tensor whose value is fixed at build time
        self.inputs = {i.name for i in model.feed_inputs}
        self.info = {name: info for name, info in model.value_info.items()  # usable here
                     if self.static_shapes or name in self.inputs}
        self.parameters = network.parameter_values
        self.trainable = set(model.parameters)
        for name, value in model.constants.items():   # from attributes of older opsets
            self.known[name] = _as_tensor(value)

    def visit_initializer(self, name, value, network) -> None:
        """The model's parameters (floating-point initializers other than batch-norm
        running statistics) become ``nn.Parameter``s, other initializers constants."""
        if name in self.trainable:
            parameter = self.parameters.get(name)  # kept across rebuilds: it trains
            if parameter is None:
                parameter = torch.nn.Parameter(_as_tensor(value))
            self.module.add_parameter(name, parameter)
        else:
            self.known[name] = _as_tensor(value)

    def visit_input(self, value_info, network) -> None:
        self.module.add_input(value_info.name)

    def visit_graph_end(self, model, network) -> None:
        for name in network.outputs:
            if name in self.known:
                self.module.add_constant(name, self.known[name])
        self.module.set_outputs(network.outputs)
        self.module.finalize()

    # -- what is known while building ----------------------------------------------
    def _known(self, name):
        return self.known.get(name) if name else None

    def _ints(self, name):
        value = self._known(name)
        return None if value is None else [int(v) for v in value.reshape(-1).tolist()]

    def _scalar(self, name):
        value = self._known(name)
        return None if value is None else value.reshape(-1)[0].item()

    def _shape(self, name):
        """The shape of tensor ``name`` if it is fixed: a constant's, a parameter's, or a
        fed input's static shape (which the executor enforces). Shapes that ONNX shape
        inference gives for computed tensors are not used: for a few operators (pooling
        with ceil_mode and asymmetric pads) it disagrees with the operators' reference."""
        if not name:
            return None
        if name in self.known:
            return tuple(self.known[name].shape)
        if name in self.parameters:
            return tuple(self.parameters[name].shape)
        info = self.info.get(name)
        if name in self.inputs and info is not None and info.is_static:
            return tuple(info.shape)
        return None

    def _rank(self, name):
        if name in self.known:
            return self.known[name].dim()
        if name in self.parameters:
            return self.parameters[name].dim()
        info = self.info.get(name)
        return len(info.shape) if info is not None and info.shape is not None else None

    def _dtype(self, name):
        if name in self.known:
            return self.known[name].dtype
        if name in self.parameters:
            return self.parameters[name].dtype
        info = self.info.get(name)
        if info is not None and info.dtype is not None:
            return torch_dtype(onnx.helper.np_dtype_to_tensor_dtype(info.dtype))
        return None

    def _fail(self, op, message: str, error=UnsupportedError):
        return error(f"{self.framework}: node '{op.name}' ({op.op_type}, opset "
                     f"{op.original_version}) of model '{self.model.name}': {message}")

    def _emit(self, op, fn, inputs=None) -> None:
        """Add node ``op`` computing ``fn(*inputs)`` (default: all its inputs); if every
        input is known now, compute it now instead."""
        inputs = list(op.inputs if inputs is None else inputs)
        while inputs and not inputs[-1]:
            inputs.pop()  # trailing omitted inputs: fn's defaults apply
        if all(not n or n in self.known for n in inputs):
            with torch.no_grad():
                result = fn(*[self._known(n) for n in inputs])
            values = result if len(op.outputs) > 1 else (result,)
            for name, value in zip(op.outputs, values):
                if name:
                    self.known[name] = value
            self.module.add_folded(op)
            return
        for name in inputs:
            if name in self.known:
                self.module.add_constant(name, self.known[name])
        self.module.add_step(op, fn, inputs, op.outputs)

    # -- elementwise ---------------------------------------------------------------
    def _elementwise(self, op, fn) -> None:
        self._emit(op, fn)

    def visit_add(self, op, network):
        self._elementwise(op, torch.add)

    def visit_sub(self, op, network):
        self._elementwise(op, torch.sub)

    def visit_mul(self, op, network):
        self._elementwise(op, torch.mul)

    def visit_div(self, op, network):
        dtype = self._dtype(op.inputs[0])
        if dtype is not None and dtype.is_floating_point:
            self._elementwise(op, torch.div)
            return

        def divide(a, b):  # ONNX integer division truncates
            return torch.div(a, b) if a.is_floating_point() else torch.div(
                a, b, rounding_mode="trunc")
        self._elementwise(op, divide)

    def visit_pow(self, op, network):
        exponent = self._known(op.inputs[1])
        base_dtype = self._dtype(op.inputs[0])
        if exponent is not None and exponent.numel() == 1 and (
                base_dtype is not None and base_dtype.is_floating_point):
            value = exponent.item()
            self._emit(op, lambda x: torch.pow(x, value), op.inputs[:1])
            return

        def power(x, y):  # ONNX Pow has the base's type
            result = torch.pow(x, y)
            return result if result.dtype == x.dtype else result.to(x.dtype)
        self._emit(op, power)

    def _unary(self, op, fn):
        self._emit(op, fn)

    def visit_sqrt(self, op, network):
        self._unary(op, torch.sqrt)

    def visit_exp(self, op, network):
        self._unary(op, torch.exp)

    def visit_log(self, op, network):
        self._unary(op, torch.log)

    def visit_neg(self, op, network):
        self._unary(op, torch.neg)

    def visit_abs(self, op, network):
        self._unary(op, torch.abs)

    def visit_erf(self, op, network):
        self._unary(op, torch.erf)

    def visit_reciprocal(self, op, network):
        self._unary(op, torch.reciprocal)

    def visit_floor(self, op, network):
        self._unary(op, torch.floor)

    def visit_ceil(self, op, network):
        self._unary(op, torch.ceil)

    def visit_not(self, op, network):
        self._unary(op, torch.logical_not)

    def visit_relu(self, op, network):
        self._unary(op, torch.relu)

    def visit_sigmoid(self, op, network):
        self._unary(op, torch.sigmoid)

    def visit_tanh(self, op, network):
        self._unary(op, torch.tanh)

    def visit_leakyrelu(self, op, network):
        alpha = op.attributes["alpha"]
        self._unary(op, lambda x: F.leaky_relu(x, alpha))

    def visit_identity(self, op, network):
        self._unary(op, lambda x: x)

    def visit_equal(self, op, network):
        self._emit(op, torch.eq)

    def visit_less(self, op, network):
        self._emit(op, torch.lt)

    def visit_greater(self, op, network):
        self._emit(op, torch.gt)

    def visit_where(self, op, network):
        self._emit(op, torch.where)

    def _variadic(self, op, binary):
        if len(op.inputs) == 1:
            self._emit(op, lambda x: x)
        elif len(op.inputs) == 2:
            self._emit(op, binary)
        else:
            self._emit(op, lambda *xs: functools.reduce(binary, xs))

    def visit_min(self, op, network):
        self._variadic(op, torch.minimum)

    def visit_max(self, op, network):
        self._variadic(op, torch.maximum)

    def visit_sum(self, op, network):
        self._variadic(op, torch.add)

    def visit_clip(self, op, network):
        names = list(op.inputs) + ["", ""]
        bounds = [names[1], names[2]]
        if all(not n or n in self.known for n in bounds):
            low, high = (self._scalar(n) for n in bounds)
            if low is None and high is None:
                self._emit(op, lambda x: x, op.inputs[:1])
            else:
                self._emit(op, lambda x: torch.clamp(x, low, high), op.inputs[:1])
            return
        self._emit(op, lambda x, low=None, high=None: torch.clamp(x, low, high))

    def visit_cast(self, op, network):
        dtype = torch_dtype(op.attributes["to"])
        self._emit(op, lambda x: x.to(dtype))

    # -- linear algebra and convolution ----------------------------------------------
    def visit_matmul(self, op, network):
        self._emit(op, torch.matmul)

    def visit_gemm(self, op, network):
        a = op.attributes
        alpha, beta = a["alpha"], a["beta"]
        trans_a, trans_b = a.get("transA") or 0, a.get("transB") or 0
        c_shape = self._shape(op.inputs[2]) if len(op.inputs) > 2 else None
        has_c = len(op.inputs) > 2 and bool(op.inputs[2])
        if (not trans_a and trans_b and alpha == 1.0 and (not has_c or beta == 1.0)
                and (not has_c or (c_shape is not None and len(c_shape) == 1))):
            # The layout of nn.Linear: y = x·Wᵀ + b, one fused call.
            self._emit(op, F.linear)
            return

        def gemm(A, B, C=None):
            A = A.t() if trans_a else A
            B = B.t() if trans_b else B
            if C is None or beta == 0.0:
                product = torch.mm(A, B)
                return product if alpha == 1.0 else product * alpha
            return torch.addmm(C, A, B, beta=beta, alpha=alpha)
        self._emit(op, gemm)

    def _spatial_rank(self, op, kernel_name=None):
        """Spatial dimensions of a conv/pool node: from kernel_shape, W or X."""
        kernel = op.attributes.get("kernel_shape")
        if kernel:
            return len(kernel)
        for name, offset in ((kernel_name, 2), (op.inputs[0], 2)):
            rank = self._rank(name) if name else None
            if rank is not None:
                return rank - offset
        raise self._fail(op, "the number of spatial dimensions is unknown (no "
                             "kernel_shape, and neither W nor X has a known rank); give "
                             "kernel_shape or run ONNX shape inference on the model")

    def _pads(self, op, rank, kernel, strides, dilations):
        """(static ONNX pads [begin..., end...], or a function of the input's spatial
        shape giving them): :func:`deep500.utils.onnx_interop.window.resolve_pads`."""
        auto_pad = op.attributes.get("auto_pad") or "NOTSET"

        def pads_of(spatial):
            begin, end = resolve_pads(op.op_type, spatial, kernel, strides=strides,
                                      dilations=dilations, pads=op.attributes.get("pads"),
                                      auto_pad=auto_pad)
            return list(begin) + list(end)
        if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
            return pads_of([None] * rank), None
        x_shape = self._shape(op.inputs[0])
        if x_shape is not None:
            return pads_of(x_shape[2:]), None
        return None, pads_of

    def visit_conv(self, op, network):
        a = op.attributes
        rank = self._spatial_rank(op, op.inputs[1])
        if rank not in _CONV:
            raise self._fail(op, f"{rank}-D convolution is not supported (1-D to 3-D are)")
        conv = _CONV[rank]
        strides = tuple(a["strides"] or [1] * rank)
        dilations = tuple(a["dilations"] or [1] * rank)
        group = a["group"]
        kernel = a["kernel_shape"] or (self._shape(op.inputs[1]) or [None] * (rank + 2))[2:]
        pads, pads_of = self._pads(op, rank, kernel, strides, dilations)
        if pads_of is not None:
            if None in kernel:
                raise self._fail(op, "auto_pad SAME needs the kernel shape: give "
                                     "kernel_shape or a W of known shape")

            def conv_same(x, w, b=None):
                explicit = _torch_pads(pads_of(x.shape[2:]))
                return conv(F.pad(x, explicit), w, b, strides, 0, dilations, group)
            self._emit(op, conv_same)
            return
        if pads[:rank] == pads[rank:]:
            padding = tuple(pads[:rank])
            self._emit(op, lambda x, w, b=None: conv(x, w, b, strides, padding, dilations,
                                                      group))
            return
        explicit = _torch_pads(pads)
        self._emit(op, lambda x, w, b=None: conv(F.pad(x, explicit), w, b, strides, 0,
                                                 dilations, group))

    def visit_convtranspose(self, op, network):
        a = op.attributes
        rank = self._spatial_rank(op, op.inputs[1])
        if rank not in _CONV_TRANSPOSE:
            raise self._fail(op, f"{rank}-D transposed convolution is not supported")
        conv_t = _CONV_TRANSPOSE[rank]
        strides = list(a["strides"] or [1] * rank)
        dilations = list(a["dilations"] or [1] * rank)
        output_padding = list(a["output_padding"] or [0] * rank)
        group = a["group"]
        auto_pad = a.get("auto_pad") or "NOTSET"
        output_shape = a.get("output_shape")
        pads = list(a["pads"] or [0] * (2 * rank))
        if auto_pad == "VALID":
            pads = [0] * (2 * rank)
        if not output_shape and auto_pad in ("NOTSET", "VALID") and pads[:rank] == pads[rank:]:
            self._emit(op, lambda x, w, b=None: conv_t(
                x, w, b, strides, pads[:rank], output_padding, group, dilations))
            return

        def conv_transpose(x, w, b=None):
            # The full result, then cropped by the ONNX pads (which may be asymmetric
            # or follow from output_shape / auto_pad).
            geometry = conv_transpose_geometry(
                op.op_type, x.shape[2:], w.shape[2:], strides=strides, dilations=dilations,
                pads=a["pads"], auto_pad=auto_pad, output_padding=output_padding,
                output_shape=output_shape)
            y = conv_t(x, w, b, strides, 0, output_padding, group, dilations)
            key = (slice(None), slice(None)) + tuple(
                slice(b_, f - e) for b_, e, f in zip(geometry.pads_begin, geometry.pads_end,
                                                     geometry.full))
            return y[key]
        self._emit(op, conv_transpose)

    # -- pooling -------------------------------------------------------------------
    def _pool_setup(self, op):
        a = op.attributes
        kernel = list(a["kernel_shape"])
        rank = len(kernel)
        strides = list(a["strides"] or [1] * rank)
        dilations = list(a.get("dilations") or [1] * rank)
        pads, pads_of = self._pads(op, rank, kernel, strides, dilations)
        return rank, kernel, strides, dilations, pads, pads_of

    def visit_maxpool(self, op, network):
        rank, kernel, strides, dilations, pads, pads_of = self._pool_setup(op)
        if rank not in _MAX_POOL:
            raise self._fail(op, f"{rank}-D pooling is not supported")
        pool = _MAX_POOL[rank]
        ceil_mode = bool(op.attributes.get("ceil_mode"))
        want_indices = len(op.outputs) > 1 and bool(op.outputs[1])
        fits = pads is not None and pads[:rank] == pads[rank:] and all(
            2 * p <= k for p, k in zip(pads[:rank], kernel))
        if want_indices:
            if not fits or op.attributes.get("storage_order"):
                raise self._fail(op, "the Indices output is supported only with symmetric "
                                     "pads of at most half the kernel and storage_order 0")
            padding = pads[:rank]

            def max_pool_indices(x):
                y, indices = pool(x, kernel, strides, padding, dilations, ceil_mode, True)
                # PyTorch indexes each (n, c) plane; ONNX the whole tensor.
                plane = math.prod(x.shape[2:])
                offsets = torch.arange(x.shape[0] * x.shape[1], device=x.device) * plane
                return y, indices + offsets.view(x.shape[:2] + (1,) * rank)
            self._emit(op, max_pool_indices)
            return
        if fits:
            padding = pads[:rank]
            self._emit(op, lambda x: pool(x, kernel, strides, padding, dilations, ceil_mode))
            return

        def max_pool_padded(x):
            onnx_pads = pads if pads_of is None else pads_of(x.shape[2:])
            y = pool(F.pad(x, _torch_pads(onnx_pads), value=-math.inf), kernel, strides, 0,
                     dilations, ceil_mode)
            if ceil_mode:
                y = y[_ceil_crop(op.op_type, x.shape[2:], onnx_pads, kernel, strides,
                                   dilations)]
            return y
        self._emit(op, max_pool_padded)

    def visit_averagepool(self, op, network):
        rank, kernel, strides, dilations, pads, pads_of = self._pool_setup(op)
        if rank not in _AVG_POOL:
            raise self._fail(op, f"{rank}-D pooling is not supported")
        if any(d != 1 for d in dilations):
            raise self._fail(op, "dilated average pooling has no PyTorch kernel")
        pool = _AVG_POOL[rank]
        ceil_mode = bool(op.attributes.get("ceil_mode"))
        include_pad = bool(op.attributes.get("count_include_pad"))
        fits = pads is not None and pads[:rank] == pads[rank:] and all(
            2 * p <= k for p, k in zip(pads[:rank], kernel))
        if fits:
            padding = pads[:rank]
            self._emit(op, lambda x: pool(x, kernel, strides, padding, ceil_mode,
                                          include_pad))
            return

        def avg_pool_padded(x):
            onnx_pads = pads if pads_of is None else pads_of(x.shape[2:])
            explicit = _torch_pads(onnx_pads)
            y = pool(F.pad(x, explicit), kernel, strides, 0, ceil_mode, True)
            if not include_pad:
                # Divide by the number of real (unpadded) elements in each window.
                ones = torch.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype,
                                  device=x.device)
                y = y / pool(F.pad(ones, explicit), kernel, strides, 0, ceil_mode, True)
            if ceil_mode:
                y = y[_ceil_crop(op.op_type, x.shape[2:], onnx_pads, kernel, strides,
                                   dilations)]
            return y
        self._emit(op, avg_pool_padded)

    def visit_globalaveragepool(self, op, network):
        rank = self._rank(op.inputs[0])
        if rank is not None:
            axes = tuple(range(2, rank))
            self._emit(op, lambda x: x.mean(axes, keepdim=True))
        else:
            self._emit(op, lambda x: x.mean(tuple(range(2, x.dim())), keepdim=True))

    def visit_globalmaxpool(self, op, network):
        rank = self._rank(op.inputs[0])
        if rank is not None:
            axes = tuple(range(2, rank))
            self._emit(op, lambda x: x.amax(axes, keepdim=True))
        else:
            self._emit(op, lambda x: x.amax(tuple(range(2, x.dim())), keepdim=True))

    # -- normalisation, activation distributions, regularisation -------------------------
    def visit_batchnormalization(self, op, network):
        a = op.attributes
        eps, momentum = float(a["epsilon"]), float(a["momentum"])
        training = bool(a["training_mode"])
        if not training:
            if all(n in self.known for n in op.inputs[3:5]):
                # Running statistics stored in the model are constants: PyTorch's kernel.
                self._emit(op, lambda x, scale, bias, mean, var: torch.batch_norm(
                    x, scale, bias, mean, var, False, 0.0, eps, True))
                return

            def batch_norm(x, scale, bias, mean, var):
                if torch.is_grad_enabled() and (mean.requires_grad or var.requires_grad):
                    return _BatchNormInference.apply(x, scale, bias, mean, var, eps)
                return torch.batch_norm(x, scale, bias, mean, var, False, 0.0, eps, True)
            self._emit(op, batch_norm)
            return
        outputs = len(op.outputs)

        def batch_norm_training(x, scale, bias, mean, var):
            axes = [0] + list(range(2, x.dim()))
            batch_var, batch_mean = torch.var_mean(x, axes, correction=0)
            y = torch.batch_norm(x, scale, bias, None, None, True, 0.0, eps, True)
            running_mean = mean * momentum + batch_mean * (1 - momentum)
            running_var = var * momentum + batch_var * (1 - momentum)
            results = (y, running_mean, running_var, batch_mean, batch_var)[:outputs]
            return results if outputs > 1 else y
        self._emit(op, batch_norm_training)

    def visit_dropout(self, op, network):
        outputs = len(op.outputs)
        names = list(op.inputs) + ["", ""]
        ratio_name, mode_name = names[1], names[2]
        if mode_name and mode_name not in self.known:
            raise self._fail(op, "training_mode must be a constant (an initializer or "
                                 "a Constant node)")
        training = bool(self._scalar(mode_name)) if mode_name else False
        ratio = self._scalar(ratio_name) if ratio_name else 0.5
        if training and ratio is None:
            raise self._fail(op, "in training mode, ratio must be a constant")

        def dropout(x, *_):
            if training and ratio > 0:
                mask = torch.rand_like(x, dtype=torch.float32) >= ratio
                y = x * mask / (1.0 - ratio)
            else:
                y, mask = x, None
            if outputs == 1:
                return y
            return y, torch.ones_like(x, dtype=torch.bool) if mask is None else mask
        self._emit(op, dropout, op.inputs[:1])

    def _softmax(self, op, fn):
        axis = op.attributes["axis"]
        self._emit(op, lambda x: fn(x, axis))

    def visit_softmax(self, op, network):
        self._softmax(op, torch.softmax)

    def visit_logsoftmax(self, op, network):
        self._softmax(op, torch.log_softmax)

    def _labels(self, name):
        return (lambda t: t) if self._dtype(name) == torch.int64 else (lambda t: t.long())

    def _nll(self, op, labels):
        """F.nll_loss, or with class weights the same sum written out, since PyTorch's
        kernel gives no gradient for the weights (which are parameters here)."""
        reduction = op.attributes["reduction"]
        ignore = op.attributes["ignore_index"]

        def nll(log_prob, target, weights=None):
            target = labels(target)
            if weights is None:
                return F.nll_loss(log_prob, target, ignore_index=-100 if ignore is None
                                  else ignore, reduction=reduction)
            valid = None if ignore is None else target != ignore
            safe = target if valid is None else torch.where(valid, target, 0)
            picked = log_prob.gather(1, safe.unsqueeze(1)).squeeze(1)
            w = weights[safe] if valid is None else weights[safe] * valid
            loss = -picked * w
            if reduction == "sum":
                return loss.sum()
            if reduction == "mean":
                return loss.sum() / w.sum()
            return loss
        return nll

    def visit_softmaxcrossentropyloss(self, op, network):
        nll = self._nll(op, self._labels(op.inputs[1]))
        if len(op.outputs) > 1 and op.outputs[1]:
            def cross_entropy_with_log_prob(scores, target, weights=None):
                log_prob = torch.log_softmax(scores, 1)
                return nll(log_prob, target, weights), log_prob
            self._emit(op, cross_entropy_with_log_prob)
            return
        outputs = len(op.outputs)
        reduction = op.attributes["reduction"]
        ignore = op.attributes["ignore_index"]
        ignore = -100 if ignore is None else ignore  # PyTorch's default: none ignored
        labels = self._labels(op.inputs[1])

        def cross_entropy(scores, target, weights=None):
            if weights is None:
                loss = F.cross_entropy(scores, labels(target), ignore_index=ignore,
                                       reduction=reduction)
            else:
                loss = nll(torch.log_softmax(scores, 1), target, weights)
            return loss if outputs == 1 else (loss, None)
        self._emit(op, cross_entropy)

    def visit_negativeloglikelihoodloss(self, op, network):
        self._emit(op, self._nll(op, self._labels(op.inputs[1])))

    # -- shapes and data movement --------------------------------------------------------
    def visit_flatten(self, op, network):
        axis = op.attributes["axis"]
        rank = self._rank(op.inputs[0])
        if axis == 1 and rank is not None and rank >= 2:
            self._emit(op, lambda x: x.flatten(1))
            return

        def flatten(x):
            start = axis % x.dim() if axis < 0 else axis
            return x.reshape(math.prod(x.shape[:start]), math.prod(x.shape[start:]))
        self._emit(op, flatten)

    def visit_reshape(self, op, network):
        allowzero = bool(op.attributes.get("allowzero"))
        shape = self._ints(op.inputs[1])
        if shape is None:
            self._emit(op, lambda x, s: x.reshape(
                _reshape_target(s.tolist(), x.shape, allowzero)))
        elif allowzero or 0 not in shape:
            target = tuple(shape)
            self._emit(op, lambda x: x.reshape(target), op.inputs[:1])
        else:
            self._emit(op, lambda x: x.reshape(_reshape_target(shape, x.shape, False)),
                       op.inputs[:1])

    def visit_transpose(self, op, network):
        perm = op.attributes["perm"]
        if perm is None:
            self._emit(op, lambda x: x.permute(tuple(reversed(range(x.dim())))))
        else:
            perm = tuple(perm)
            self._emit(op, lambda x: x.permute(perm))

    def visit_concat(self, op, network):
        axis = op.attributes["axis"]
        self._emit(op, lambda *xs: torch.cat(xs, axis))

    def visit_split(self, op, network):
        axis = op.attributes["axis"]
        count = len(op.outputs)
        sizes = self._ints(op.inputs[1]) if len(op.inputs) > 1 and op.inputs[1] else None
        if len(op.inputs) > 1 and op.inputs[1] and sizes is None:
            self._emit(op, lambda x, s: torch.split(x, s.tolist(), axis))
            return
        if count == 1:
            self._emit(op, lambda x: x, op.inputs[:1])
        elif sizes:
            sizes = list(sizes)
            self._emit(op, lambda x: torch.split(x, sizes, axis), op.inputs[:1])
        else:
            self._emit(op, lambda x: torch.chunk(x, count, axis), op.inputs[:1])

    def _axes(self, op):
        """(axes or None, whether they are given as a runtime tensor): the second
        input."""
        if len(op.inputs) > 1 and op.inputs[1]:
            axes = self._ints(op.inputs[1])
            return axes, axes is None
        return None, False

    def visit_squeeze(self, op, network):
        axes, runtime = self._axes(op)
        if runtime:
            self._emit(op, lambda x, a: torch.squeeze(x, tuple(a.tolist())))
        elif axes is None:
            self._emit(op, torch.squeeze, op.inputs[:1])
        else:
            axes = tuple(axes)
            self._emit(op, lambda x: torch.squeeze(x, axes), op.inputs[:1])

    def visit_unsqueeze(self, op, network):
        axes, runtime = self._axes(op)
        if runtime:
            self._emit(op, lambda x, a: _unsqueeze_fn(a.tolist())(x))
            return
        if axes is None:
            raise self._fail(op, "Unsqueeze needs axes", ShapeError)
        rank = self._rank(op.inputs[0])
        if rank is not None and len(axes) == 1:
            axis = axes[0] % (rank + 1)
            self._emit(op, lambda x: x.unsqueeze(axis), op.inputs[:1])
        else:
            self._emit(op, _unsqueeze_fn(axes), op.inputs[:1])

    def visit_shape(self, op, network):
        start = op.attributes.get("start") or 0
        end = op.attributes.get("end")
        key = slice(start, end)
        shape = self._shape(op.inputs[0])
        if shape is not None:
            value = torch.tensor(list(shape)[key], dtype=torch.int64)
            self._emit(op, lambda: value, [])
            return
        self._emit(op, lambda x: torch.tensor(x.shape[key], dtype=torch.int64,
                                              device=x.device))

    def visit_size(self, op, network):
        shape = self._shape(op.inputs[0])
        if shape is not None:
            value = torch.tensor(math.prod(shape), dtype=torch.int64)
            self._emit(op, lambda: value, [])
            return
        self._emit(op, lambda x: torch.tensor(x.numel(), dtype=torch.int64, device=x.device))

    def visit_gather(self, op, network):
        axis = op.attributes["axis"]
        indices = self._known(op.inputs[1])
        if indices is not None and indices.dim() == 0:
            index = int(indices)
            self._emit(op, lambda x: x.select(axis, index), op.inputs[:1])
            return
        rank = self._rank(op.inputs[0])
        to_long = self._dtype(op.inputs[1]) != torch.int64
        if rank is not None or axis >= 0:
            # Advanced indexing with one index tensor is Gather, negatives included.
            lead = (slice(None),) * (axis % rank if axis < 0 else axis)
            if to_long:
                self._emit(op, lambda x, i: x[lead + (i.long(),)])
            else:
                self._emit(op, lambda x, i: x[lead + (i,)])
            return
        self._emit(op, lambda x, i: x[(slice(None),) * (axis % x.dim()) + (i.long(),)])

    def visit_slice(self, op, network):
        names = list(op.inputs) + ["", ""]
        starts, ends = self._ints(names[1]), self._ints(names[2])
        axes = self._ints(names[3]) if names[3] else None
        steps = self._ints(names[4]) if names[4] else None
        runtime = (starts is None or ends is None or (names[3] and axes is None)
                   or (names[4] and steps is None))
        if runtime:
            def slice_dynamic(x, s, e, a=None, st=None):
                s, e = s.tolist(), e.tolist()
                a = list(range(len(s))) if a is None else a.tolist()
                st = [1] * len(s) if st is None else st.tolist()
                return _slice(x, s, e, a, st)
            self._emit(op, slice_dynamic)
            return
        axes = list(range(len(starts))) if axes is None else list(axes)
        steps = [1] * len(starts) if steps is None else list(steps)
        rank = self._rank(op.inputs[0])
        if rank is not None:
            axes = [a % rank for a in axes]
        if all(a >= 0 for a in axes) and all(s > 0 for s in steps):
            key = [slice(None)] * (max(axes) + 1 if axes else 0)
            for start, end, axis, step in zip(starts, ends, axes, steps):
                key[axis] = slice(start, end, step)
            key = tuple(key)
            self._emit(op, lambda x: x[key], op.inputs[:1])
            return
        self._emit(op, lambda x: _slice(x, starts, ends, axes, steps), op.inputs[:1])

    def visit_constant(self, op, network):
        a = op.attributes
        if a.get("value") is not None:
            value = onnx.numpy_helper.to_array(a["value"])
        elif a.get("value_float") is not None:
            value = np.array(a["value_float"], np.float32)
        elif a.get("value_floats") is not None:
            value = np.array(a["value_floats"], np.float32)
        elif a.get("value_int") is not None:
            value = np.array(a["value_int"], np.int64)
        elif a.get("value_ints") is not None:
            value = np.array(a["value_ints"], np.int64)
        else:
            raise self._fail(op, "only tensor, float(s) and int(s) constants are "
                                 "supported (not sparse or string ones)")
        if value.dtype.kind in "OUS":
            raise self._fail(op, "string tensors have no PyTorch type")
        tensor = _as_tensor(value)
        self._emit(op, lambda: tensor, [])

    def visit_constantofshape(self, op, network):
        given = op.attributes.get("value")
        value = (onnx.numpy_helper.to_array(given) if given is not None
                 else np.zeros(1, np.float32))
        fill, dtype = value.reshape(-1)[0].item(), torch_dtype(
            onnx.helper.np_dtype_to_tensor_dtype(value.dtype))
        self._emit(op, lambda shape: torch.full(shape.tolist(), fill, dtype=dtype,
                                                device=shape.device))

    def visit_expand(self, op, network):
        shape = self._ints(op.inputs[1])
        if shape is None:
            self._emit(op, lambda x, s: x.expand(torch.broadcast_shapes(
                x.shape, tuple(s.tolist()))))
            return
        x_shape = self._shape(op.inputs[0])
        if x_shape is not None:
            target = torch.broadcast_shapes(x_shape, tuple(shape))
            self._emit(op, lambda x: x.expand(target), op.inputs[:1])
        else:
            shape = tuple(shape)
            self._emit(op, lambda x: x.expand(torch.broadcast_shapes(x.shape, shape)),
                       op.inputs[:1])

    def visit_range(self, op, network):
        def arange(start, limit, delta):
            return torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype,
                                device=start.device)
        self._emit(op, arange)

    def visit_pad(self, op, network):
        a = op.attributes
        mode = _PAD_MODES.get(a.get("mode") or "constant")
        if mode is None:
            raise self._fail(op, f"pad mode {a.get('mode')!r} is not supported "
                                 f"(constant, reflect, edge, wrap are)")
        names = list(op.inputs) + ["", "", ""]
        value_name = ""
        pads = self._ints(names[1])
        axes = self._ints(names[3]) if names[3] else None
        if pads is None or (names[3] and axes is None):
            raise self._fail(op, "pads and axes must be constants (initializers or "
                                 "Constant nodes)")
        value = self._scalar(names[2]) if names[2] else 0
        if names[2] and value is None:  # a parameter (floating initializer)
            value_name = names[2]

        def torch_pads(rank):
            chosen = list(range(rank)) if axes is None else [x % rank for x in axes]
            half = len(pads) // 2
            full = [0] * (2 * rank)
            for i, axis in enumerate(chosen):
                full[axis], full[rank + axis] = pads[i], pads[half + i]
            result = _torch_pads(full)
            while result and result[-1] == 0 and result[-2] == 0:
                result = result[:-2]  # modes other than 'constant' pad only the
            return result             # trailing axes: drop the unpadded leading ones

        rank = self._rank(op.inputs[0])
        if rank is not None:
            explicit = torch_pads(rank)
            pads_of = lambda x: explicit  # noqa: E731
        else:
            pads_of = lambda x: torch_pads(x.dim())  # noqa: E731
        if value_name:
            # pad(x - v) + v is x inside and v outside, and differentiable in v.
            self._emit(op, lambda x, v: F.pad(x - v, pads_of(x)) + v,
                       [op.inputs[0], value_name])
        elif mode == "constant":
            self._emit(op, lambda x: F.pad(x, pads_of(x), "constant", value), op.inputs[:1])
        else:
            self._emit(op, lambda x: F.pad(x, pads_of(x), mode), op.inputs[:1])

    def _reduce(self, op, fn):
        keepdims = bool(op.attributes.get("keepdims", 1))
        noop = bool(op.attributes.get("noop_with_empty_axes"))
        axes, runtime = self._axes(op)
        if runtime:
            def reduce_dynamic(x, a):
                dims = a.tolist()
                if not dims:
                    if noop:
                        return x
                    dims = list(range(x.dim()))
                return fn(x, dims, keepdims)
            self._emit(op, reduce_dynamic)
            return
        if not axes:
            if noop:
                self._emit(op, lambda x: x, op.inputs[:1])
            else:
                self._emit(op, lambda x: fn(x, tuple(range(x.dim())), keepdims),
                           op.inputs[:1])
            return
        axes = tuple(axes)
        self._emit(op, lambda x: fn(x, axes, keepdims), op.inputs[:1])

    def visit_reducemean(self, op, network):
        self._reduce(op, torch.mean)

    def visit_reducesum(self, op, network):
        self._reduce(op, torch.sum)

    def visit_reducemax(self, op, network):
        self._reduce(op, torch.amax)


# Operators whose visit_* exist above, for documentation and error messages.
SUPPORTED_OPERATORS = sorted(name[len("visit_"):] for name in dir(PyTorchVisitor)
                             if name.startswith("visit_") and name not in {
                                 "visit_model", "visit_graph", "visit_initializer",
                                 "visit_input", "visit_output", "visit_graph_end"})

__all__ = ["PyTorchVisitor", "SUPPORTED_OPERATORS", "torch_dtype"]
