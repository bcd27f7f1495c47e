"""Element types a framework can hold but not compute with, carried in a wider type.

ONNX's 4- and 2-bit integers, 4-bit float and some 8-bit floats (NumPy holds them
through ``ml_dtypes``) have no kernels in some frameworks. Every value of such a type
is exactly a value of a wider type (int4 → int8, uint4 → uint8, float8/float4 →
float32), so a graph that only *reads* them (Cast and CastLike from them,
DequantizeLinear, and the operators that move values without computing: Identity,
Reshape, Transpose, ...) gives ONNX's results, bit for bit, on the wider *carrier*.
Operators that produce these types (Cast, CastLike or QuantizeLinear to them) need the
type's own rounding and saturation; a carried value reaching any input other than a
reading one is refused here (UnsupportedError naming the type, the value and the node).

https://onnx.ai/onnx/technical/int4.html, https://onnx.ai/onnx/technical/float8.html,
https://onnx.ai/onnx/technical/float4.html
"""
from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np

from deep500.utils.errors import UnsupportedError

# ml_dtypes type name -> the NumPy type that holds each of its values exactly
_CARRIER_OF = {
    "int4": np.int8, "uint4": np.uint8, "int2": np.int8, "uint2": np.uint8,
    "float4_e2m1fn": np.float32, "float8_e4m3fn": np.float32, "float8_e5m2": np.float32,
    "float8_e4m3fnuz": np.float32, "float8_e5m2fnuz": np.float32,
    "float8_e8m0fnu": np.float32,
}

# (ONNX operator, input index) that only read the values of that input (CastLike's
# second input only gives the type; QuantizeLinear's zero point is added exactly).
_READS = {("Cast", 0), ("CastLike", 0), ("CastLike", 1), ("DequantizeLinear", 0),
          ("DequantizeLinear", 2), ("QuantizeLinear", 2),
          ("Identity", 0), ("Reshape", 0), ("Flatten", 0), ("Squeeze", 0),
          ("Unsqueeze", 0), ("Transpose", 0), ("Shape", 0), ("Size", 0)}
# Operators whose output (0) holds the values of input 0, in the same type.
_MOVES = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"}


def carriers(names) -> dict:
    """``{ml_dtypes type: carrier type}`` for the ml_dtypes type names ``names`` (those
    missing from this ml_dtypes version are left out)."""
    result = {}
    for name in names:
        if hasattr(ml_dtypes, name):
            result[np.dtype(getattr(ml_dtypes, name))] = np.dtype(_CARRIER_OF[name])
    return result


@dataclasses.dataclass
class CarriedModel:
    """A model whose carried values are declared in their carrier types.

    Attributes:
        model: the rewritten model (feed inputs, outputs, value_info and initializers of
            carried values in the carrier types).
        inputs: ``{feed input name: carrier dtype}``.
        outputs: ``{graph output name: declared dtype}`` of the carried outputs.
    """
    model: object
    inputs: dict
    outputs: dict


def carry(model, carried: dict, framework: str) -> CarriedModel:
    """Declare the values of the types in ``carried`` (``{dtype: carrier}``) that ``model``
    feeds or stores in their carriers; raise UnsupportedError where one reaches an input
    that does more than read it."""
    if not carried:
        return CarriedModel(model, {}, {})
    declared = {vi.name: vi.dtype for vi in model.inputs if vi.dtype in carried}
    declared.update({name: value.dtype for name, value in model.initializers.items()
                     if value.dtype in carried})
    if not declared:
        return CarriedModel(model, {}, {})
    for op in model.operations:   # topological order
        for index, name in enumerate(op.inputs):
            if name not in declared:
                continue
            if (op.op_type, index) not in _READS:
                dtype = declared[name]
                raise UnsupportedError(
                    f"{framework} does not compute with {dtype}: it carries {dtype} "
                    f"values as {carried[dtype]}, which gives ONNX's results only where "
                    f"they are read (Cast, CastLike's input, DequantizeLinear, Identity, "
                    f"Reshape, ...), but {dtype} value {name!r} of model '{model.name}' "
                    f"is input {index} of node '{op.name}' ({op.op_type}). Run the model "
                    f"on the reference executor")
        if op.op_type in _MOVES and op.inputs and op.inputs[0] in declared and op.outputs:
            declared[op.outputs[0]] = declared[op.inputs[0]]

    def retyped(vi):
        if vi.name not in declared:
            return vi
        return dataclasses.replace(vi, dtype=carried[declared[vi.name]])
    outputs = {vi.name: vi.dtype for vi in model.outputs if vi.name in declared}
    rewritten = dataclasses.replace(
        model,
        inputs=[retyped(vi) for vi in model.inputs],
        outputs=[retyped(vi) for vi in model.outputs],
        value_info={name: retyped(vi) for name, vi in model.value_info.items()},
        initializers={name: value.astype(carried[value.dtype]) if value.dtype in carried
                      else value for name, value in model.initializers.items()})
    feeds = {vi.name: carried[vi.dtype] for vi in model.feed_inputs if vi.dtype in carried}
    return CarriedModel(rewritten, feeds, outputs)


def restore(array: np.ndarray, declared, name: str, framework: str) -> np.ndarray:
    """An output computed in a carrier returned in the type the graph ``declared``;
    every value must be one of that type's (checked, so nothing is silently rounded)."""
    declared = np.dtype(declared)
    if array.dtype == declared:
        return array
    narrow = array.astype(declared)
    if not np.array_equal(narrow.astype(array.dtype), array,
                          equal_nan=array.dtype.kind == "f"):
        raise UnsupportedError(f"{framework} computed output {name!r} as {array.dtype}, "
                               f"but the graph declares it {declared} and some values "
                               f"are not {declared} values; run the model on the "
                               f"reference executor")
    return narrow
