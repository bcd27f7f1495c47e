"""One normalised form of every node, applied once when a model is parsed.

Older opsets spell some operators differently; after :func:`normalize_model` every
visitor sees one form, the newest opset's, and needs no ``since_version`` branch:

* attributes that later opsets take as inputs (``axes`` of Squeeze and the Reduce
  operators, ``split`` of Split, ``starts``/``ends``/``axes`` of Slice, ``pads``/``value``
  of Pad, ``min``/``max`` of Clip, ``ratio`` of Dropout, ``shape`` of Reshape, ... — the
  table :data:`~deep500.utils.onnx_interop.opset_upgrades.ATTRIBUTE_INPUTS`) become
  constant inputs at the newest opset's position (``OnnxModel.constants``, which are
  neither initializers nor parameters);
* attributes without effect are dropped: ``consumed_inputs`` (opset-1 memory hints),
  ``is_test`` (Dropout and BatchNormalization run as their inputs say), ``broadcast``
  of the arithmetic and comparison operators before opset 7 (every operator now
  broadcasts like NumPy), ``spatial=1`` of BatchNormalization; legacy broadcasting
  along an ``axis`` that NumPy broadcasting does not reproduce is refused;
* Softmax, LogSoftmax and Hardmax before opset 13 flattened the input to 2-D at
  ``axis``: with the axis last this is the opset-13 operator over axis -1, otherwise a
  Flatten, the operator over axis 1 and a Reshape back;
* BatchNormalization before opset 14 trained when asked for its statistics outputs:
  ``training_mode`` says so; Split before opset 18 split evenly into as many parts as it
  has outputs: ``num_outputs`` says so;
* a Constant's ``value_float(s)``/``value_int(s)`` is its ``value`` tensor (float32,
  int64), so that a visitor reads one attribute;
* the node is then an instance of the newest opset's class (every attribute with its
  ONNX default, ``OnnxOperation.attributes``); ``original_version`` keeps the version
  of the schema the file used, for error messages.

Nodes of operators without such changes keep their class. https://onnx.ai/onnx/repo-docs/Changelog.html
"""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from deep500.utils.errors import UnsupportedError
from deep500.utils.onnx_interop.opset_upgrades import ATTRIBUTE_INPUTS, DATA
from deep500.utils.onnx_interop.schemas import OnnxOperation, operator_class

# Attributes of older opsets whose value does not change the result.
DROPPED = {"consumed_inputs"}
LEGACY_BROADCAST = {"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal",
                    "Greater", "Less", "Gemm"}
COERCED_TO_2D = {"Softmax": 13, "LogSoftmax": 13, "Hardmax": 13}
# Operators whose older forms this module rewrites into the newest one.
UPGRADED = (set(ATTRIBUTE_INPUTS) | LEGACY_BROADCAST | set(COERCED_TO_2D)
            | {"BatchNormalization", "Dropout"})

# Constant's scalar and list attributes and the element type of the tensor they make.
CONSTANT_LISTS = {"value_float": np.float32, "value_floats": np.float32,
                  "value_int": np.int64, "value_ints": np.int64}

# Inputs the newest opset takes as 1-D tensors even where the old attribute was a scalar.
_ONE_DIMENSIONAL = {("TopK", "k")}


class _Context:
    """What rewriting one model needs: its value infos (ranks, dtypes), the constants
    made so far, and the names in use. Without a model (a node added to a built
    network) ranks and dtypes are unknown."""

    def __init__(self, model=None, operations=(), where: str = ""):
        self.model = model
        self.constants: dict = {}
        self.names: set = set()
        self.used: set = set()   # tensors read by a node or returned by the graph
        self._where = where
        if model is not None:
            self.names = set(model.initializers) | {i.name for i in model.inputs}
            self.used = {o.name for o in model.outputs}
            self._where = f" of model '{model.name}' ({model.source})"
        for op in list(operations) + list(model.operations if model is not None else []):
            self.names.update(op.inputs)
            self.names.update(op.outputs)
            self.used.update(op.inputs)

    def fresh(self, base: str) -> str:
        name, index = base, 0
        while name in self.names:
            index += 1
            name = f"{base}_{index}"
        self.names.add(name)
        return name

    def shape(self, name: str):
        if self.model is None:
            return None
        if name in self.model.initializers:
            return tuple(self.model.initializers[name].shape)
        info = self.model.value_info.get(name)
        return None if info is None else info.shape

    def rank(self, name: str):
        shape = self.shape(name)
        return None if shape is None else len(shape)

    def dtype(self, name: str):
        if self.model is None:
            return None
        if name in self.model.initializers:
            return self.model.initializers[name].dtype
        info = self.model.value_info.get(name)
        return None if info is None or info.dtype is None else info.dtype

    def where(self, op: OnnxOperation) -> str:
        return (f"node '{op.name}' ({op.op_type}, opset version {op.since_version})"
                f"{self._where}")


def normalize_model(model) -> None:
    """Rewrite ``model.operations`` (an :class:`OnnxModel`) into the normalised form,
    adding the constants it needs to ``model.constants``. Idempotent."""
    context = _Context(model)
    operations = []
    for op in model.operations:
        operations.extend(normalize_operation(op, context))
    model.operations = operations
    model.constants.update(context.constants)


def normalize_nodes(operations, network: str = "") -> tuple[list, dict]:
    """(normalised nodes, constants they read) for nodes outside a parsed model, e.g.
    one added to a built network named ``network``. Their graph attributes stay
    unparsed: ``added_nodes.normalize_operations`` parses them as well."""
    context = _Context(operations=operations,
                       where=f" of network '{network}'" if network else "")
    nodes = []
    for op in operations:
        nodes.extend(normalize_operation(op, context))
    return nodes, context.constants


def normalize_operation(op: OnnxOperation, context: _Context) -> list[OnnxOperation]:
    """The node(s) that compute ``op`` in the normalised form."""
    if op.domain not in ("", "ai.onnx"):
        return [op]
    given = dict(op.given_attributes)
    dropped = [key for key in given if key in DROPPED]
    for key in dropped:
        del given[key]
    if op.op_type == "Constant" and len(given) == 1 and set(given) <= set(CONSTANT_LISTS):
        (key, value), = given.items()
        tensor = numpy_helper.from_array(np.asarray(value, CONSTANT_LISTS[key]))
        return [_retype(op, operator_class("Constant"), op.inputs, op.outputs,
                        {"value": tensor})]
    if op.op_type not in UPGRADED:
        if dropped:
            return [_retype(op, type(op), op.inputs, op.outputs, given)]
        return [op]
    newest = operator_class(op.op_type)
    if type(op) is newest and not dropped:
        return [op]
    inputs, outputs = list(op.inputs), list(op.outputs)
    if op.op_type in LEGACY_BROADCAST:
        _legacy_broadcast(op, given, context)
    if op.op_type == "BatchNormalization":
        _batch_normalization(op, given, outputs, context)
    if op.op_type == "Dropout":
        given.pop("is_test", None)   # before opset 7; inference unless training_mode
    inputs = _attributes_to_inputs(op, given, inputs, context)
    if op.op_type == "Split" and "num_outputs" in newest.attribute_defaults and not (
            len(inputs) > 1 and inputs[1]):
        given["num_outputs"] = len(outputs)   # before opset 18: even parts, one per output
    if op.op_type in COERCED_TO_2D and op.since_version < COERCED_TO_2D[op.op_type]:
        return _coerced_to_2d(op, given, newest, inputs, outputs, context)
    unknown = sorted(set(given) - set(newest.attribute_defaults))
    if unknown:
        # A legacy form these rules do not know: left as the file wrote it.
        return [op]
    return [_retype(op, newest, inputs, outputs, given)]


def _retype(op, cls, inputs, outputs, given) -> OnnxOperation:
    new = cls(op.name, inputs, outputs, given)
    new.original_version = op.original_version
    return new


def _attributes_to_inputs(op, given, inputs, context) -> list:
    """Attributes that became inputs, as constants at the newest opset's positions."""
    moved = ATTRIBUTE_INPUTS.get(op.op_type, {})
    inputs = list(inputs)
    for key, (position, dtype) in moved.items():
        if key not in given:
            continue
        value = given.pop(key)
        if position < len(inputs) and inputs[position]:
            raise UnsupportedError(f"{context.where(op)} gives {key} both as an attribute and "
                                   f"as input {position}; give it once")
        if dtype is DATA:
            dtype = context.dtype(op.inputs[0]) or np.float32
        array = np.asarray(value, dtype=dtype)
        if (op.op_type, key) in _ONE_DIMENSIONAL:
            array = array.reshape(-1)
        name = context.fresh(f"{op.name}::{key}")
        context.constants[name] = array
        inputs += [""] * (position + 1 - len(inputs))
        inputs[position] = name
    return inputs


def _legacy_broadcast(op, given, context) -> None:
    """Before opset 7, ``broadcast=1`` broadcast B onto A, aligned from ``axis`` (default:
    the trailing axes, as NumPy does); ``broadcast=0`` required equal shapes. Both are
    NumPy broadcasting unless ``axis`` aligns B elsewhere, which is refused."""
    broadcast = given.pop("broadcast", 0)
    axis = given.pop("axis", None)
    if not broadcast or axis is None or op.op_type == "Gemm":
        return
    rank_a, rank_b = context.rank(op.inputs[0]), context.rank(op.inputs[1])
    if rank_a is not None and rank_b is not None and axis % max(rank_a, 1) == rank_a - rank_b:
        return
    raise UnsupportedError(
        f"{context.where(op)} uses legacy broadcasting (broadcast=1, axis={axis}) that "
        f"aligns input B (rank {rank_b}) with input A (rank {rank_a}) from axis {axis}, "
        f"which NumPy-style broadcasting does not do; convert the model to opset 7 or "
        f"newer (onnx.version_converter.convert_version) or reshape B in the model")


def _batch_normalization(op, given, outputs, context) -> None:
    """BatchNormalization before opset 14: ``is_test`` and ``spatial=1`` change nothing;
    asking for the statistics outputs meant training (``training_mode=1`` now)."""
    given.pop("is_test", None)
    if given.pop("spatial", 1) != 1:
        raise UnsupportedError(f"{context.where(op)} has spatial=0 (statistics per "
                               f"activation, before opset 9), which Deep500 does not "
                               f"support; re-export the model with opset 9 or newer")
    if op.since_version < 14:
        present = [name for name in outputs[1:] if name]
        if any(name in context.used for name in outputs[3:] if name):
            raise UnsupportedError(f"{context.where(op)} uses saved_mean/saved_var "
                                   f"(outputs 4 and 5 before opset 14), which later opsets "
                                   f"dropped; use only the running statistics outputs")
        del outputs[3:]   # unused: opset 9's schema makes training nodes declare them
        if present:
            given["training_mode"] = 1


def _coerced_to_2d(op, given, newest, inputs, outputs, context) -> list[OnnxOperation]:
    """Softmax/LogSoftmax/Hardmax before opset 13: over the input flattened to 2-D at
    ``axis`` (https://onnx.ai/onnx/operators/onnx__Softmax.html, "Softmax-11")."""
    axis = int(given.pop("axis", 1))
    x = inputs[0]
    rank = context.rank(x)
    if rank is not None and rank > 0 and axis % rank == rank - 1:
        return [_retype(op, newest, inputs, outputs, dict(given, axis=-1))]
    flat = context.fresh(f"{op.name}::flattened")
    normalised = context.fresh(f"{op.name}::normalised")
    flatten = _retype(op, operator_class("Flatten"), [x], [flat], {"axis": axis})
    flatten.name = context.fresh(f"{op.name}::flatten")
    core = _retype(op, newest, [flat], [normalised], dict(given, axis=-1))
    shape = context.shape(x)
    nodes = [flatten, core]
    if shape is not None and all(isinstance(d, int) for d in shape):
        target = context.fresh(f"{op.name}::shape")
        context.constants[target] = np.asarray(shape, np.int64)
    else:
        target = context.fresh(f"{op.name}::input_shape")
        shape_node = _retype(op, operator_class("Shape"), [x], [target], {})
        shape_node.name = target
        nodes.insert(0, shape_node)
    reshape = _retype(op, operator_class("Reshape"), [normalised, target], outputs, {})
    reshape.name = context.fresh(f"{op.name}::reshape")
    return nodes + [reshape]
