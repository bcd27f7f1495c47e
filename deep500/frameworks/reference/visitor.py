"""Building a ReferenceNetwork from a parsed ONNX model.

Every operator in the reference registry is visitable: a node becomes the registry's
operator for its ``op_type``, created once with the node's attributes. The parser has
already normalised every node to the newest opset's form (``onnx_interop/normalize.py``:
attributes of older opsets that became inputs are constant inputs, ``model.constants``),
so one operator serves every opset; attributes the reference operator does not
implement are accepted only at their ONNX default.
https://onnx.ai/onnx/repo-docs/Changelog.html
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

from deep500.frameworks._bridge.node_errors import NodeErrors, model_place
from deep500.frameworks.reference.operators import ReferenceOp, registry
from deep500.utils.errors import UnsupportedError
from deep500.utils.onnx_interop.added_nodes import normalize_operations
from deep500.utils.onnx_interop.onnx_objects import OnnxModel, OnnxValueInfo
from deep500.utils.onnx_interop.schemas import REQUIRED, OnnxOperation
from deep500.utils.onnx_interop.visitor import OnnxBaseVisitor

# ONNX value types the reference network carries (see operators/_op_common_sequence.py).
_CARRIED = ("tensor_type", "sequence_type", "optional_type", None)


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
    (which does not implement it) computes: it has its ONNX default."""
    return _same(value, op.attribute_defaults.get(key, REQUIRED))


class ReferenceVisitor(NodeErrors, OnnxBaseVisitor):
    """Builds a :class:`ReferenceNetwork`: the model's parameters become trainable
    parameters, other initializers and ``Constant`` nodes constants, and every other node
    an operation computed by the reference operator of its ``op_type``.

    ``network`` in the hooks is a ``ReferenceNetwork``, which imports this module to add
    a node it is given without its operator (so this module does not import it back)."""
    framework = "The reference (NumPy) framework"
    errors = "reference"

    def __init__(self, where: str | None = None):
        self._where = where
        self._parameters: set = set()

    # -- hooks -------------------------------------------------------------------
    def visit_graph(self, model: OnnxModel, network) -> None:
        self._parameters = set(model.parameters)
        if model.proto is not None:
            graph = model.proto.graph
            for value in list(graph.input) + list(graph.output):
                kind = value.type.WhichOneof("value")
                if kind not in _CARRIED:
                    raise UnsupportedError(
                        f"{self.framework} carries tensors, sequences and optionals; graph "
                        f"value '{value.name}' of model '{model.name}' ({model.source}) is a "
                        f"{kind.replace('_type', '')}")

        for name, value in model.constants.items():
            network.add_constant(name, value)

    def visit_initializer(self, name: str, value, network) -> None:
        """The model's parameters (floating-point initializers other than batch-norm
        running statistics) become trainable parameters, other initializers constants."""
        if not value.flags.writeable:
            # Arrays read from a protobuf are read-only; parameters must be trainable.
            value = value.copy()
        network.feed_tensor(name, value, is_param=name in self._parameters)

    def visit_input(self, value_info: OnnxValueInfo, network) -> None:
        network.add_input(value_info.name)

    def visit_output(self, value_info: OnnxValueInfo, network) -> None:
        network.add_output(value_info.name)

    def visit_constant(self, op: OnnxOperation, network) -> None:
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
    def add_operation(self, op: OnnxOperation, network) -> None:
        """Add ``op`` to ``network`` with its reference operator. A node added to a
        built network (not parsed with a model) is normalised here."""
        if not isinstance(getattr(self, "model", None), OnnxModel):
            nodes, constants = normalize_operations([op], network.name)
            for name, value in constants.items():
                network.add_constant(name, value)
            if nodes != [op]:
                for node in nodes:
                    self.add_operation(node, network)
                return
        if op.op_type == "Constant":
            self.visit_constant(op, network)
            return
        # Inputs: op.inputs, then a control-flow node's outer-scope reads.
        network.add_node(op, self.convert(op))

    def convert(self, op: OnnxOperation) -> ReferenceOp:
        """The reference operator computing ``op`` (a normalised node)."""
        try:
            cls = registry.get_operator_class(op.op_type)
        except UnsupportedError as exc:
            raise self.node_error(op, str(exc)) from None
        domain = "" if op.domain == "ai.onnx" else op.domain
        if domain != cls.domain:
            raise self.node_error(op, f"the reference implements {op.op_type} of domain "
                                      f"{cls.domain or 'ai.onnx'!r}, not of domain "
                                      f"{op.domain!r}")
        attributes = {}
        for key, value in op.attributes.items():
            if key in cls.defaults:
                if value is not None:
                    attributes[key] = _numpy_attribute(value)
            elif key in op.given_attributes and not _without_effect(op, key, value):
                default = op.attribute_defaults.get(key, REQUIRED)
                allowed = (f"only its default {default!r} is supported"
                           if default is not REQUIRED else "it has no default")
                raise self.node_error(
                    op, f"the reference operator does not implement attribute {key}={value!r} "
                        f"(it implements {sorted(cls.defaults) or 'no attributes'}); "
                        f"{allowed}. Re-export the model without it, or run it with another "
                        f"framework")
        try:
            operator = cls(**attributes)
            if hasattr(operator, "bind_node"):
                operator.bind_node(op)   # Loop, If, Scan, ...: their parsed bodies
            return operator
        except UnsupportedError as exc:
            raise self.node_error(op, str(exc)) from None

    def constant_value(self, op: OnnxOperation) -> np.ndarray:
        """The value of a ``Constant`` node (the parser made value_float(s) and
        value_int(s) a ``value`` tensor)."""
        attributes = op.given_attributes
        if "value" in attributes:
            return numpy_helper.to_array(attributes["value"])
        raise self.node_error(op, f"Constant nodes with {sorted(attributes)} (sparse or "
                                    f"string values) are not supported")

    # -- errors --------------------------------------------------------------------
    def error_place(self) -> str:
        """The model being visited, else the network a node is added to."""
        model = getattr(self, "model", None)
        return model_place(model if isinstance(model, OnnxModel) else None, self._where)
