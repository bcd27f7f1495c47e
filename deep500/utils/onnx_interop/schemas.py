"""Operator classes generated from the installed ``onnx.defs`` schemas.

Nothing here is a hand-written copy of ONNX: for an operator name and the opset a model
imports, the class is built (once, then cached) from the schema in force at that opset.
It knows the formal inputs and outputs (so ``op.i_X`` names the tensor bound to input
``X`` and ``op.o_Y`` the one bound to output ``Y``), and every attribute with its ONNX
default. ``operators.Conv`` gives the class of the newest opset.
"""
from __future__ import annotations

import functools

import onnx
import onnx.defs
from onnx import helper

from deep500.utils.errors import UnsupportedError

REQUIRED = object()  # marks attributes without a default that a node must set


class OnnxOperation:
    """One node of an ONNX graph, typed by its schema.

    Attributes:
        name: the node's name (generated from its outputs if the file has none).
        inputs, outputs: tensor names, in order ('' marks an omitted optional input).
        attributes: every attribute of the schema: given values, else ONNX defaults
            (None for optional attributes without a default).
        original_version: the version of the schema the model file used; the class's
            ``since_version`` is that of the normalised form (see ``normalize.py``).
    """
    op_type = ""
    domain = ""
    since_version = 0
    input_specs: tuple = ()     # (name, option) with option in single/optional/variadic
    output_specs: tuple = ()
    attribute_defaults: dict = {}
    doc = ""

    def __init__(self, name: str, inputs, outputs, attributes: dict | None = None):
        self.name = name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        given = dict(attributes or {})
        unknown = sorted(set(given) - set(self.attribute_defaults))
        if unknown:
            raise UnsupportedError(f"Node '{name}' ({self.op_type}, opset version "
                                   f"{self.since_version}) has attributes {unknown} that "
                                   f"its schema does not define")
        missing = sorted(k for k, v in self.attribute_defaults.items()
                         if v is REQUIRED and k not in given)
        if missing:
            raise UnsupportedError(f"Node '{name}' ({self.op_type}) lacks required "
                                   f"attributes {missing}")
        self.attributes = {k: given.get(k, None if v is REQUIRED else v)
                           for k, v in self.attribute_defaults.items()}
        self.given_attributes = given
        self.original_version = self.since_version
        # Parsed graph attributes (Loop/Scan ``body``, If's branches): attribute name ->
        # OnnxModel, filled in by the parser.
        self.subgraphs = {}
        # Names its bodies read from the enclosing graphs (ONNX's outer-scope values):
        # they are inputs of this node for scheduling, freeing and gradients.
        self.implicit_inputs = []

    @classmethod
    def from_node(cls, node: onnx.NodeProto, name: str) -> "OnnxOperation":
        attributes = {a.name: _attribute_value(a) for a in node.attribute}
        return cls(name, node.input, node.output, attributes)

    # i_<input> / o_<output> accessors
    def __getattr__(self, key: str):
        if key.startswith("i_") or key.startswith("o_"):
            specs, names = ((self.input_specs, self.inputs) if key[0] == "i"
                            else (self.output_specs, self.outputs))
            return _bind(specs, names, key[2:], self)
        raise AttributeError(f"{type(self).__name__} has no attribute {key!r}")

    @property
    def present_inputs(self) -> list[str]:
        """Input tensor names, without omitted optional inputs."""
        return [name for name in self.inputs if name]

    def to_node(self) -> onnx.NodeProto:
        return helper.make_node(self.op_type, self.inputs, self.outputs, name=self.name,
                                domain=self.domain or None, **self.given_attributes)

    def __repr__(self) -> str:
        return (f"{self.op_type}(name={self.name!r}, inputs={self.inputs}, "
                f"outputs={self.outputs})")


def _bind(specs, names, formal: str, op):
    """The tensor name(s) bound to formal parameter ``formal``."""
    for position, (spec_name, option) in enumerate(specs):
        if spec_name != formal:
            continue
        if option == "variadic":
            return names[position:]
        if position < len(names) and names[position]:
            return names[position]
        return None
    raise AttributeError(f"{op.op_type} has no formal parameter {formal!r}; it has "
                         f"{[s[0] for s in specs]}")


def _attribute_value(attribute: onnx.AttributeProto):
    value = helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8") for v in value]
    return value


_OPTIONS = {onnx.defs.OpSchema.FormalParameterOption.Single: "single",
            onnx.defs.OpSchema.FormalParameterOption.Optional: "optional",
            onnx.defs.OpSchema.FormalParameterOption.Variadic: "variadic"}


def _default(attribute) -> object:
    if attribute.required:
        return REQUIRED
    proto = attribute.default_value
    if proto is None or not proto.name:  # an empty AttributeProto: no default
        return None
    return _attribute_value(proto)


@functools.lru_cache(maxsize=None)
def operator_class(op_type: str, opset: int | None = None, domain: str = "") -> type:
    """The class for ``op_type`` as defined at ``opset`` (default: newest)."""
    try:
        if opset is None:
            schema = onnx.defs.get_schema(op_type, domain=domain)
        else:
            schema = onnx.defs.get_schema(op_type, opset, domain=domain)
    except onnx.defs.SchemaError:
        where = f" at opset {opset}" if opset is not None else ""
        raise UnsupportedError(f"ONNX (version {onnx.__version__}) has no operator "
                               f"{op_type!r} in domain {domain or 'ai.onnx'!r}{where}"
                               ) from None
    return type(f"{op_type}_{schema.since_version}", (OnnxOperation,), {
        "op_type": op_type,
        "domain": domain,
        "since_version": schema.since_version,
        "input_specs": tuple((p.name, _OPTIONS[p.option]) for p in schema.inputs),
        "output_specs": tuple((p.name, _OPTIONS[p.option]) for p in schema.outputs),
        "attribute_defaults": {name: _default(a) for name, a in schema.attributes.items()},
        "doc": schema.doc or "",
        "__module__": __name__,
    })


class _Namespace:
    """``operators.Conv`` → the newest Conv class; ``operators.Conv_11`` → opset 11's."""

    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        base, _, version = name.rpartition("_")
        if base and version.isdigit():
            return operator_class(base, int(version))
        return operator_class(name)

    def __dir__(self):
        return sorted({s.name for s in onnx.defs.get_all_schemas() if not s.domain})


operators = _Namespace()
