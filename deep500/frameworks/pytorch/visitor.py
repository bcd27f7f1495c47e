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

This module holds what every operator uses (the hooks, what is known while building,
``_emit``, the node errors); the ``visit_<op>`` methods live in ``ops/<family>.py``, one
mixin per operator family of ``deep500/frameworks/families.py``, composed by
:class:`PyTorchVisitor`. The parser has normalised every node to the newest opset's form
(``deep500.utils.onnx_interop.normalize``).
"""
from __future__ import annotations

import numpy as np
import onnx

from deep500.frameworks._bridge.node_errors import NodeErrors
from deep500.frameworks.pytorch._torch_common import BRIDGE, as_tensor, torch_dtype
from deep500.frameworks.pytorch.extension_dtypes import is_carried
from deep500.frameworks.pytorch.ops._bodies import NestedGraphs
from deep500.frameworks.pytorch.ops.activation import ActivationOps
from deep500.frameworks.pytorch.ops.attention import AttentionOps
from deep500.frameworks.pytorch.ops.control import ControlOps
from deep500.frameworks.pytorch.ops.conv import ConvOps
from deep500.frameworks.pytorch.ops.detection import DetectionOps
from deep500.frameworks.pytorch.ops.index import IndexOps
from deep500.frameworks.pytorch.ops.linalg import LinalgOps
from deep500.frameworks.pytorch.ops.logic import LogicOps
from deep500.frameworks.pytorch.ops.loss import LossOps
from deep500.frameworks.pytorch.ops.math import MathOps
from deep500.frameworks.pytorch.ops.ml import MlOps
from deep500.frameworks.pytorch.ops.normalization import NormalizationOps
from deep500.frameworks.pytorch.ops.pooling import PoolingOps
from deep500.frameworks.pytorch.ops.quantization import QuantizationOps
from deep500.frameworks.pytorch.ops.random import RandomOps
from deep500.frameworks.pytorch.ops.recurrent import RecurrentOps
from deep500.frameworks.pytorch.ops.reduction import ReductionOps
from deep500.frameworks.pytorch.ops.resample import ResampleOps
from deep500.frameworks.pytorch.ops.sequence import SequenceOps
from deep500.frameworks.pytorch.ops.shape import ShapeOps
from deep500.frameworks.pytorch.ops.signal import SignalOps
from deep500.frameworks.pytorch.ops.tensor import TensorOps
from deep500.frameworks.pytorch.ops.text import TextOps
from deep500.frameworks.pytorch.ops.training import TrainingOps
from deep500.utils.errors import require
from deep500.utils.onnx_interop.cast import is_string
from deep500.utils.onnx_interop.visitor import OnnxBaseVisitor

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


class PyTorchVisitor(MathOps, LogicOps, LinalgOps, ActivationOps, ConvOps, PoolingOps,
                     NormalizationOps, TensorOps, ShapeOps, IndexOps, ReductionOps,
                     RecurrentOps, AttentionOps, ControlOps, SequenceOps, QuantizationOps,
                     ResampleOps, DetectionOps, SignalOps, LossOps, RandomOps, TextOps,
                     MlOps, TrainingOps, NestedGraphs, NodeErrors, OnnxBaseVisitor):
    """Builds ``network.module`` (an :class:`OnnxModule`) from an ``OnnxModel``.

    Args:
        static_shapes: use the ranks and element types ONNX shape inference found for
            computed tensors (to pick code paths); off after graph edits.
    """
    framework = "The PyTorch executor (deep500.frameworks.pytorch)"
    errors = BRIDGE

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
        # name -> ml_dtypes type of constants carried in a wider tensor type (int4, ...)
        self.carried: dict = {}
        for name, value in model.constants.items():   # from attributes of older opsets
            self._know_array(name, value)

    def visit_initializer(self, name, value, network) -> None:
        """The model's parameters (floating-point initializers other than batch-norm
        running statistics) become ``nn.Parameter``s, other initializers constants."""
        if name in self.trainable:
            parameter = self.parameters.get(name)  # kept across rebuilds: it trains
            if parameter is None:
                parameter = torch.nn.Parameter(as_tensor(value))
            self.module.add_parameter(name, parameter)
        else:
            self._know_array(name, value)

    def _know_array(self, name, value) -> None:
        """Know constant ``value``: an array becomes a tensor (strings stay an array); a
        sequence (a list) or an empty optional (None) stays as it is."""
        if not isinstance(value, np.ndarray):
            self.known[name] = value
            return
        self.known[name] = value if is_string(value.dtype) else as_tensor(value)
        if is_carried(value.dtype):
            self.carried[name] = value.dtype

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
        """The tensor ``name`` holds if it is known while building, else None (also for
        a known value that is no tensor: a sequence, an optional, strings)."""
        value = self.known.get(name) if name else None
        return value if isinstance(value, torch.Tensor) else None

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
            value = self._known(name)
            return None if value is None else tuple(value.shape)
        if name in self.parameters:
            return tuple(self.parameters[name].shape)
        info = self.info.get(name)
        if name in self.inputs and info is not None and info.is_static:
            return tuple(info.shape)
        return None

    def _rank(self, name):
        if name in self.known:
            value = self._known(name)
            return None if value is None else value.dim()
        if name in self.parameters:
            return self.parameters[name].dim()
        info = self.info.get(name)
        return len(info.shape) if info is not None and info.shape is not None else None

    def _dtype(self, name):
        if name in self.known:
            value = self._known(name)
            return None if value is None else value.dtype
        if name in self.parameters:
            return self.parameters[name].dtype
        info = self.info.get(name)
        if info is not None and info.dtype is not None:
            return torch_dtype(onnx.helper.np_dtype_to_tensor_dtype(info.dtype))
        return None

    def _element_type(self, name):
        """The NumPy type (ml_dtypes' included) that the model declares for tensor
        ``name``, or None: it tells a carried int4 from the int8 that holds it."""
        if name in self.carried:
            return self.carried[name]
        info = self.info.get(name)
        return None if info is None else info.dtype

    def _emit(self, op, fn, inputs=None) -> None:
        """Add node ``op`` computing ``fn(*inputs)`` (default: all its inputs); if every
        input is known now, compute it now instead."""
        inputs = list(op.inputs if inputs is None else inputs)
        while inputs and not inputs[-1]:
            inputs.pop()  # trailing omitted inputs: fn's defaults apply
        if all(not n or n in self.known for n in inputs):
            with torch.no_grad():
                result = fn(*[self.known.get(n) if n else None for n in inputs])
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

    def _emit_outputs(self, op, fn, inputs=None) -> None:
        """``_emit`` of ``fn`` returning every output the operator defines, as a tuple,
        of which the node names the first ``len(op.outputs)``."""
        count = len(op.outputs)
        if count == 1:
            self._emit(op, lambda *values: fn(*values)[0], inputs)
        else:
            self._emit(op, lambda *values: fn(*values)[:count], inputs)

    def _axes(self, op):
        """(axes or None, whether they are given as a runtime tensor): the second
        input."""
        if len(op.inputs) > 1 and op.inputs[1]:
            axes = self._ints(op.inputs[1])
            return axes, axes is None
        return None, False


# Operators whose visit_* the visitor has, for documentation and error messages.
SUPPORTED_OPERATORS = sorted(name[len("visit_"):] for name in dir(PyTorchVisitor)
                             if name.startswith("visit_") and name not in {
                                 "visit_model", "visit_graph", "visit_initializer",
                                 "visit_input", "visit_output", "visit_graph_end"})

__all__ = ["PyTorchVisitor", "SUPPORTED_OPERATORS", "torch_dtype"]
