"""Level-0 operator specifications in recipes: which ONNX operator, with which input
shapes and attributes.

Accepted forms (one mapping per operator)::

    {op: Gemm, from: deepbench_gemm.csv, row: 0}     # a DeepBench row (packaged file
                                                     # name, or a path relative to the
                                                     # recipe)
    {op: Gemm, from: deepbench_gemm.csv, rows: all, kind: training, sample: 20}
                                                     # many rows: one operator each
                                                     # (deep500.recipe.operator_rows)
    {op: Softmax, shape: [256, 1000], axis: -1}      # one input; other keys: attributes
    {op: Gemm, inputs: [[64, 128], [128, 32]], attributes: {transB: 0}}
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from deep500.recipe.several import Several
from deep500.recipe.operator_rows import SELECTION_KEYS, select_rows
from deep500.recipe.problems import describe, key_path, show
from deep500.utils import deepbench
from deep500.utils.errors import RecipeError
from deep500.utils.flops import flop_count


@dataclass(frozen=True)
class OperatorSpec:
    op_type: str
    input_shapes: tuple
    attributes: dict = field(default_factory=dict, hash=False)
    source: str | None = None
    name: str | None = None  # a conventional description, e.g. "m=1760 n=16 k=1760"
    # how the entry it came from chose its rows (``RowSelection.text()``), if by ``rows:``
    selection: str | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        if self.name:
            return f"{self.op_type} {self.name}"
        shapes = " × ".join("x".join(str(d) for d in s) for s in self.input_shapes)
        text = f"{self.op_type} {shapes}"
        flags = [f"{k}={v}" for k, v in self.attributes.items()
                 if k not in ("kernel_shape",) and v not in (0, None, [0, 0, 0, 0], [1, 1])]
        if flags:
            text += " (" + ", ".join(flags) + ")"
        return text

    def to_dict(self) -> dict:
        # the selection is the recipe's (the manifest's row_selections), not the
        # configuration's: a row measured is the same configuration however chosen
        return {"op_type": self.op_type, "input_shapes": [list(s) for s in self.input_shapes],
                "attributes": self.attributes, "source": self.source, "label": self.label}


_INT64 = 2 ** 63
_MAX_EXTENT = 2 ** 31 - 1  # what frameworks index with a 32-bit integer


def _shape(value, where: str) -> tuple:
    if (not isinstance(value, (list, tuple)) or
            not all(isinstance(d, int) and not isinstance(d, bool) and 0 < d <= _MAX_EXTENT
                    for d in value)):
        raise RecipeError(f"{where}: a shape must be a list of positive integers (each at "
                          f"most {_MAX_EXTENT}), got {show(value)}")
    return tuple(value)


def parse_operator(entry, where: str, recipe_dir: str) -> OperatorSpec:
    """Turn one recipe entry into an OperatorSpec, or raise a RecipeError naming ``where``
    (every problem of the entry at once: its ``problems`` lists them)."""
    if not isinstance(entry, dict):
        raise RecipeError(f"{where}: an operator is a mapping with an 'op' key, got "
                          f"{describe(entry)}")
    entry = dict(entry)
    op_type = entry.pop("op", None)
    if not isinstance(op_type, str):
        raise RecipeError(f"{where}: missing 'op' (the ONNX operator name, e.g. Conv)"
                          + (f", got {describe(op_type)}" if op_type is not None else ""))
    keys = [k for k in entry if not isinstance(k, str)]
    if keys:
        raise RecipeError(f"{where}: keys are names (strings), got {show(keys)}")
    if "from" in entry:
        return _from_file(op_type, entry, where, recipe_dir)
    attributes = entry.pop("attributes", None) or {}
    if not isinstance(attributes, dict) or not all(isinstance(k, str) for k in attributes):
        raise RecipeError(f"{where}.attributes: a mapping of attribute names to values, "
                          f"got {describe(attributes)}")
    paths = {name: key_path(where, "attributes", name) for name in attributes}
    attributes = dict(attributes)
    if "shape" in entry and "inputs" in entry:
        raise RecipeError(f"{where}: give either 'shape' (one input) or 'inputs', not both")
    if "shape" in entry:
        shapes = [_shape(entry.pop("shape"), f"{where}.shape")]
    elif "inputs" in entry:
        inputs = entry.pop("inputs")
        if not isinstance(inputs, list) or not inputs:
            raise RecipeError(f"{where}.inputs: a non-empty list of shapes is required, got "
                              f"{describe(inputs)}")
        shapes = [_shape(s, f"{where}.inputs[{i}]") for i, s in enumerate(inputs)]
    else:
        raise RecipeError(f"{where}: say where the sizes come from: 'shape', 'inputs', or "
                          f"'from' with 'row'")
    # remaining keys are attributes, e.g. axis: -1
    paths.update({name: key_path(where, name) for name in entry})
    attributes.update(entry)
    check_attributes(op_type, attributes, where, paths)
    return OperatorSpec(op_type, tuple(shapes), attributes)


# ONNX attribute type -> (what the recipe gives, check of one value)
def _is_int(value) -> bool:
    return isinstance(value, int) and -_INT64 <= value < _INT64  # bool: ONNX's 0/1


def _is_float(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_string(value) -> bool:
    return isinstance(value, str)


_ATTRIBUTE_KINDS = {
    "INT": ("an integer", _is_int, False),
    "FLOAT": ("a number", _is_float, False),
    "STRING": ("a string", _is_string, False),
    "INTS": ("a list of integers", _is_int, True),
    "FLOATS": ("a list of numbers", _is_float, True),
    "STRINGS": ("a list of strings", _is_string, True),
}


def check_attributes(op_type: str, attributes: dict, where: str,
                     paths: dict | None = None) -> None:
    """Attribute names and value types against the ONNX schema of ``op_type``
    (``onnx.defs.get_schema(op).attributes[name].type``, the latest opset this onnx
    knows). Operators outside ONNX are left to the framework's own check."""
    import onnx.defs
    if not onnx.defs.has(op_type):
        return
    schema = onnx.defs.get_schema(op_type)
    paths = paths or {}
    unknown = sorted(name for name in attributes if name not in schema.attributes)
    if unknown:
        raise RecipeError(f"{where}: {op_type} has no attributes {unknown}; ONNX {op_type} "
                          f"takes {sorted(schema.attributes) or 'none'}")
    problems = []
    for name, value in attributes.items():
        kind = schema.attributes[name].type.name
        at = paths.get(name, key_path(where, name))
        if kind not in _ATTRIBUTE_KINDS:
            problems.append(f"{at}: ONNX {op_type}'s attribute {name!r} is of type {kind}, "
                            f"which a recipe cannot give")
            continue
        expected, valid, is_list = _ATTRIBUTE_KINDS[kind]
        ok = (isinstance(value, list) and all(valid(v) for v in value)) if is_list \
            else valid(value)
        if not ok:
            problems.append(f"{at}: ONNX {op_type}'s attribute {name!r} is {expected} "
                            f"({kind}), got {describe(value)}")
    if problems:
        error = RecipeError("; ".join(problems))
        error.problems = problems
        raise error


def inference_problem(spec: OperatorSpec, dtype: str = "float32") -> str | None:
    """Why ONNX shape inference (strict mode) rejects ``spec`` as a one-node model — an
    axis out of range, inner dimensions that do not match, a missing input — or None.
    Operators outside ONNX are not checked."""
    import numpy as np
    import onnx
    from onnx import helper
    if not onnx.defs.has(spec.op_type):
        return None
    element = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    names = [f"x{i}" for i in range(len(spec.input_shapes))]
    try:
        node = helper.make_node(spec.op_type, names, ["y"], **spec.attributes)
        graph = helper.make_graph(
            [node], "operator", [helper.make_tensor_value_info(n, element, list(s))
                                 for n, s in zip(names, spec.input_shapes)],
            [helper.make_tensor_value_info("y", element, None)])
        onnx.shape_inference.infer_shapes(helper.make_model(graph), strict_mode=True)
    except Exception as exc:  # onnx raises several types for invalid nodes
        return str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
    return None


def _from_file(op_type: str, entry: dict, where: str, recipe_dir: str):
    """One OperatorSpec for ``row:``, or ``Several`` of them for ``rows:``."""
    name = entry.pop("from")
    if not isinstance(name, str) or not name:
        raise RecipeError(f"{where}.from: a CSV file of sizes (a packaged name or a path), "
                          f"got {describe(name)}")
    builder = deepbench.SPEC_BUILDERS.get(op_type)
    if builder is None:
        raise RecipeError(f"{where}: sizes 'from' a file are supported for "
                          f"{sorted(deepbench.SPEC_BUILDERS)}, not {op_type}")
    if name in deepbench.PACKAGED:
        path = deepbench.packaged_data_path(name)
    else:
        path = name if os.path.isabs(name) else os.path.join(recipe_dir, name)
    if not os.path.isfile(path):
        raise RecipeError(f"{where}.from: file {path!r} does not exist (packaged files: "
                          f"{sorted(deepbench.PACKAGED)})")
    try:
        rows = deepbench.read_rows(path)
    except (OSError, UnicodeError, ValueError) as exc:
        raise RecipeError(f"{where}.from: cannot read {path!r} as a CSV file of sizes: "
                          f"{exc}") from None
    if "rows" in entry:
        if "row" in entry:
            raise RecipeError(f"{where}: give either 'row' (one row) or 'rows' (many), "
                              f"not both")
        selection = select_rows(entry, rows, os.path.basename(path), where,
                                lambda index: _row_gflop(op_type, builder, rows, index, path,
                                                         where),
                                lambda index: _row_elements(op_type, builder, rows, index,
                                                            path, where))
        return Several(_row_spec(op_type, builder, rows, index, path, where,
                                 f"{where}.rows", selection.text())
                       for index in selection.rows)
    row_index = entry.pop("row", None)
    if entry:
        stray = sorted(entry)
        hint = (" (those select many rows: use them with 'rows', e.g. rows: all)"
                if set(stray) <= set(SELECTION_KEYS) else "")
        raise RecipeError(f"{where}: unexpected keys {stray} next to 'from'{hint}")
    if (not isinstance(row_index, int) or isinstance(row_index, bool)
            or not 0 <= row_index < len(rows)):
        raise RecipeError(f"{where}.row: must be an integer in [0, {len(rows) - 1}] for "
                          f"{os.path.basename(path)}, got {show(row_index)}")
    return _row_spec(op_type, builder, rows, row_index, path, where, f"{where}.row")


def _row_spec(op_type, builder, rows, row_index, path, where, row_where,
              selection=None) -> OperatorSpec:
    try:
        shapes, attributes = builder(rows[row_index])
        name = deepbench.describe(op_type, rows[row_index])
    except KeyError as exc:
        raise RecipeError(f"{where}: {path} has no column {exc} needed for {op_type}") from None
    except (ValueError, TypeError) as exc:
        raise RecipeError(f"{row_where}: row {row_index} of {path} is not a valid "
                          f"{op_type} size: {exc}") from None
    return OperatorSpec(op_type, tuple(tuple(s) for s in shapes), attributes,
                        source=f"{os.path.basename(path)} row {row_index}", name=name,
                        selection=selection)


def _row_gflop(op_type, builder, rows, index, path, where) -> float:
    spec = _row_spec(op_type, builder, rows, index, path, where, f"{where}.rows")
    return flop_count(op_type, spec.input_shapes, spec.attributes) / 1e9


def _row_elements(op_type, builder, rows, index, path, where) -> int:
    spec = _row_spec(op_type, builder, rows, index, path, where, f"{where}.rows")
    return sum(math.prod(shape) for shape in spec.input_shapes)
