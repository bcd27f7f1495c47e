"""Building a ReferenceNetwork from a parsed ONNX model.

Every operator in the reference registry is visitable: a node becomes the registry's
operator for its ``op_type``, created once with the node's attributes. Attributes of
older opsets that later became inputs (``axes`` of Squeeze or ReduceSum, ``split`` of
Split, ``starts``/``ends`` of Slice, ``pads`` of Pad, ``min``/``max`` of Clip, ...)
become constant inputs, so one operator serves every opset; attributes the reference
operator does not implement are accepted only at their ONNX default.
https://onnx.ai/onnx/repo-docs/Changelog.html
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

from deep500.frameworks.reference.network import ReferenceNetwork
from deep500.frameworks.reference.operators import ReferenceOp, registry
from deep500.utils.errors import ShapeError, UnsupportedError
from deep500.utils.onnx_interop.onnx_objects import OnnxModel, OnnxValueInfo
from deep500.utils.onnx_interop.opset_upgrades import ATTRIBUTE_INPUTS, DATA
from deep500.utils.onnx_interop.schemas import REQUIRED, OnnxOperation
from deep500.utils.onnx_interop.visitor import OnnxBaseVisitor

_DATA = DATA   # a constant in the dtype of the node's first input

# Legacy attributes whose value does not change the result here: (op_type, attribute,
# value). ``broadcast=1`` asked for the NumPy-style broadcasting every operator now does;
# ``is_test=1`` for the inference behaviour these operators have.
HARMLESS_ATTRIBUTES = {
    *((op, "broadcast", 1) for op in ("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Gemm")),
    ("Dropout", "is_test", 1), ("BatchNormalization", "is_test", 1),
}
IGNORED_ATTRIBUTES = {"consumed_inputs"}   # opset-1 memory hints without any effect

# Before opset 13 these operators flattened the input to 2-D at ``axis`` (default 1).
COERCED_TO_2D = {"Softmax", "LogSoftmax"}


class _CoercedTo2D(ReferenceOp):
    """Softmax or LogSoftmax of opset < 13: the input is reshaped to
    (prod(shape[:axis]), prod(shape[axis:])), the operator is applied along axis 1, and
    the result reshaped back. https://onnx.ai/onnx/operators/onnx__Softmax.html"""
    defaults = {"axis": 1}

    def __init__(self, op_type: str, **attributes):
        super().__init__(**attributes)
        self.op_type = op_type
        self.inner = registry.create_operator(op_type, axis=1)

    def _matrix_shape(self, shape: tuple) -> tuple:
        rank, axis = len(shape), self.attr("axis")
        if not -rank <= axis < rank:
            raise ShapeError(f"{self.op_type}: axis {axis} is outside [{-rank}, {rank - 1}] "
                             f"for an input of shape {shape}")
        axis %= rank
        return math.prod(shape[:axis]), math.prod(shape[axis:])

    def forward(self, X):
        return self.inner.forward(X.reshape(self._matrix_shape(X.shape))).reshape(X.shape)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (X,) = fwd_inputs
        matrix = self._matrix_shape(X.shape)
        dY = None if grads[0] is None else grads[0].reshape(matrix)
        (dX,) = self.inner.backward([dY], [X.reshape(matrix)],
                                    [fwd_outputs[0].reshape(matrix)])
        return [dX.reshape(X.shape)]


def _numpy_attribute(value):
    """Tensor attributes (ConstantOfShape's value, ...) as NumPy arrays."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return value


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))
                and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b)))
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-7, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    return a == b


def _without_effect(op: OnnxOperation, key: str, value) -> bool:
    """Whether attribute ``key``, set to ``value``, changes nothing the reference operator
    (which does not implement it) computes."""
    if key in IGNORED_ATTRIBUTES:
        return True
    if isinstance(value, (int, float, str)) and (op.op_type, key, value) in HARMLESS_ATTRIBUTES:
        return True
    return _same(value, op.attribute_defaults.get(key, REQUIRED))


class ReferenceVisitor(OnnxBaseVisitor):
    """Builds a :class:`ReferenceNetwork`: the model's parameters become trainable
    parameters, other initializers and ``Constant`` nodes constants, and every other node
    an operation computed by the reference operator of its ``op_type``."""
    framework = "The reference (NumPy) framework"
    errors = "reference"

    def __init__(self, where: str | None = None):
        self._where = where
        self._parameters: set = set()

    # -- hooks -------------------------------------------------------------------
    def visit_graph(self, model: OnnxModel, network: ReferenceNetwork) -> None:
        self._parameters = set(model.parameters)
        if model.proto is not None:
            graph = model.proto.graph
            for value in list(graph.input) + list(graph.output):
                if value.type.WhichOneof("value") not in ("tensor_type", None):
                    raise UnsupportedError(
                        f"{self.framework} runs tensors only; graph value '{value.name}' of "
                        f"model '{model.name}' ({model.source}) is a "
                        f"{value.type.WhichOneof('value').replace('_type', '')}")

    def visit_initializer(self, name: str, value, network: ReferenceNetwork) -> None:
        """The model's parameters (floating-point initializers other than batch-norm
        running statistics) become trainable parameters, other initializers constants."""
        if not value.flags.writeable:
            # Arrays read from a protobuf are read-only; parameters must be trainable.
            value = value.copy()
        network.feed_tensor(name, value, is_param=name in self._parameters)

    def visit_input(self, value_info: OnnxValueInfo, network: ReferenceNetwork) -> None:
        network.add_input(value_info.name)

    def visit_output(self, value_info: OnnxValueInfo, network: ReferenceNetwork) -> None:
        network.add_output(value_info.name)

    def visit_constant(self, op: OnnxOperation, network: ReferenceNetwork) -> None:
        """A ``Constant`` node's output becomes a constant tensor of the network."""
        network.add_constant(op.outputs[0], self.constant_value(op))

    def __getattr__(self, name: str):
        # visit_<op> for every operator in the registry, looked up by lower-case name.
        if name.startswith("visit_"):
            lower = name[len("visit_"):]
            if any(op_type.lower() == lower for op_type in registry.operator_names()):
                return self.add_operation
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    # -- conversion ----------------------------------------------------------------
    def add_operation(self, op: OnnxOperation, network: ReferenceNetwork) -> None:
        """Add ``op`` to ``network`` with its reference operator."""
        if op.op_type == "Constant":
            self.visit_constant(op, network)
            return
        operator, inputs, constants = self.convert(op)
        for name, value in constants.items():
            network.add_constant(name, value)
        network.add_node(op, operator, inputs)

    def convert(self, op: OnnxOperation) -> tuple[ReferenceOp, list, dict]:
        """(reference operator, input tensor names, constants to add) for ``op``."""
        if op.domain not in ("", "ai.onnx"):
            raise self._unsupported(op, f"operators of domain {op.domain!r} have no "
                                        f"reference implementation")
        try:
            cls = registry.get_operator_class(op.op_type)
        except UnsupportedError as exc:
            raise self._unsupported(op, str(exc)) from None
        moved = ATTRIBUTE_INPUTS.get(op.op_type, {})
        attributes, constants, inputs = {}, {}, list(op.inputs)
        for key, value in op.attributes.items():
            given = key in op.given_attributes
            if key in cls.defaults and key not in moved:
                if value is not None:
                    attributes[key] = _numpy_attribute(value)
            elif key in moved and given:
                position, dtype = moved[key]
                name = f"{op.name}::{key}"
                constants[name] = np.asarray(value, dtype=self._constant_dtype(op, dtype))
                inputs += [""] * (position + 1 - len(inputs))
                inputs[position] = name
            elif given and not _without_effect(op, key, value):
                default = op.attribute_defaults.get(key, REQUIRED)
                allowed = (f"only its default {default!r} is supported"
                           if default is not REQUIRED else "it has no default")
                raise self._unsupported(
                    op, f"the reference operator does not implement attribute {key}={value!r} "
                        f"(it implements {sorted(cls.defaults) or 'no attributes'}); "
                        f"{allowed}. Re-export the model without it, or run it with another "
                        f"framework")
        if op.op_type == "Split" and "num_outputs" not in op.attribute_defaults:
            # Before opset 18 an even split took its number of parts from the outputs.
            attributes["num_outputs"] = len(op.outputs)
        try:
            if op.op_type in COERCED_TO_2D and op.since_version < 13:
                operator = _CoercedTo2D(op.op_type, **attributes)
            else:
                operator = cls(**attributes)
        except UnsupportedError as exc:
            raise self._unsupported(op, str(exc)) from None
        return operator, inputs, constants

    def constant_value(self, op: OnnxOperation) -> np.ndarray:
        """The value of a ``Constant`` node."""
        attributes = op.given_attributes
        if "value" in attributes:
            return numpy_helper.to_array(attributes["value"])
        if "value_float" in attributes:
            return np.array(attributes["value_float"], np.float32)
        if "value_floats" in attributes:
            return np.array(attributes["value_floats"], np.float32)
        if "value_int" in attributes:
            return np.array(attributes["value_int"], np.int64)
        if "value_ints" in attributes:
            return np.array(attributes["value_ints"], np.int64)
        raise self._unsupported(op, f"Constant nodes with {sorted(attributes)} (sparse or "
                                    f"string values) are not supported")

    # -- helpers -------------------------------------------------------------------
    def _constant_dtype(self, op: OnnxOperation, dtype):
        if dtype is not _DATA:
            return dtype
        model = getattr(self, "model", None)
        info = model.value_info.get(op.inputs[0]) if isinstance(model, OnnxModel) else None
        return info.dtype if info is not None and info.dtype is not None else np.float32

    def _unsupported(self, op: OnnxOperation, reason: str) -> UnsupportedError:
        model = getattr(self, "model", None)
        if isinstance(model, OnnxModel):
            where = f" of model '{model.name}' ({model.source})"
        else:
            where = f" of network '{self._where}'" if self._where else ""
        return UnsupportedError(f"{self.framework} cannot run node '{op.name}' "
                                f"({op.op_type}, opset version {op.since_version}){where}: "
                                f"{reason}")
