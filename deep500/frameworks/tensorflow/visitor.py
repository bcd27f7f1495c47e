"""ONNX → TensorFlow 2: one prebuilt closure of TensorFlow operations per ONNX node.

``TensorFlowVisitor`` walks a parsed model (``OnnxBaseVisitor``). For every node,
``visit_<op>`` reads the node's attributes once, at graph-build time, and appends to the
network's :class:`Plan` a step ``(fn, input keys, output key(s))``: ``fn`` is a closure
of TensorFlow operations implementing the operator's ONNX semantics at the opset the
newest opset (https://onnx.ai/onnx/operators/). A run is a loop over this flat list,
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

This module holds what every operator uses (the hooks, the plan being built, layouts of
tensors while building); the ``visit_<op>`` methods live in ``ops/<family>.py``, one
mixin per operator family of ``deep500/frameworks/families.py`` (the same file names in
every bridge), composed into :class:`TensorFlowVisitor` below. The ways families emit
their nodes are in ``ops/_patterns.py``, layouts in ``_layout.py``, the plan in
``_plan.py``. The parser has normalised every node to the newest opset's form
(``deep500.utils.onnx_interop.normalize``).
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks._bridge.node_errors import NodeErrors
from deep500.frameworks.tensorflow._layout import (_aligned_channels_last, CHANNELS_LAST,
                                                   CL, ONNX_LAYOUT, ParameterLayout,
                                                   to_channels_last, to_channels_last_perm,
                                                   to_onnx_layout, UNUSED)
from deep500.frameworks.tensorflow._plan import Plan
from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._patterns import OperatorPatterns
from deep500.frameworks.tensorflow.ops._carried_casts import is_carried
from deep500.frameworks.tensorflow.ops._values import (_onnx_to_np_dtype, tf_holds,
                                                       tf_supports_dtype)
from deep500.frameworks.tensorflow.ops.activation import ActivationOps
from deep500.frameworks.tensorflow.ops.attention import AttentionOps
from deep500.frameworks.tensorflow.ops.control import ControlOps
from deep500.frameworks.tensorflow.ops.conv import ConvOps
from deep500.frameworks.tensorflow.ops.detection import DetectionOps
from deep500.frameworks.tensorflow.ops.image import ImageOps
from deep500.frameworks.tensorflow.ops.index import IndexOps
from deep500.frameworks.tensorflow.ops.linalg import LinalgOps
from deep500.frameworks.tensorflow.ops.logic import LogicOps
from deep500.frameworks.tensorflow.ops.loss import LossOps
from deep500.frameworks.tensorflow.ops.math import MathOps
from deep500.frameworks.tensorflow.ops.ml import MlOps
from deep500.frameworks.tensorflow.ops.normalization import NormalizationOps
from deep500.frameworks.tensorflow.ops.pooling import PoolingOps
from deep500.frameworks.tensorflow.ops.quantization import QuantizationOps
from deep500.frameworks.tensorflow.ops.random import RandomOps
from deep500.frameworks.tensorflow.ops.recurrent import RecurrentOps
from deep500.frameworks.tensorflow.ops.reduction import ReductionOps
from deep500.frameworks.tensorflow.ops.resample import ResampleOps
from deep500.frameworks.tensorflow.ops.sequence import SequenceOps
from deep500.frameworks.tensorflow.ops.shape import ShapeOps
from deep500.frameworks.tensorflow.ops.signal import SignalOps
from deep500.frameworks.tensorflow.ops.tensor import TensorOps
from deep500.frameworks.tensorflow.ops.text import TextOps
from deep500.frameworks.tensorflow.ops.training import TrainingOps
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError
from deep500.utils.onnx_interop.visitor import OnnxBaseVisitor

__all__ = ["ParameterLayout", "Plan", "TensorFlowVisitor", "tf_supports_dtype"]


# One mixin per operator family (deep500/frameworks/families.py), in the families' order.
FAMILY_MIXINS = (MathOps, LogicOps, LinalgOps, ActivationOps, ConvOps, PoolingOps,
                 NormalizationOps, TensorOps, ShapeOps, IndexOps, ReductionOps, RecurrentOps,
                 AttentionOps, ControlOps, SequenceOps, QuantizationOps, ResampleOps,
                 DetectionOps, SignalOps, LossOps, RandomOps, TextOps, ImageOps, MlOps,
                 TrainingOps)


class TensorFlowVisitor(*FAMILY_MIXINS, OperatorPatterns, NodeErrors, OnnxBaseVisitor):
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
                self._check_value_type(value.type, value.name, model.name)
        for info in list(model.feed_inputs) + list(model.outputs):
            if info.dtype is not None and not tf_holds(info.dtype):
                raise UnsupportedError(f"{self.framework}: tensor {info.name!r} of model "
                                       f"'{model.name}' has element type "
                                       f"{np.dtype(info.dtype).name}, which TensorFlow cannot "
                                       f"compute with")
        self.begin(network)

    def _check_value_type(self, type_proto, name: str, model: str) -> None:
        """A graph input or output must be a tensor, a sequence of tensors or an optional
        of either, of element types TensorFlow computes with (``_value_kinds``)."""
        kind = type_proto.WhichOneof("value")
        inner = {"sequence_type": "elem_type", "optional_type": "elem_type"}.get(kind)
        if inner is not None:
            self._check_value_type(getattr(type_proto, kind).elem_type, name, model)
            return
        if kind != "tensor_type":
            raise UnsupportedError(
                f"{self.framework}: graph input or output {name!r} of model '{model}' is a "
                f"{kind or 'value of unknown type'}; only tensors, sequences of tensors "
                f"and optionals of either are supported")
        element = type_proto.tensor_type.elem_type
        dtype = _onnx_to_np_dtype(element) if element else None
        if dtype is not None and not tf_holds(dtype) and not is_carried(dtype):
            raise UnsupportedError(f"{self.framework}: value {name!r} of model '{model}' "
                                   f"has element type {dtype.name}, which TensorFlow "
                                   f"cannot compute with")

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
            for name in op.implicit_inputs:   # read by a body: in ONNX's layout
                self.consumers.setdefault(name, []).append((op, None))
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
                pending.extend(producer.inputs + producer.implicit_inputs)
        return self.key(name)

    def _dynamic_error(self, op, what: str) -> UnsupportedError:
        return self.node_error(op, f"{what} computed at run time inside a traced function "
                                   f"are not supported; use mode='eager'")

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

    def _check_rank(self, name: str, rank: int, why: str) -> None:
        """A known rank of input ``name`` other than ``rank`` is a ShapeError here: some
        of TensorFlow's kernels (oneDNN's convolution) abort the process on it."""
        known = self.rank(name)
        if known is not None and known != rank:
            raise self.node_error(self.op, f"input {name!r} has rank {known}, but {why}, so "
                                           f"it needs rank {rank}; fix the model's shapes",
                                  ShapeError)
