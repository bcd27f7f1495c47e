"""Level-0 operator specifications in recipes: which ONNX operator, with which input
shapes and attributes.

Accepted forms (one mapping per operator)::

    {op: Gemm, from: deepbench_gemm.csv, row: 0}     # a DeepBench row (packaged file
                                                     # name, or a path relative to the
                                                     # recipe)
    {op: Softmax, shape: [256, 1000], axis: -1}      # one input; other keys: attributes
    {op: Gemm, inputs: [[64, 128], [128, 32]], attributes: {transB: 0}}
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from deep500.utils import deepbench
from deep500.utils.errors import RecipeError


@dataclass(frozen=True)
class OperatorSpec:
    op_type: str
    input_shapes: tuple
    attributes: dict = field(default_factory=dict, hash=False)
    source: str | None = None
    name: str | None = None  # a conventional description, e.g. "m=1760 n=16 k=1760"

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
        return {"op_type": self.op_type, "input_shapes": [list(s) for s in self.input_shapes],
                "attributes": self.attributes, "source": self.source, "label": self.label}


def _shape(value, where: str) -> tuple:
    if (not isinstance(value, (list, tuple)) or
            not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value)):
        raise RecipeError(f"{where}: a shape must be a list of positive integers, got {value!r}")
    return tuple(value)


def parse_operator(entry, where: str, recipe_dir: str) -> OperatorSpec:
    """Turn one recipe entry into an OperatorSpec, or raise a RecipeError naming ``where``."""
    if not isinstance(entry, dict):
        raise RecipeError(f"{where}: an operator is a mapping with an 'op' key, got {entry!r}")
    entry = dict(entry)
    op_type = entry.pop("op", None)
    if not isinstance(op_type, str):
        raise RecipeError(f"{where}: missing 'op' (the ONNX operator name, e.g. Conv)")
    if "from" in entry:
        return _from_file(op_type, entry, where, recipe_dir)
    attributes = dict(entry.pop("attributes", {}) or {})
    if "shape" in entry and "inputs" in entry:
        raise RecipeError(f"{where}: give either 'shape' (one input) or 'inputs', not both")
    if "shape" in entry:
        shapes = [_shape(entry.pop("shape"), f"{where}.shape")]
    elif "inputs" in entry:
        inputs = entry.pop("inputs")
        if not isinstance(inputs, list) or not inputs:
            raise RecipeError(f"{where}.inputs: a non-empty list of shapes is required")
        shapes = [_shape(s, f"{where}.inputs[{i}]") for i, s in enumerate(inputs)]
    else:
        raise RecipeError(f"{where}: say where the sizes come from: 'shape', 'inputs', or "
                          f"'from' with 'row'")
    attributes.update(entry)  # remaining keys are attributes, e.g. axis: -1
    return OperatorSpec(op_type, tuple(shapes), attributes)


def _from_file(op_type: str, entry: dict, where: str, recipe_dir: str) -> OperatorSpec:
    name = entry.pop("from")
    row_index = entry.pop("row", None)
    if entry:
        raise RecipeError(f"{where}: unexpected keys {sorted(entry)} next to 'from'")
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
    rows = deepbench.read_rows(path)
    if not isinstance(row_index, int) or not 0 <= row_index < len(rows):
        raise RecipeError(f"{where}.row: must be an integer in [0, {len(rows) - 1}] for "
                          f"{os.path.basename(path)}, got {row_index!r}")
    try:
        shapes, attributes = builder(rows[row_index])
        name = deepbench.describe(op_type, rows[row_index])
    except KeyError as exc:
        raise RecipeError(f"{where}: {path} has no column {exc} needed for {op_type}") from None
    return OperatorSpec(op_type, tuple(tuple(s) for s in shapes), attributes,
                        source=f"{os.path.basename(path)} row {row_index}", name=name)
