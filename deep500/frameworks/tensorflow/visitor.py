"""ONNX → TensorFlow 2: one prebuilt closure of TensorFlow operations per ONNX node.

``TensorFlowVisitor`` walks a parsed model (``OnnxBaseVisitor``). For every node,
``visit_<op>`` reads the node's attributes once, at graph-build time, and appends to the
network's :class:`Plan` a step ``(fn, input keys, output key(s))``: ``fn`` is a closure
of TensorFlow operations implementing the operator's ONNX semantics at the opset the
model imports (https://onnx.ai/onnx/operators/). A run is a loop over this flat list,
eager or traced once into a ``tf.function``.

Layout. ONNX images are channels-first (NCHW). TensorFlow's CPU convolution and pooling
kernels, and their gradients, take channels-last (NHWC) tensors. Convolution, pooling,
global pooling and batch normalization therefore compute in channels-last; with
``propagate_layout=True`` (default) their outputs stay channels-last through operators
that work in either layout (elementwise operators, Concat and Reduce* with remapped
axes, Transpose and Shape through composed permutations), and a tensor is transposed
back to ONNX's layout only where an operator needs it, once per run. With
``propagate_layout=False`` every such operator transposes in and out (the boundary
conversion). The channels-last copy of tensor ``t`` is keyed ``t|cl`` (``t|clR`` for a
lower-rank operand aligned to a rank-R tensor).

Parameters are stored in the layout their operators compute in, when only such
operators read them (:class:`ParameterLayout`): convolution weights as (k..., I, O),
Gemm weights with transB=1 transposed, and the weight of a Gemm that reads a Flatten of
a channels-last tensor with its rows permuted, so that the Flatten is a reshape. A run
then transposes no weights; ``fetch_tensor``, ``feed_tensor`` and gradients convert.

Constant data stays in NumPy: non-floating initializers and ``Constant`` nodes, and
``Shape`` of a tensor whose shape is static. Operators typical of shape computations
(Gather, Unsqueeze, Concat, Slice, Cast, arithmetic, ...) keep NumPy operands in NumPy,
so that shape arithmetic costs no TensorFlow operations and yields static shapes.
"""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import onnx
import onnx.numpy_helper

from deep500.frameworks.tensorflow._tf import tf
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError
from deep500.frameworks.tensorflow.ops_sequence import SequenceOps
from deep500.frameworks.tensorflow.ops_tensor import TensorOps
from deep500.utils.onnx_interop.visitor import OnnxBaseVisitor
from deep500.utils.onnx_interop.window import (resolve_pads, same_pads, window_counts,
                                               window_geometry)

CL = "|cl"            # key suffix of a tensor's channels-last copy
FLAT = "|flat_cl"     # key suffix of a flattened channels-last tensor
UNUSED = "|unused"    # key of outputs a node computes but the graph does not name
ONNX_LAYOUT, CHANNELS_LAST = "onnx", "channels_last"


# -- layouts ----------------------------------------------------------------------------
def to_channels_last_perm(rank: int) -> tuple:
    """Permutation taking (N, C, D1, ..., Dk) to (N, D1, ..., Dk, C)."""
    return (0,) + tuple(range(2, rank)) + (1,)


def to_onnx_perm(rank: int) -> tuple:
    """Permutation taking (N, D1, ..., Dk, C) to (N, C, D1, ..., Dk)."""
    return (0, rank - 1) + tuple(range(1, rank - 1))


def channels_last_axis(axis: int, rank: int) -> int:
    """Where ONNX axis ``axis`` of a rank-``rank`` tensor sits in channels-last layout."""
    axis %= rank
    return 0 if axis == 0 else rank - 1 if axis == 1 else axis - 1


def _dims(x) -> list:
    """Static dimensions (None where unknown) of a tensor, variable or array."""
    return list(x.shape)


def _permute(x, perm):
    """``tf.transpose``, or a reshape when the permutation moves no data (the axes
    longer than 1 keep their order, as with one channel or 1×1 maps)."""
    dims = _dims(x)
    if None not in dims:
        kept = [p for p in perm if dims[p] != 1]
        if kept == sorted(kept):
            return tf.reshape(x, [dims[p] for p in perm])
    return tf.transpose(x, perm)


def to_channels_last(x):
    return _permute(x, to_channels_last_perm(len(x.shape)))


def to_onnx_layout(x):
    return _permute(x, to_onnx_perm(len(x.shape)))


def _aligned_channels_last(rank: int):
    """A function taking a lower-rank ONNX operand to the channels-last form of its
    broadcast against a rank-``rank`` tensor (leading size-1 axes, then permuted)."""
    perm = to_channels_last_perm(rank)

    def align(x):
        missing = rank - len(x.shape)
        if isinstance(x, np.ndarray):
            return np.transpose(x.reshape((1,) * missing + x.shape), perm)
        return tf.transpose(tf.reshape(x, [1] * missing + _shape_list(x)), perm)
    return align


def _shape_list(x) -> list:
    """Dimensions, with a dynamic tensor for those unknown statically."""
    dims = _dims(x)
    if None not in dims:
        return dims
    dynamic = tf.shape(x)
    return [d if d is not None else dynamic[i] for i, d in enumerate(dims)]


# -- small helpers used by the closures ------------------------------------------------
def _is_np(*values) -> bool:
    return all(isinstance(v, np.ndarray) for v in values)


def _static(value):
    """The value of a constant operand as a NumPy array, or None if only known at run
    time (inside a traced function)."""
    if value is None or isinstance(value, np.ndarray):
        return value
    return tf.get_static_value(value)


def _ints(value) -> list[int] | None:
    static = _static(value)
    return None if static is None else [int(v) for v in np.reshape(static, -1)]


def _tf_dtype(x):
    return tf.as_dtype(x.dtype)


def _like(value, x):
    """``value`` in ``x``'s dtype (ONNX lets some parameters differ in precision)."""
    if value is None or tf.as_dtype(value.dtype) == _tf_dtype(x):
        return value
    return tf.cast(value, _tf_dtype(x))


def _onnx_to_np_dtype(elem_type: int) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


# Element types TensorFlow computes with (it stores, but cannot cast, float8 and int4).
TF_DTYPE_NAMES = frozenset(("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                            "uint32", "uint64", "float16", "bfloat16", "float32", "float64"))


def tf_supports_dtype(dtype) -> bool:
    return dtype is not None and np.dtype(dtype).name in TF_DTYPE_NAMES


def _is_floating(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating)


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# -- convolution and pooling geometry ---------------------------------------------------
def _tf_padding(sizes, kernel, strides, pads):
    """TensorFlow's padding for ONNX's per-axis (begin, end) ``pads`` of a window
    operation: ``("SAME" or "VALID", None)`` where these select the same windows, else
    ``("VALID", explicit zero padding)``. The end padding is cut to what the last window
    reads. (TensorFlow's gradient kernels for explicit padding are 2-4x slower than
    for SAME, and slower than a separate Pad.)"""
    trimmed = []
    for size, k, s, (begin, end) in zip(sizes, kernel, strides, pads):
        if size is not None:
            out = (size + begin + end - k) // s + 1
            end = min(end, max(0, (out - 1) * s + k - size - begin))
        trimmed.append((begin, end))
    if not any(b or e for b, e in trimmed):
        return "VALID", None
    if None not in sizes and trimmed == list(zip(*same_pads(sizes, kernel, strides,
                                                            [1] * len(kernel)))):
        return "SAME", None
    return "VALID", [[0, 0]] + [list(p) for p in trimmed] + [[0, 0]]


def _dilate_filter(w, dilations):
    """A (k1, ..., kn, I, O) filter with dilation - 1 zeros between taps, so that an
    undilated convolution computes the dilated one (TensorFlow's CPU kernels have no
    gradients for dilations > 1)."""
    rank = len(w.shape)
    for axis, rate in enumerate(dilations):
        if rate == 1:
            continue
        shape = _shape_list(w)
        taps = shape[axis]
        spaced = tf.pad(tf.expand_dims(w, axis + 1),
                        [[0, rate - 1] if a == axis + 1 else [0, 0] for a in range(rank + 1)])
        shape[axis] = taps * rate
        w = tf.reshape(spaced, shape)[(slice(None),) * axis + (slice(0, rate * (taps - 1) + 1),)]
    return w


def _conv_same_group(x, w, strides, padding):
    """One ungrouped convolution of channels-last ``x`` (already padded) with a
    (k..., I, O) filter."""
    if len(strides) == 2:
        return tf.nn.conv2d(x, w, [1, *strides, 1], padding)
    return tf.nn.conv3d(x, w, [1, *strides, 1], padding)


def _conv_channels_last(x, w, strides, padding, group):
    """ONNX Conv on channels-last ``x`` and a (k..., C/group, M) filter ``w``, with
    ``padding`` from :func:`_tf_padding` (of the 2-D form for a 1-D convolution)."""
    if len(strides) == 1:
        # A 1-D convolution is a 2-D one over a height of 1.
        y = _conv_channels_last(tf.expand_dims(x, 1), tf.expand_dims(w, 0), [1, *strides],
                                padding, group)
        return tf.squeeze(y, 1)
    mode, explicit = padding
    if explicit is not None:
        x = tf.pad(x, explicit)
    if group == 1:
        return _conv_same_group(x, w, strides, mode)
    channels = x.shape[-1]
    if len(strides) == 2 and group == channels and strides[0] == strides[1]:
        # Depthwise: output channel c·m + j reads input channel c, as ONNX's grouping.
        # (Explicit padding must stay a separate Pad: Grappler's fusion of a depthwise
        # convolution with explicit padding and a BiasAdd aborts the process, TF 2.21.)
        kh, kw, _, outputs = _shape_list(w)
        filters = tf.reshape(w, [kh, kw, channels, outputs // channels])
        return tf.nn.depthwise_conv2d(x, filters, [1, *strides, 1], mode)
    # TensorFlow's CPU kernels have no gradient for grouped convolutions: one per group.
    return tf.concat([_conv_same_group(xg, wg, strides, mode)
                      for xg, wg in zip(tf.split(x, group, axis=-1),
                                        tf.split(w, group, axis=-1))], axis=-1)


def _average_factor(geometry, count_include_pad, dtype):
    """Per output position, (kernel size) / (elements ONNX averages over), shaped to
    multiply a channels-last VALID average pool of the padded input."""
    count = window_counts(geometry, count_include_pad)
    factor = (np.prod(geometry.kernel) / count).astype(dtype)
    return None if np.all(factor == 1) else factor[np.newaxis, ..., np.newaxis]


def _pool_by_slices(x, kernel, strides, dilations, kind):
    """Max or sum pooling of a channels-last (already padded) tensor, one strided slice
    per kernel tap: TensorFlow's pooling kernels take no dilations."""
    sizes = x.shape[1:-1]
    outs = [(n - (k - 1) * d - 1) // s + 1 for n, k, s, d in zip(sizes, kernel, strides,
                                                                  dilations)]
    result = None
    for taps in itertools.product(*[range(k) for k in kernel]):
        index = (slice(None),) + tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                                       for t, d, o, s in zip(taps, dilations, outs, strides))
        part = x[index + (slice(None),)]
        if result is None:
            result = part
        else:
            result = tf.maximum(result, part) if kind == "MAX" else result + part
    return result


# -- parameter layouts -----------------------------------------------------------------
class ParameterLayout:
    """How a parameter is stored when its operator computes in another layout than
    ONNX's: ``stored = reshape(transpose(reshape(value, split), perm), merged)`` (no
    reshapes when ``split`` is None). Stored parameters spare the run a transpose per
    call; fetching, feeding and gradients convert at the network's boundary."""

    def __init__(self, shape, perm, split=None, merged=None):
        self.shape = tuple(shape)          # the ONNX shape
        self.perm = tuple(perm)
        self.split = None if split is None else tuple(split)
        self.merged = None if merged is None else tuple(merged)
        self._inverse = tuple(np.argsort(self.perm))

    @classmethod
    def filter(cls, shape):
        """A convolution weight (O, I, k1, ..., kn) stored as (k1, ..., kn, I, O)."""
        return cls(shape, tuple(range(2, len(shape))) + (1, 0))

    @classmethod
    def transposed(cls, shape):
        """A matrix stored transposed."""
        return cls(shape, (1, 0))

    @classmethod
    def flattened_channels_last(cls, shape, channels, spatial, transposed):
        """A Gemm weight multiplying a flattened (C, d1, ..., dn) tensor, stored as the
        (d1·…·dn·C, out) matrix multiplying the flattened channels-last tensor."""
        n = len(spatial)
        if transposed:   # (out, C·d...) → (out, C, d...) → (d..., C, out)
            split = (shape[0], channels, *spatial)
            perm = tuple(range(2, n + 2)) + (1, 0)
        else:            # (C·d..., out) → (C, d..., out) → (d..., C, out)
            split = (channels, *spatial, shape[1])
            perm = tuple(range(1, n + 1)) + (0, n + 1)
        return cls(shape, perm, split, (channels * math.prod(spatial), -1))

    def to_stored(self, value: np.ndarray) -> np.ndarray:
        value = value.reshape(self.split) if self.split else value
        value = np.transpose(value, self.perm)
        return np.ascontiguousarray(value.reshape(self.merged) if self.merged else value)

    def to_onnx(self, stored: np.ndarray) -> np.ndarray:
        """The ONNX form of a stored value or gradient (a view when no reshape is
        needed)."""
        if self.split:
            stored = stored.reshape([self.split[p] for p in self.perm])
        value = np.transpose(stored, self._inverse)
        return value.reshape(self.shape) if self.split else value

    def _key(self):
        return self.shape, self.perm, self.split, self.merged

    def __eq__(self, other):
        return isinstance(other, ParameterLayout) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


# -- the plan ----------------------------------------------------------------------------
class Plan:
    """What a network runs: ``steps``, a flat list of ``(fn, input keys, output key)``
    (a tuple of keys when ``fn`` returns several tensors), and per step the ONNX
    operation it belongs to (``None`` for the final layout conversions of outputs)."""

    def __init__(self):
        self.steps: list[tuple] = []
        self.step_ops: list = []
        self.constants: dict = {}      # build-time values: converted constants, '' → None
        self.layouts: dict[str, str] = {}
        # ONNX name → (key, function) of tensors held in another layout
        self.converters: dict[str, tuple] = {}
        self.parameter_layouts: dict[str, ParameterLayout] = {}
        self.outputs: list[str] = []
        # Graph inputs whose values decide shapes (axes, pads, slice bounds, ...): a
        # traced function takes them as constants, retracing when they change.
        self.static_inputs: set[str] = set()
        self.node_steps: list[tuple] = []   # (op, [steps]) in order, for operator events

    def add(self, op, fn, inputs, output) -> None:
        self.steps.append((fn, tuple(inputs), output))
        self.step_ops.append(op)

    def finish(self) -> None:
        groups: list[tuple] = []
        for op, step in zip(self.step_ops, self.steps):
            if groups and groups[-1][0] is op:
                groups[-1][1].append(step)
            else:
                groups.append((op, [step]))
        self.node_steps = groups


# -- the visitor -------------------------------------------------------------------------
class TensorFlowVisitor(TensorOps, SequenceOps, OnnxBaseVisitor):
    """Builds a :class:`~deep500.frameworks.tensorflow.network.TensorFlowNetwork`'s plan.

    Args:
        propagate_layout: keep channels-last tensors channels-last between operators
            that allow it (see the module docstring); False converts at every
            convolution, pooling and normalization.
    """
    framework = "Deep500's TensorFlow executor"
    errors = "tensorflow"

    def __init__(self, propagate_layout: bool = True):
        self.propagate_layout = propagate_layout

    # -- model hooks ---------------------------------------------------------------
    def visit_graph(self, model, network) -> None:
        network.name = model.name
        network.operations = list(model.operations)
        network.shapes = {name: info.shape for name, info in model.value_info.items()}
        network.dtypes = {name: info.dtype for name, info in model.value_info.items()}
        self._parameters = set(model.parameters)
        for name, value in model.constants.items():   # from attributes of older opsets
            network.constants[name] = value
        if model.proto is not None:
            graph = model.proto.graph
            for value in list(graph.input) + list(graph.output):
                kind = value.type.WhichOneof("value")
                if kind != "tensor_type":
                    raise UnsupportedError(
                        f"{self.framework}: graph input or output {value.name!r} of model "
                        f"'{model.name}' is a {kind or 'value of unknown type'}; only "
                        f"tensors are supported")
        for info in list(model.feed_inputs) + list(model.outputs):
            if info.dtype is not None and not tf_supports_dtype(info.dtype):
                raise UnsupportedError(f"{self.framework}: tensor {info.name!r} of model "
                                       f"'{model.name}' has element type "
                                       f"{np.dtype(info.dtype).name}, which TensorFlow cannot "
                                       f"compute with")
        self.begin(network)

    def visit_initializer(self, name, value, network) -> None:
        """The model's parameters become trainable variables; other floating-point
        initializers (batch-norm running statistics) non-trainable ones, the rest
        constants."""
        network.feed_tensor(name, value, is_param=name in self._parameters)

    def visit_input(self, value_info, network) -> None:
        if value_info.name not in network.inputs:
            network.inputs.append(value_info.name)

    def visit_output(self, value_info, network) -> None:
        network.add_output(value_info.name)

    def visit_graph_end(self, model, network) -> None:
        network.set_plan(self.finish())

    # -- building ------------------------------------------------------------------
    def begin(self, network, operations=None) -> None:
        self.network = network
        self.plan = Plan()
        self.plan.constants[""] = None
        self.produced: set[str] = set()
        self.ranks: dict[str, int] = {}
        self.flattened: dict[str, tuple] = {}    # flattened channels-last tensors
        self.op = None
        self.consumers: dict[str, list] = {}
        self.producers: dict[str, object] = {}
        for op in network.operations if operations is None else operations:
            for index, name in enumerate(op.inputs):
                if name:
                    self.consumers.setdefault(name, []).append((op, index))
            for name in op.outputs:
                self.producers[name] = op

    def build(self, network, operations) -> Plan:
        """The plan of ``operations`` (in topological order) for ``network``."""
        self.begin(network, operations)
        with tf.device(network.device.tf_device()):
            for op in operations:
                self.visitor_for(op)(op, network)
            return self.finish()

    def finish(self) -> Plan:
        plan = self.plan
        self.op = None
        for name in self.network.outputs:
            plan.outputs.append(self.key(name))
        plan.finish()
        self.network.store_parameters(plan.parameter_layouts)
        return plan

    # -- parameters stored in their operator's layout -------------------------------
    def _only_consumed_as(self, name: str, accept) -> bool:
        """Whether ``name`` is a parameter that only nodes read, each through an
        input for which ``accept(op, index)`` holds."""
        uses = self.consumers.get(name, [])
        return (name in self.network.variables and name not in self.network.outputs
                and bool(uses) and all(accept(op, index) for op, index in uses))

    def _store_parameter(self, name: str, layout: ParameterLayout) -> None:
        self.plan.parameter_layouts[name] = layout

    def _stored_shape(self, name: str):
        """The ONNX shape of a parameter (also when already stored in a layout)."""
        layout = self.network.layouts.get(name)
        return layout.shape if layout is not None else tuple(
            self.network.variables[name].shape)

    def visitor_for(self, op):
        method = super().visitor_for(op)

        def visit(op, network):
            self.op = op
            method(op, network)
        return visit

    # -- tensors while building ----------------------------------------------------
    def _exists(self, key: str) -> bool:
        net = self.network
        return (key in self.produced or key in self.plan.constants or key in net.variables
                or key in net.constants or key in net.inputs)

    def _value(self, name: str):
        """The build-time value of a constant tensor (not a parameter), else None."""
        return self.network.constants.get(name)

    def rank(self, name: str) -> int | None:
        if name in self.ranks:
            return self.ranks[name]
        net = self.network
        for store in (net.variables, net.constants):
            if name in store:
                return len(store[name].shape)
        shape = net.shapes.get(name)
        return None if shape is None else len(shape)

    def layout(self, name: str) -> str:
        """The layout a tensor is produced in."""
        return self.plan.layouts.get(name, ONNX_LAYOUT)

    def _missing(self, name: str) -> Deep500Error:
        return Deep500Error(
            f"Network '{self.network.name}': node '{self.op.name if self.op else '?'}' reads "
            f"tensor {name!r}, which no earlier node computes and which is neither an input "
            f"nor an initializer; feed it, or add the node computing it before this one")

    def key(self, name: str, layout: str = ONNX_LAYOUT) -> str:
        """The run-time key of tensor ``name`` in ``layout``; emits a conversion step
        the first time a layout is asked for that the tensor was not produced in."""
        if not name:
            return ""
        cl_key = name + CL
        has_onnx, has_cl = self._exists(name), self._exists(cl_key)
        if not (has_onnx or has_cl or name in self.plan.converters):
            raise self._missing(name)
        if layout == ONNX_LAYOUT:
            if not has_onnx:
                source, fn = self.plan.converters[name]
                self._convert(source, name, fn)
            return name
        if has_cl:
            return cl_key
        value = self._value(name)
        if value is not None:
            self.plan.constants[cl_key] = (np.transpose(value, to_channels_last_perm(value.ndim))
                                           if isinstance(value, np.ndarray)
                                           else to_channels_last(value))
            return cl_key
        self._convert(name, cl_key, to_channels_last)
        return cl_key

    def aligned_key(self, name: str, rank: int) -> str:
        """The key of ``name`` as an operand of an elementwise operator computing in
        channels-last at rank ``rank`` (broadcasting preserved)."""
        if not name:
            return ""
        own = self.rank(name)
        if own == rank:
            return self.key(name, CHANNELS_LAST)
        if own == 0:
            return self.key(name)
        aligned = f"{name}{CL}{rank}"
        if not self._exists(aligned):
            source = self.key(name)
            align = _aligned_channels_last(rank)
            value = self._value(name)
            if value is not None:
                self.plan.constants[aligned] = align(value)
            else:
                self._emit(align, [source], aligned)
        return aligned

    def static_key(self, name: str) -> str:
        """The key of an operand whose value the closure needs at trace time: the graph
        inputs it is computed from become static inputs (Shape and Size depend on shapes
        only, which a trace fixes)."""
        pending, seen = [name], set()
        while pending:
            tensor = pending.pop()
            if not tensor or tensor in seen:
                continue
            seen.add(tensor)
            if tensor in self.network.inputs:
                self.plan.static_inputs.add(tensor)
            producer = self.producers.get(tensor)
            if producer is not None and producer.op_type not in ("Shape", "Size"):
                pending.extend(producer.inputs)
        return self.key(name)

    def _dynamic_error(self, what: str) -> UnsupportedError:
        return self._unsupported(f"{what} computed at run time inside a traced function "
                                 f"are not supported", "use mode='eager'")

    def _convert(self, source: str, target: str, fn) -> None:
        self._emit(fn, [source], target)

    def _emit(self, fn, inputs, output) -> None:
        self.plan.add(self.op, fn, inputs, output)
        for key in (output,) if isinstance(output, str) else output:
            self.produced.add(key)

    def _output_key(self, name: str, layout: str = ONNX_LAYOUT, rank: int | None = None
                    ) -> str:
        if not name:
            return UNUSED
        if rank is not None:
            self.ranks[name] = rank
        if layout == CHANNELS_LAST:
            self.plan.layouts[name] = CHANNELS_LAST
            self.plan.converters[name] = (name + CL, to_onnx_layout)
            return name + CL
        self.plan.layouts.pop(name, None)
        self.plan.converters.pop(name, None)
        return name

    def emit(self, fn, inputs, outputs, layout: str = ONNX_LAYOUT, rank: int | None = None
             ) -> None:
        """Append a node's step. ``inputs`` are keys; ``outputs`` are ONNX names (a
        list when ``fn`` returns a tuple), produced in ``layout`` (the first output only
        when several)."""
        if isinstance(outputs, str):
            self._emit(fn, inputs, self._output_key(outputs, layout, rank))
            if layout == CHANNELS_LAST and not self.propagate_layout:
                self.key(outputs)   # the boundary conversion, straight away
            return
        keys = tuple(self._output_key(name, layout if i == 0 else ONNX_LAYOUT,
                                      rank if i == 0 else None)
                     for i, name in enumerate(outputs))
        # Distinct unused outputs must not share a key.
        keys = tuple(k if k != UNUSED else f"{UNUSED}{i}" for i, k in enumerate(keys))
        self._emit(fn, inputs, keys)
        if layout == CHANNELS_LAST and not self.propagate_layout and outputs[0]:
            self.key(outputs[0])

    def _channels_last_rank(self, names) -> int | None:
        """The rank at which an elementwise operator over ``names`` computes in
        channels-last, or None to compute in ONNX's layout."""
        if not self.propagate_layout:
            return None
        present = [n for n in names if n]
        ranks = [self.rank(n) for n in present]
        if not present or None in ranks:
            return None
        rank = max(ranks)
        if rank < 3:
            return None
        if any(self.layout(n) == CHANNELS_LAST and r == rank for n, r in zip(present, ranks)):
            return rank
        return None

    def _unsupported(self, what: str, advice: str = "") -> UnsupportedError:
        op = self.op
        return UnsupportedError(f"{self.framework}: node '{op.name}' ({op.op_type}, opset "
                                f"version {op.original_version}) of network "
                                f"'{self.network.name}': {what}" + (f"; {advice}" if advice
                                                                    else ""))

    def _check_rank(self, name: str, rank: int, why: str) -> None:
        """A known rank of input ``name`` other than ``rank`` is a ShapeError here: some
        of TensorFlow's kernels (oneDNN's convolution) abort the process on it."""
        known = self.rank(name)
        if known is not None and known != rank:
            op = self.op
            raise ShapeError(f"{self.framework}: node '{op.name}' ({op.op_type}) of network "
                             f"'{self.network.name}': input {name!r} has rank {known}, but "
                             f"{why}, so it needs rank {rank}; fix the model's shapes")

    # -- families ------------------------------------------------------------------
    def _same_layout(self, op, fn) -> None:
        """An operator computing each element from the same element of its one tensor
        input (other inputs are attributes-like scalars)."""
        x = op.inputs[0]
        layout = self.layout(x) if self.propagate_layout else ONNX_LAYOUT
        inputs = [self.key(x, layout)] + [self.key(n) for n in op.inputs[1:]]
        outputs = op.outputs[0] if len(op.outputs) == 1 else list(op.outputs)
        self.emit(fn, inputs, outputs, layout, self.rank(x))

    def _elementwise(self, op, fn, names=None) -> None:
        """A broadcasting elementwise operator over ``names`` (default: all inputs)."""
        names = list(op.inputs if names is None else names)
        rank = self._channels_last_rank(names)
        if rank is None:
            ranks = [self.rank(n) for n in names if n]
            self.emit(fn, [self.key(n) for n in names], op.outputs[0], ONNX_LAYOUT,
                      max(ranks) if ranks and None not in ranks else None)
        else:
            self.emit(fn, [self.aligned_key(n, rank) for n in names], op.outputs[0],
                      CHANNELS_LAST, rank)

    def _channels_last_op(self, op, core, n_outputs: int = 1) -> None:
        """An operator computed in channels-last by ``core(x, *rest)`` on input 0."""
        x = op.inputs[0]
        rank = self.rank(x)
        rest = [self.key(n) for n in op.inputs[1:]]
        outputs = op.outputs[0] if n_outputs == 1 else list(op.outputs[:n_outputs])
        if rank is not None and rank >= 3:
            self.emit(core, [self.key(x, CHANNELS_LAST)] + rest, outputs, CHANNELS_LAST, rank)
            return
        if rank is not None:
            self.emit(core, [self.key(x)] + rest, outputs, ONNX_LAYOUT, rank)
            return

        def converted(x, *rest):   # rank known only at run time
            if len(x.shape) < 3:
                return core(x, *rest)
            result = core(to_channels_last(x), *rest)
            if n_outputs == 1:
                return to_onnx_layout(result)
            return (to_onnx_layout(result[0]),) + tuple(result[1:])
        self.emit(converted, [self.key(x)] + rest, outputs)

    def _axes_input(self, op):
        """(axes, or None; the name of a runtime axes tensor, or None): the second
        input."""
        name = op.inputs[1] if len(op.inputs) > 1 else ""
        if not name:
            return None, None
        value = self._value(name)
        if value is not None:
            return [int(a) for a in np.reshape(value, -1)], None
        self.static_key(name)
        return None, name

    # -- convolution, pooling, normalization --------------------------------------
    def visit_conv(self, op, network) -> None:
        """Conv: https://onnx.ai/onnx/operators/onnx__Conv.html"""
        a = op.attributes
        w_rank = self.rank(op.inputs[1]) or self.rank(op.inputs[0])
        if w_rank is None:
            raise self._unsupported("the rank of the convolution is unknown",
                                    "give the weight or input tensor a static shape")
        spatial = w_rank - 2
        if spatial not in (1, 2, 3):
            raise self._unsupported(f"{spatial}-D convolutions are not supported "
                                    f"(1-D, 2-D and 3-D are)")
        self._check_rank(op.inputs[0], w_rank, f"its weight has rank {w_rank}")
        strides = list(a["strides"] or [1] * spatial)
        dilations = list(a["dilations"] or [1] * spatial)
        group = int(a["group"] or 1)
        auto_pad = a["auto_pad"] or "NOTSET"
        pads = a["pads"]
        dilated = any(d != 1 for d in dilations)
        to_filter = tuple(range(2, spatial + 2)) + (1, 0)   # OIk... → k...IO
        w_name = op.inputs[1]
        stored = self._only_consumed_as(w_name, lambda use, index: (
            use.op_type == "Conv" and index == 1))
        if stored:
            self._store_parameter(w_name, ParameterLayout.filter(self._stored_shape(w_name)))

        @functools.lru_cache(maxsize=32)
        def padding(sizes, kernel):
            pad = list(zip(*resolve_pads(op.op_type, sizes, kernel, strides=strides,
                                         dilations=dilations, pads=pads,
                                         auto_pad=auto_pad)))
            effective = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
            if spatial == 1:   # computed as 2-D, over a height of 1
                return _tf_padding((1, *sizes), (1, *effective), (1, *strides),
                                   [(0, 0), *pad])
            return _tf_padding(sizes, effective, strides, pad)

        def conv(x, w, b=None):
            if stored:   # already (k..., I, O)
                pad = padding(tuple(x.shape[1:-1]), tuple(w.shape[:-2]))
            else:
                pad = padding(tuple(x.shape[1:-1]), tuple(w.shape[2:]))
                w = tf.transpose(w, to_filter)
            if dilated:
                w = _dilate_filter(w, dilations)
            y = _conv_channels_last(x, _like(w, x), strides, pad, group)
            return y if b is None else tf.nn.bias_add(y, _like(b, y))
        self._channels_last_op(op, conv)

    def _pool(self, op, kind: str) -> None:
        a = op.attributes
        kernel = list(a["kernel_shape"])
        n = len(kernel)
        self._check_rank(op.inputs[0], n + 2, f"its kernel_shape has {n} entries")
        strides = list(a["strides"] or [1] * n)
        dilations = list(a.get("dilations") or [1] * n)
        dilated = any(d != 1 for d in dilations)
        effective = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        if len(op.outputs) > 1 and op.outputs[1]:
            raise self._unsupported("the Indices output of MaxPool is not supported",
                                    "use only the first output")
        ceil_mode = bool(a.get("ceil_mode") or 0)
        auto_pad = a["auto_pad"] or "NOTSET"
        pads = a["pads"]
        include_pad = bool(a.get("count_include_pad") or 0)

        @functools.lru_cache(maxsize=32)
        def geometry(sizes, dtype):
            """(TensorFlow padding mode, explicit padding or None, factor or None)."""
            if None in sizes:   # unknown extents: no ceil_mode overhang, no averages
                if ceil_mode:
                    raise ShapeError(f"{op.op_type} node '{op.name}': ceil_mode needs the "
                                     f"input's spatial extents; give the input a static "
                                     f"shape")
                window = None
                begin, end = resolve_pads(op.op_type, sizes, kernel, strides=strides,
                                          dilations=dilations, pads=pads, auto_pad=auto_pad)
                extra = (0,) * n
            else:
                window = window_geometry(op.op_type, sizes, kernel, strides=strides,
                                         dilations=dilations, pads=pads, auto_pad=auto_pad,
                                         ceil_mode=ceil_mode)
                begin, end, extra = window.pads_begin, window.pads_end, window.overhang
            padding = [(b, e + more) for b, e, more in zip(begin, end, extra)]
            mode, explicit = _tf_padding(sizes, effective, strides, padding)
            if mode == "SAME" and (dilated or (kind == "AVG" and include_pad)):
                # TensorFlow's SAME pooling excludes the padding, as max pooling and
                # count_include_pad=0 do; the other cases pad explicitly.
                mode, explicit = "VALID", [[0, 0]] + [list(p) for p in padding] + [[0, 0]]
            if kind == "MAX" or mode == "SAME" or explicit is None:
                return mode, explicit, None
            if window is None:
                raise ShapeError(f"{op.op_type} node '{op.name}': average pooling with "
                                 f"padding needs the input's spatial extents; give the "
                                 f"input a static shape")
            return mode, explicit, _average_factor(window, include_pad, dtype)

        if kind == "MAX":
            def pool(x):
                mode, explicit, _ = geometry(tuple(x.shape[1:-1]), None)
                if explicit is not None:
                    x = tf.pad(x, explicit, constant_values=_tf_dtype(x).min)
                if dilated:
                    return _pool_by_slices(x, kernel, strides, dilations, kind)
                return tf.nn.max_pool(x, kernel, strides, mode)
        else:
            def pool(x):
                mode, explicit, factor = geometry(tuple(x.shape[1:-1]),
                                                  _tf_dtype(x).as_numpy_dtype)
                if explicit is not None:
                    x = tf.pad(x, explicit)
                if dilated:
                    y = _pool_by_slices(x, kernel, strides, dilations, kind) / math.prod(
                        kernel)
                else:
                    y = tf.nn.avg_pool(x, kernel, strides, mode)
                return y if factor is None else y * factor
        self._channels_last_op(op, pool)

    def visit_maxpool(self, op, network) -> None:
        """MaxPool: https://onnx.ai/onnx/operators/onnx__MaxPool.html"""
        self._pool(op, "MAX")

    def visit_averagepool(self, op, network) -> None:
        """AveragePool: https://onnx.ai/onnx/operators/onnx__AveragePool.html"""
        self._pool(op, "AVG")

    def _global_pool(self, op, reduce) -> None:
        self._channels_last_op(
            op, lambda x: reduce(x, axis=list(range(1, len(x.shape) - 1)), keepdims=True))

    def visit_globalaveragepool(self, op, network) -> None:
        """GlobalAveragePool: mean over all spatial axes, kept as size 1."""
        self._global_pool(op, tf.reduce_mean)

    def visit_globalmaxpool(self, op, network) -> None:
        """GlobalMaxPool: max over all spatial axes, kept as size 1."""
        self._global_pool(op, tf.reduce_max)

    def visit_batchnormalization(self, op, network) -> None:
        """BatchNormalization: https://onnx.ai/onnx/operators/onnx__BatchNormalization.html
        (inference: the given statistics; training_mode=1: the batch's population
        statistics, and running statistics as outputs)."""
        a = op.attributes
        eps = float(a["epsilon"])
        momentum = float(a.get("momentum") if a.get("momentum") is not None else 0.9)
        training = bool(a.get("training_mode") or 0)
        extra_outputs = [o for o in op.outputs[1:] if o]

        def inference(x, scale, b, mean, var):
            # Channels are the last axis here; tf.nn.batch_normalization broadcasts.
            return tf.nn.batch_normalization(x, _like(mean, x), _like(var, x), _like(b, x),
                                             _like(scale, x), eps)

        def train(x, scale, b, mean, var):
            batch_mean, batch_var = tf.nn.moments(x, list(range(len(x.shape) - 1)))
            y = tf.nn.batch_normalization(x, batch_mean, batch_var, _like(b, x),
                                          _like(scale, x), eps)
            running_mean = mean * momentum + _like(batch_mean, mean) * (1 - momentum)
            running_var = var * momentum + _like(batch_var, var) * (1 - momentum)
            return y, running_mean, running_var

        if training:
            self._channels_last_op(op, train, 3)
        else:
            if extra_outputs:
                raise self._unsupported("running-statistic outputs need training_mode=1")
            self._channels_last_op(op, inference)

    # -- dense linear algebra ------------------------------------------------------
    def visit_gemm(self, op, network) -> None:
        """Gemm: Y = alpha·A'·B' + beta·C, A' = transpose(A) if transA, B' likewise."""
        a = op.attributes
        alpha, beta = float(a["alpha"]), float(a["beta"])
        trans_a, trans_b = bool(a["transA"]), bool(a["transB"])
        x_name, w_name = op.inputs[0], op.inputs[1]
        if x_name in self.flattened:
            # The flattened input is channels-last; the weight is stored to match.
            channels, spatial = self.flattened[x_name]
            self._store_parameter(w_name, ParameterLayout.flattened_channels_last(
                self._stored_shape(w_name), channels, spatial, trans_b))
            x_key, trans_b = x_name + FLAT, False
        else:
            x_key = self.key(x_name)
            if trans_b and self._only_consumed_as(w_name, lambda use, index: (
                    use.op_type == "Gemm" and index == 1 and use.attributes["transB"]
                    and use.inputs[0] not in self.flattened)):
                self._store_parameter(w_name, ParameterLayout.transposed(
                    self._stored_shape(w_name)))
                trans_b = False

        def gemm(x, w, c=None):
            y = tf.linalg.matmul(x, w, transpose_a=trans_a, transpose_b=trans_b)
            if alpha != 1.0:
                y = y * alpha
            if c is None or beta == 0.0:
                return y
            if beta != 1.0:
                c = c * beta
            if len(c.shape) == 2 and c.shape[0] == 1 and c.shape[1] == y.shape[-1]:
                # A row: a bias. (Grappler mis-fuses MatMul(transpose_a) + Add of a row.)
                c = tf.reshape(c, [-1])
            if len(c.shape) == 1 and c.shape[0] == y.shape[-1]:
                return tf.nn.bias_add(y, c)
            return y + c
        self.emit(gemm, [x_key] + [self.key(n) for n in op.inputs[1:]], op.outputs[0], rank=2)

    def visit_matmul(self, op, network) -> None:
        """MatMul: NumPy matmul semantics (1-D operands promoted, batch broadcasting)."""
        def matmul(x, y):
            rx, ry = len(x.shape), len(y.shape)
            if rx > 1 and ry > 1:
                return tf.linalg.matmul(x, y)
            z = tf.linalg.matmul(x[tf.newaxis] if rx == 1 else x,
                                 y[:, tf.newaxis] if ry == 1 else y)
            if ry == 1:
                z = tf.squeeze(z, -1)
            return tf.squeeze(z, -2 if ry > 1 else -1) if rx == 1 else z
        self.emit(matmul, [self.key(n) for n in op.inputs], op.outputs[0])

    # -- elementwise ---------------------------------------------------------------
    def _binary(self, op, tf_fn, np_fn) -> None:
        def binary(x, y):
            if _is_np(x, y):
                return np.asarray(np_fn(x, y))
            return tf_fn(x, y)
        self._elementwise(op, binary)

    def visit_add(self, op, network) -> None:
        self._binary(op, tf.add, np.add)

    def visit_sub(self, op, network) -> None:
        self._binary(op, tf.subtract, np.subtract)

    def visit_mul(self, op, network) -> None:
        self._binary(op, tf.multiply, np.multiply)

    def visit_div(self, op, network) -> None:
        """Div; integer division truncates toward zero (as ONNX Runtime's)."""
        def div_tf(x, y):
            if _tf_dtype(x).is_integer:
                return tf.truncatediv(x, y)
            return tf.math.truediv(x, y)

        def div_np(x, y):
            if np.issubdtype(x.dtype, np.integer):
                return ((np.abs(x) // np.abs(y)) * np.sign(x) * np.sign(y)).astype(x.dtype)
            return x / y
        self._binary(op, div_tf, div_np)

    def visit_pow(self, op, network) -> None:
        """Pow: X ** Y in X's type."""
        def pow_tf(x, y):
            if isinstance(y, np.ndarray) and y.shape == () and y == 2:
                return tf.square(x)
            return tf.pow(x, tf.cast(y, _tf_dtype(x)))

        def pow_np(x, y):
            return np.power(x, y).astype(x.dtype)
        self._binary(op, pow_tf, pow_np)

    def _unary(self, op, tf_fn, np_fn=None) -> None:
        if np_fn is None:
            self._same_layout(op, tf_fn)
            return

        def unary(x):
            return np.asarray(np_fn(x)) if isinstance(x, np.ndarray) else tf_fn(x)
        self._same_layout(op, unary)

    def visit_sqrt(self, op, network) -> None:
        self._unary(op, tf.sqrt)

    def visit_exp(self, op, network) -> None:
        self._unary(op, tf.exp)

    def visit_log(self, op, network) -> None:
        self._unary(op, tf.math.log)

    def visit_neg(self, op, network) -> None:
        self._unary(op, tf.negative, np.negative)

    def visit_abs(self, op, network) -> None:
        self._unary(op, tf.abs, np.abs)

    def visit_erf(self, op, network) -> None:
        self._unary(op, tf.math.erf)

    def visit_reciprocal(self, op, network) -> None:
        self._unary(op, tf.math.reciprocal)

    def visit_floor(self, op, network) -> None:
        self._unary(op, tf.floor, np.floor)

    def visit_ceil(self, op, network) -> None:
        self._unary(op, tf.math.ceil, np.ceil)

    def visit_relu(self, op, network) -> None:
        self._unary(op, tf.nn.relu)

    def visit_leakyrelu(self, op, network) -> None:
        alpha = float(op.attributes["alpha"])
        self._unary(op, lambda x: tf.nn.leaky_relu(x, alpha))

    def visit_sigmoid(self, op, network) -> None:
        self._unary(op, tf.sigmoid)

    def visit_tanh(self, op, network) -> None:
        self._unary(op, tf.tanh)

    def visit_softplus(self, op, network) -> None:
        self._unary(op, tf.math.softplus)

    def visit_not(self, op, network) -> None:
        self._unary(op, tf.logical_not, np.logical_not)

    def visit_clip(self, op, network) -> None:
        """Clip: optional min and max inputs."""
        def clip(x, low=None, high=None):
            if low is not None:
                x = tf.maximum(x, low)
            if high is not None:
                x = tf.minimum(x, high)
            return x
        self._elementwise(op, clip)

    def _variadic(self, op, tf_fn, np_fn, finish=None) -> None:
        def variadic(*xs):
            if _is_np(*xs):
                result = functools.reduce(np_fn, xs)
                return np.asarray(finish(result, len(xs)) if finish else result)
            result = functools.reduce(tf_fn, xs)
            return finish(result, len(xs)) if finish else result
        self._elementwise(op, variadic)

    def visit_sum(self, op, network) -> None:
        self._variadic(op, tf.add, np.add)

    def visit_min(self, op, network) -> None:
        self._variadic(op, tf.minimum, np.minimum)

    def visit_max(self, op, network) -> None:
        self._variadic(op, tf.maximum, np.maximum)

    def visit_mean(self, op, network) -> None:
        self._variadic(op, tf.add, np.add, lambda total, n: total / n)

    def _comparison(self, op, tf_fn, np_fn) -> None:
        def compare(x, y):
            return np.asarray(np_fn(x, y)) if _is_np(x, y) else tf_fn(x, y)
        self._elementwise(op, compare)

    def visit_equal(self, op, network) -> None:
        self._comparison(op, tf.equal, np.equal)

    def visit_less(self, op, network) -> None:
        self._comparison(op, tf.less, np.less)

    def visit_greater(self, op, network) -> None:
        self._comparison(op, tf.greater, np.greater)

    def visit_lessorequal(self, op, network) -> None:
        self._comparison(op, tf.less_equal, np.less_equal)

    def visit_greaterorequal(self, op, network) -> None:
        self._comparison(op, tf.greater_equal, np.greater_equal)

    def visit_and(self, op, network) -> None:
        self._comparison(op, tf.logical_and, np.logical_and)

    def visit_or(self, op, network) -> None:
        self._comparison(op, tf.logical_or, np.logical_or)

    def visit_where(self, op, network) -> None:
        """Where: condition ? X : Y, broadcasting."""
        def where(condition, x, y):
            if _is_np(condition, x, y):
                return np.where(condition, x, y)
            return tf.where(condition, x, y)
        self._elementwise(op, where)

    # -- activations over an axis --------------------------------------------------
    def _softmax(self, op, fn) -> None:
        axis = op.attributes.get("axis")
        axis = -1 if axis is None else int(axis)
        self.emit(lambda x: fn(x, axis=axis), [self.key(op.inputs[0])], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_softmax(self, op, network) -> None:
        """Softmax: https://onnx.ai/onnx/operators/onnx__Softmax.html"""
        self._softmax(op, tf.nn.softmax)

    def visit_logsoftmax(self, op, network) -> None:
        """LogSoftmax: as Softmax, in log space."""
        self._softmax(op, tf.nn.log_softmax)

    # -- regularization ------------------------------------------------------------
    def visit_dropout(self, op, network) -> None:
        """Dropout, for inference: the identity (mask output all true)."""
        unsupported = self._unsupported("Dropout with training_mode=true is not supported "
                                        "(the executor runs Dropout as in inference)",
                                        "remove the node or set training_mode to false")
        if len(op.inputs) > 2 and op.inputs[2]:
            value = self._value(op.inputs[2])
            if value is not None and bool(np.reshape(value, -1)[0]):
                raise unsupported
        mask = len(op.outputs) > 1 and op.outputs[1]

        def dropout(x, ratio=None, training_mode=None):
            rate = _static(ratio)
            if training_mode is not None and not (rate is not None and
                                                  float(np.reshape(rate, -1)[0]) == 0.0):
                value = _static(training_mode)
                if value is None:
                    tf.debugging.assert_equal(training_mode, False, message=str(unsupported))
                elif bool(np.reshape(value, -1)[0]):
                    raise unsupported
            if mask:
                return x, tf.ones_like(x, dtype=tf.bool)
            return x
        x = op.inputs[0]
        layout = self.layout(x) if self.propagate_layout else ONNX_LAYOUT
        inputs = [self.key(x, layout)] + [self.static_key(n) for n in op.inputs[1:]]
        if mask:
            # Both outputs share x's layout.
            keys = (self._output_key(op.outputs[0], layout, self.rank(x)),
                    self._output_key(op.outputs[1], layout, self.rank(x)))
            self._emit(dropout, inputs, keys)
        else:
            self.emit(dropout, inputs, op.outputs[0], layout, self.rank(x))

    def visit_identity(self, op, network) -> None:
        self._same_layout(op, lambda x: x)

    # -- shapes and data movement --------------------------------------------------
    def _flatten_into_gemm(self, op) -> bool:
        """Flatten a channels-last (N, d..., C) tensor as is, when its only reader is a
        Gemm whose weight (read by it alone) can be stored to match."""
        x, out = op.inputs[0], op.outputs[0]
        shape = self.network.shapes.get(x)
        rank = self.rank(x)
        if (not self.propagate_layout or self.layout(x) != CHANNELS_LAST or rank is None
                or _axis(int(op.attributes["axis"]), rank) != 1 or shape is None
                or not all(isinstance(d, int) and d > 0 for d in shape[1:])
                or out in self.network.outputs):
            return False
        uses = self.consumers.get(out, [])
        if len(uses) != 1:
            return False
        gemm, index = uses[0]
        if gemm.op_type != "Gemm" or index != 0 or gemm.attributes["transA"]:
            return False
        w_name = gemm.inputs[1]
        if not self._only_consumed_as(w_name, lambda use, i: use is gemm and i == 1):
            return False
        channels, spatial = shape[1], tuple(shape[2:])
        self.flattened[out] = (channels, spatial)

        def flatten_channels_last(x):
            return tf.reshape(x, [-1, channels * math.prod(spatial)])

        def to_onnx(flat):   # for readers outside the plan (fetch_tensor)
            return tf.reshape(to_onnx_layout(tf.reshape(flat, [-1, *spatial, channels])),
                              [-1, channels * math.prod(spatial)])
        self._emit(flatten_channels_last, [self.key(x, CHANNELS_LAST)], out + FLAT)
        self.plan.converters[out] = (out + FLAT, to_onnx)
        self.ranks[out] = 2
        return True

    def visit_flatten(self, op, network) -> None:
        """Flatten: a 2-D matrix of axes [:axis] by axes [axis:]."""
        axis = int(op.attributes["axis"])
        if self._flatten_into_gemm(op):
            return

        def flatten(x):
            dims = _dims(x)
            first = _axis(axis, len(dims))
            if None in dims:
                shape = tf.shape(x)
                outer = tf.reduce_prod(shape[:first])
                return tf.reshape(x, tf.stack([outer, tf.reduce_prod(shape[first:])]))
            shape = [math.prod(dims[:first]), math.prod(dims[first:])]
            return x.reshape(shape) if isinstance(x, np.ndarray) else tf.reshape(x, shape)
        self.emit(flatten, [self.key(op.inputs[0])], op.outputs[0], rank=2)

    def visit_reshape(self, op, network) -> None:
        """Reshape: 0 copies the input's dimension (unless allowzero), -1 is inferred."""
        allow_zero = bool(op.attributes.get("allowzero") or 0)
        inputs = [self.key(op.inputs[0]), self.key(op.inputs[1])]

        def reshape(x, shape):
            target = _static(shape)
            if target is None:
                return tf.reshape(x, self._dynamic_target(x, shape, allow_zero))
            target = [int(t) for t in np.reshape(target, -1)]
            if not allow_zero:
                dims = _shape_list(x)
                target = [dims[i] if t == 0 else t for i, t in enumerate(target)]
            if isinstance(x, np.ndarray):
                return x.reshape(target)
            return tf.reshape(x, target)
        self.emit(reshape, inputs, op.outputs[0])

    @staticmethod
    def _dynamic_target(x, shape, allow_zero):
        shape = tf.cast(shape, tf.int64)
        if allow_zero:
            return shape
        n = tf.size(shape)
        current = tf.concat([tf.shape(x, out_type=tf.int64), tf.zeros([n], tf.int64)], 0)[:n]
        return tf.where(tf.equal(shape, 0), current, shape)

    def visit_transpose(self, op, network) -> None:
        """Transpose: perm (default: reversed axes); a channels-last input is permuted
        straight to the result."""
        x = op.inputs[0]
        perm = op.attributes.get("perm")
        rank = self.rank(x)
        if perm is None and rank is None:
            def reverse(x):
                axes = list(range(len(x.shape)))[::-1]
                return np.transpose(x, axes) if isinstance(x, np.ndarray) else tf.transpose(
                    x, axes)
            self.emit(reverse, [self.key(x)], op.outputs[0])
            return
        perm = [int(p) for p in perm] if perm is not None else list(range(rank))[::-1]
        if self.layout(x) == CHANNELS_LAST and self.propagate_layout:
            composed = [channels_last_axis(p, len(perm)) for p in perm]
            key = self.key(x, CHANNELS_LAST)
        else:
            composed, key = perm, self.key(x)
        if composed == list(range(len(composed))):
            self.emit(lambda x: x, [key], op.outputs[0], rank=len(perm))
            return

        def transpose(x):
            if isinstance(x, np.ndarray):
                return np.transpose(x, composed)
            return tf.transpose(x, composed)
        self.emit(transpose, [key], op.outputs[0], rank=len(perm))

    def visit_concat(self, op, network) -> None:
        """Concat along ``axis`` (channels-last inputs concatenate there)."""
        axis = int(op.attributes["axis"] if op.attributes.get("axis") is not None else 1)
        names = op.inputs
        ranks = [self.rank(n) for n in names]
        rank = self._channels_last_rank(names)
        if rank is not None and all(r == rank for r in ranks):
            inner = channels_last_axis(axis, rank)
            self.emit(lambda *xs: tf.concat(xs, inner),
                      [self.key(n, CHANNELS_LAST) for n in names], op.outputs[0],
                      CHANNELS_LAST, rank)
            return

        def concat(*xs):
            if _is_np(*xs):
                return np.concatenate(xs, axis)
            return tf.concat(xs, axis)
        self.emit(concat, [self.key(n) for n in names], op.outputs[0],
                  rank=ranks[0] if ranks else None)

    def visit_split(self, op, network) -> None:
        """Split into the sizes of the ``split`` input, else ``num_outputs`` ceil-sized
        parts (equal parts, one per output, if neither is given)."""
        axis = int(op.attributes.get("axis") or 0)
        parts = len(op.outputs)
        sizes = None
        inputs = [self.key(op.inputs[0])] + [self.static_key(n) for n in op.inputs[1:2]]
        num_outputs = op.attributes.get("num_outputs")
        dynamic_error = self._dynamic_error("split sizes")

        def split(x, split_input=None):
            given = sizes if split_input is None else _ints(split_input)
            if given is None and split_input is not None:
                raise dynamic_error
            if not given:
                dim = x.shape[_axis(axis, len(x.shape))]
                if num_outputs:
                    chunk = -(-dim // num_outputs)
                    given = [chunk] * (num_outputs - 1) + [dim - chunk * (num_outputs - 1)]
                else:
                    given = [dim // parts] * parts
            return tuple(tf.split(x, given, axis))
        self.emit(split, inputs, list(op.outputs))

    def visit_squeeze(self, op, network) -> None:
        """Squeeze the axes of the second input, else every size-1 axis."""
        axes, dynamic = self._axes_input(op)
        inputs = [self.key(op.inputs[0])] + ([self.key(dynamic)] if dynamic else [])

        def squeeze(x, axes_input=None):
            chosen = axes if axes_input is None else _ints(axes_input)
            rank = len(x.shape)
            if chosen is None:
                chosen = [i for i, d in enumerate(_dims(x)) if d == 1]
            chosen = sorted(_axis(a, rank) for a in chosen)
            if isinstance(x, np.ndarray):
                return np.squeeze(x, tuple(chosen))
            return tf.squeeze(x, chosen) if chosen else x
        self.emit(squeeze, inputs, op.outputs[0])

    def visit_unsqueeze(self, op, network) -> None:
        """Unsqueeze: insert size-1 axes (attribute before opset 13, input after)."""
        axes, dynamic = self._axes_input(op)
        inputs = [self.key(op.inputs[0])] + ([self.key(dynamic)] if dynamic else [])
        dynamic_error = self._dynamic_error("axes")

        def unsqueeze(x, axes_input=None):
            chosen = axes if axes_input is None else _ints(axes_input)
            if chosen is None:
                raise dynamic_error
            rank = len(x.shape) + len(chosen)
            chosen = sorted(_axis(a, rank) for a in chosen)
            if isinstance(x, np.ndarray):
                return np.expand_dims(x, tuple(chosen))
            dims = _shape_list(x)
            for a in chosen:
                dims.insert(a, 1)
            return tf.reshape(x, dims)
        self.emit(unsqueeze, inputs, op.outputs[0])

    def visit_shape(self, op, network) -> None:
        """Shape (with start/end from opset 15), as int64; static shapes stay NumPy."""
        x = op.inputs[0]
        start = op.attributes.get("start") or 0
        end = op.attributes.get("end")
        channels_last = self.layout(x) == CHANNELS_LAST and self.propagate_layout

        def shape(x):
            dims = _dims(x)
            order = to_onnx_perm(len(dims)) if channels_last else range(len(dims))
            dims = [dims[i] for i in order][start:end]
            if None not in dims:
                return np.asarray(dims, np.int64)
            return tf.gather(tf.shape(x, out_type=tf.int64), list(order))[start:end]
        self.emit(shape, [self.key(x, CHANNELS_LAST if channels_last else ONNX_LAYOUT)],
                  op.outputs[0], rank=1)

    def visit_size(self, op, network) -> None:
        def size(x):
            dims = _dims(x)
            if None not in dims:
                return np.asarray(math.prod(dims), np.int64)
            return tf.size(x, out_type=tf.int64)
        self.emit(size, [self.key(op.inputs[0], self.layout(op.inputs[0]))], op.outputs[0],
                  rank=0)

    def visit_gather(self, op, network) -> None:
        """Gather along ``axis``; negative indices count from the end."""
        axis = int(op.attributes.get("axis") or 0)

        def gather(data, indices):
            rank = len(data.shape)
            along = _axis(axis, rank)
            if _is_np(data, indices):
                return np.take(data, indices, axis=along)
            dim = data.shape[along]
            if isinstance(indices, np.ndarray) and dim is not None:
                indices = np.where(indices < 0, indices + dim, indices)
            elif not isinstance(indices, np.ndarray) or np.any(indices < 0):
                indices = tf.convert_to_tensor(indices)
                size = dim if dim is not None else tf.shape(data, out_type=indices.dtype)[along]
                indices = tf.where(indices < 0, indices + tf.cast(size, indices.dtype), indices)
            return tf.gather(data, indices, axis=along)
        self.emit(gather, [self.key(n) for n in op.inputs], op.outputs[0])

    def visit_slice(self, op, network) -> None:
        """Slice: starts/ends/axes/steps inputs; bounds clamped as ONNX specifies."""
        inputs = [self.key(op.inputs[0])] + [self.static_key(n) for n in op.inputs[1:]]
        dynamic_error = self._dynamic_error("slice bounds")

        def slice_(x, *bounds):
            values = [_ints(b) if b is not None else None for b in bounds]
            values += [None] * (4 - len(values))
            if any(v is None for v, b in zip(values, bounds) if b is not None):
                raise dynamic_error
            starts, ends, axes, steps = values
            dims = _dims(x)
            rank = len(dims)
            axes = list(range(len(starts))) if axes is None else [_axis(a, rank) for a in axes]
            steps = [1] * len(starts) if steps is None else steps
            index = [slice(None)] * rank
            for axis, start, end, step in zip(axes, starts, ends, steps):
                index[axis] = _clamped_slice(start, end, step, dims[axis])
            return x[tuple(index)]
        self.emit(slice_, inputs, op.outputs[0])

    def visit_cast(self, op, network) -> None:
        """Cast to ``to``."""
        target = _onnx_to_np_dtype(int(op.attributes["to"]))
        source = self.network.dtypes.get(op.inputs[0])
        for dtype in (target, source):
            if dtype is not None and not tf_supports_dtype(dtype):
                raise self._unsupported(f"TensorFlow cannot cast {np.dtype(dtype).name} "
                                        f"tensors")
        tf_target = tf.as_dtype(target)

        def cast(x):
            if isinstance(x, np.ndarray):
                return x.astype(target)
            return x if x.dtype == tf_target else tf.cast(x, tf_target)
        self._same_layout(op, cast)

    def visit_castlike(self, op, network) -> None:
        """CastLike: cast the input to the element type of ``target_type``."""
        def cast_like(x, like):
            if isinstance(x, np.ndarray) and isinstance(like, np.ndarray):
                return x.astype(like.dtype)
            return tf.cast(x, _tf_dtype(like))
        self.emit(cast_like, [self.key(n) for n in op.inputs], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_gatherelements(self, op, network) -> None:
        """GatherElements: out[i][j][k] = data[index[i][j][k]][j][k] (for axis 0), negative
        indices counting from the end."""
        axis = int(op.attributes.get("axis") or 0)

        def gather_elements(data, indices):
            along = _axis(axis, len(data.shape))
            indices = tf.convert_to_tensor(indices)
            size = tf.cast(tf.shape(data)[along], indices.dtype)
            indices = tf.where(indices < 0, indices + size, indices)
            return tf.experimental.numpy.take_along_axis(tf.convert_to_tensor(data), indices,
                                                         along)
        self.emit(gather_elements, [self.key(n) for n in op.inputs], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_constant(self, op, network) -> None:
        """Constant: its value, NumPy unless floating (then a TensorFlow constant)."""
        a = op.attributes
        if a.get("value") is not None:
            value = onnx.numpy_helper.to_array(a["value"])
        elif a.get("value_float") is not None:
            value = np.asarray(a["value_float"], np.float32)
        elif a.get("value_floats") is not None:
            value = np.asarray(a["value_floats"], np.float32)
        elif a.get("value_int") is not None:
            value = np.asarray(a["value_int"], np.int64)
        elif a.get("value_ints") is not None:
            value = np.asarray(a["value_ints"], np.int64)
        else:
            raise self._unsupported("only numeric dense constants are supported")
        value = tf.constant(value) if _is_floating(value.dtype) else np.asarray(value)
        self.emit(lambda: value, [], op.outputs[0], rank=len(value.shape))

    def visit_constantofshape(self, op, network) -> None:
        """ConstantOfShape: a tensor of the given shape filled with ``value``'s one
        element (default float32 zero)."""
        given = op.attributes.get("value")
        fill = (onnx.numpy_helper.to_array(given).reshape(-1)[0] if given is not None
                else np.float32(0))

        def constant_of_shape(shape):
            dims = _ints(shape)
            if dims is not None and math.prod(dims) <= 4096:
                return np.full(dims, fill)
            return tf.fill(tf.cast(shape, tf.int64), tf.constant(fill))
        self.emit(constant_of_shape, [self.key(op.inputs[0])], op.outputs[0])

    def visit_expand(self, op, network) -> None:
        """Expand: broadcast the input and ``shape`` against each other."""
        def expand(x, shape):
            target = _ints(shape)
            dims = _dims(x)
            if target is not None and None not in dims:
                full = list(np.broadcast_shapes(tuple(dims), tuple(target)))
                if isinstance(x, np.ndarray):
                    return np.broadcast_to(x, full).copy()
                return x if full == dims else tf.broadcast_to(x, full)
            return tf.broadcast_to(x, tf.broadcast_dynamic_shape(
                tf.shape(x, out_type=tf.int64), tf.cast(shape, tf.int64)))
        self.emit(expand, [self.key(n) for n in op.inputs], op.outputs[0])

    def visit_range(self, op, network) -> None:
        """Range: start, start + delta, ... below (above, if delta < 0) limit."""
        def range_(start, limit, delta):
            if _is_np(start, limit, delta):
                return np.arange(start, limit, delta, dtype=start.dtype)
            return tf.range(start, limit, delta)
        self.emit(range_, [self.key(n) for n in op.inputs], op.outputs[0], rank=1)

    def visit_pad(self, op, network) -> None:
        """Pad: modes constant, reflect, edge (and wrap); negative pads crop."""
        mode = op.attributes.get("mode") or "constant"
        if mode not in ("constant", "reflect", "edge", "wrap"):
            raise self._unsupported(f"pad mode {mode!r} is not supported")
        inputs = [self.key(op.inputs[0]), self.static_key(op.inputs[1])]
        inputs += [self.key(n) for n in op.inputs[2:3]]
        inputs += [self.static_key(n) for n in op.inputs[3:4]]
        dynamic_error = self._dynamic_error("pads")

        def pad(x, pads, value=None, axes=None):
            widths = _ints(pads)
            if widths is None or (axes is not None and _ints(axes) is None):
                raise dynamic_error
            rank = len(x.shape)
            chosen = (list(range(rank)) if axes is None
                      else [_axis(a, rank) for a in _ints(axes)])
            n = len(chosen)
            per_axis = [[0, 0] for _ in range(rank)]
            for i, a in enumerate(chosen):
                per_axis[a] = [widths[i], widths[n + i]]
            return _pad(x, per_axis, mode, value)
        self.emit(pad, inputs, op.outputs[0], rank=self.rank(op.inputs[0]))

    def _reduce(self, op, tf_fn) -> None:
        """Reduce* over the ``axes`` input; no axes: all of them, or none with
        noop_with_empty_axes."""
        keepdims = op.attributes.get("keepdims")
        keepdims = True if keepdims is None else bool(keepdims)
        noop = bool(op.attributes.get("noop_with_empty_axes") or 0)
        axes, dynamic = self._axes_input(op)
        x = op.inputs[0]
        rank = self.rank(x)
        if (dynamic is None and axes is not None and rank is not None and axes
                and self.layout(x) == CHANNELS_LAST and self.propagate_layout):
            inner = sorted(channels_last_axis(a, rank) for a in axes)
            remaining = [to_channels_last_perm(rank)[j] for j in range(rank) if j not in inner]
            if keepdims or remaining == sorted(remaining):
                layout = CHANNELS_LAST if keepdims else ONNX_LAYOUT
                self.emit(lambda x: tf_fn(x, axis=inner, keepdims=keepdims),
                          [self.key(x, CHANNELS_LAST)], op.outputs[0], layout,
                          rank if keepdims else len(remaining))
                return

        def reduce(x, axes_input=None):
            chosen = axes
            if dynamic is not None:
                chosen = _ints(axes_input)
                if chosen is None:
                    return tf_fn(x, axis=axes_input, keepdims=keepdims)
            if not chosen:
                if noop:
                    return x
                chosen = None
            return tf_fn(x, axis=chosen, keepdims=keepdims)
        inputs = [self.key(x)] + ([self.key(dynamic)] if dynamic else [])
        self.emit(reduce, inputs, op.outputs[0])

    def visit_reducemean(self, op, network) -> None:
        self._reduce(op, tf.reduce_mean)

    def visit_reducesum(self, op, network) -> None:
        self._reduce(op, tf.reduce_sum)

    def visit_reducemax(self, op, network) -> None:
        def reduce_max(x, axis=None, keepdims=True):
            fn = tf.reduce_any if _tf_dtype(x) == tf.bool else tf.reduce_max
            return fn(x, axis=axis, keepdims=keepdims)
        self._reduce(op, reduce_max)

    def visit_reducemin(self, op, network) -> None:
        def reduce_min(x, axis=None, keepdims=True):
            fn = tf.reduce_all if _tf_dtype(x) == tf.bool else tf.reduce_min
            return fn(x, axis=axis, keepdims=keepdims)
        self._reduce(op, reduce_min)

    # -- losses --------------------------------------------------------------------
    def _class_last(self, name: str) -> tuple[str, bool]:
        """The key of a (N, C, d1, ...) tensor with its class axis last, and whether
        the closure must move it there itself (rank unknown when building)."""
        rank = self.rank(name)
        if rank is not None and rank >= 3:
            return self.key(name, CHANNELS_LAST), False
        return self.key(name), rank is None

    def visit_softmaxcrossentropyloss(self, op, network) -> None:
        """SoftmaxCrossEntropyLoss:
        https://onnx.ai/onnx/operators/onnx__SoftmaxCrossEntropyLoss.html"""
        reduction = op.attributes.get("reduction") or "mean"
        ignore = op.attributes.get("ignore_index")
        want_log_prob = len(op.outputs) > 1 and bool(op.outputs[1])
        rank = self.rank(op.inputs[0])

        scores_key, move = self._class_last(op.inputs[0])

        def loss(scores, labels, weights=None):
            moved = move and len(scores.shape) > 2
            if moved:
                scores = to_channels_last(scores)
            if weights is None and ignore is None and not want_log_prob:
                # One fused kernel, as Keras' sparse categorical cross-entropy.
                per_element = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, scores)
                return _reduce_loss(per_element, None, reduction)
            log_prob = tf.nn.log_softmax(scores, axis=-1)
            result = _picked_loss(log_prob, labels, weights, ignore, reduction)
            if not want_log_prob:
                return result
            return result, to_onnx_layout(log_prob) if moved else log_prob
        inputs = [scores_key] + [self.key(n) for n in op.inputs[1:]]
        rank = rank or 0
        if want_log_prob:
            keys = (self._output_key(op.outputs[0], ONNX_LAYOUT),
                    self._output_key(op.outputs[1],
                                     CHANNELS_LAST if rank >= 3 else ONNX_LAYOUT, rank))
            self._emit(loss, inputs, keys)
            if rank >= 3 and not self.propagate_layout:
                self.key(op.outputs[1])
        else:
            self.emit(loss, inputs, op.outputs[0])

    def visit_negativeloglikelihoodloss(self, op, network) -> None:
        """NegativeLogLikelihoodLoss:
        https://onnx.ai/onnx/operators/onnx__NegativeLogLikelihoodLoss.html"""
        reduction = op.attributes.get("reduction") or "mean"
        ignore = op.attributes.get("ignore_index")

        log_prob_key, move = self._class_last(op.inputs[0])

        def loss(log_prob, target, weights=None):
            if move and len(log_prob.shape) > 2:
                log_prob = to_channels_last(log_prob)
            return _picked_loss(log_prob, target, weights, ignore, reduction)
        inputs = [log_prob_key] + [self.key(n) for n in op.inputs[1:]]
        self.emit(loss, inputs, op.outputs[0])


# -- helpers of the closures above -------------------------------------------------------
def _clamped_slice(start: int, end: int, step: int, dim: int | None) -> slice:
    """A Python slice with ONNX Slice's clamping of ``start``/``end`` on an axis of
    length ``dim``."""
    if step == 0:
        raise ShapeError("Slice: steps must be non-zero")
    if dim is None:
        return slice(start, end, step)
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        return slice(start, end, step)
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)


def _pad(x, per_axis, mode, fill):
    """ONNX Pad on ``x`` with per-axis [begin, end] widths (negative widths crop)."""
    crop = [slice(-b if b < 0 else None, e if e < 0 else None) for b, e in per_axis]
    grow = [[max(b, 0), max(e, 0)] for b, e in per_axis]
    if any(b < 0 or e < 0 for b, e in per_axis):
        x = x[tuple(crop)]
    if not any(b or e for b, e in grow):
        return x
    if mode == "constant":
        if fill is None:
            fill = 0
        elif not isinstance(fill, (int, float)):
            fill = tf.reshape(tf.cast(fill, _tf_dtype(x)), [])
        return tf.pad(x, grow, constant_values=fill)
    if mode == "reflect":
        return tf.pad(x, grow, mode="REFLECT")
    for axis, (begin, end) in enumerate(grow):
        if not (begin or end):
            continue
        dim = x.shape[axis]
        positions = np.arange(-begin, dim + end)
        positions = np.clip(positions, 0, dim - 1) if mode == "edge" else positions % dim
        x = tf.gather(x, positions, axis=axis)
    return x


def _reduce_loss(per_element, weights, reduction):
    if reduction == "none":
        return per_element
    if reduction == "sum":
        return tf.reduce_sum(per_element)
    if weights is None:
        return tf.reduce_mean(per_element)
    return tf.reduce_sum(per_element) / tf.reduce_sum(weights)


def _picked_loss(log_prob, labels, weights, ignore, reduction):
    """-weights[label]·log_prob[..., label], zero where label == ignore, reduced (mean:
    divided by the summed weights of the elements not ignored)."""
    labels = tf.convert_to_tensor(labels)
    if ignore is not None:
        valid = tf.not_equal(labels, ignore)
        safe = tf.where(valid, labels, tf.zeros_like(labels))
    else:
        valid, safe = None, labels
    picked = tf.gather(log_prob, safe, axis=-1, batch_dims=len(labels.shape))
    w = None
    if weights is not None:
        w = tf.gather(_like(weights, log_prob), safe)
    if valid is not None:
        mask = tf.cast(valid, _tf_dtype(log_prob))
        w = mask if w is None else w * mask
    per_element = -picked if w is None else -picked * w
    return _reduce_loss(per_element, w, reduction)
