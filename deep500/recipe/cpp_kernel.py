"""A C++ source as a framework alternative in ``experiment: operators`` recipes, so that a
custom kernel is measured against the framework operators in the same report::

    mutable:
      framework:
        - reference
        - pytorch
        - {cpp: kernels/relu.cpp, op: Relu}          # path relative to the recipe
        - {cpp: kernels/softmax.cpp, op: Softmax, name: softmax_rows,
           definitions: {BLOCK: 64}}

The kernel runs only on the recipe's operators of its ``op`` type (other combinations
are recorded as skipped). It is compiled with ``compile_custom_cppop`` for each input
shape and dtype, with output shapes from ONNX shape inference of the operator.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from deep500.recipe.operator_spec import OperatorSpec
from deep500.recipe.problems import describe, key_path, show
from deep500.utils.errors import RecipeError

_KEYS = {"cpp", "op", "name", "definitions"}


@dataclass(frozen=True)
class CppKernelSpec:
    source: str
    op_type: str
    name: str
    definitions: dict = field(default_factory=dict, hash=False, compare=False)

    def __str__(self) -> str:
        return f"cpp-{self.name}"

    def to_dict(self) -> dict:
        return {"cpp": self.source, "op": self.op_type, "name": self.name,
                "definitions": dict(self.definitions)}

    def compile(self, spec: OperatorSpec, dtype: str):
        """The kernel built for ``spec``'s shapes in ``dtype`` (cached across runs)."""
        import deep500 as d5
        inputs = [d5.tensordesc(dtype, shape) for shape in spec.input_shapes]
        outputs = [d5.tensordesc(dtype, shape) for shape in output_shapes(spec, dtype)]
        return d5.compile_custom_cppop(self.name, self.source, inputs, outputs,
                                       self.definitions)


def parse_cpp_kernel(value: dict, where: str, recipe_dir: str) -> CppKernelSpec:
    unknown = sorted(map(str, set(value) - _KEYS))
    if unknown:
        raise RecipeError(f"{where}: unexpected keys {unknown} in a C++ kernel; "
                          f"allowed: {sorted(_KEYS)}")
    source, op_type = value.get("cpp"), value.get("op")
    if not isinstance(source, str) or not source or not isinstance(op_type, str):
        raise RecipeError(f"{where}: a C++ kernel needs 'cpp' (the source file) and 'op' "
                          f"(the ONNX operator it implements, e.g. Relu)")
    path = source if os.path.isabs(source) else os.path.join(recipe_dir or ".", source)
    if not os.path.isfile(path):
        raise RecipeError(f"{where}.cpp: the source file {path!r} does not exist")
    name = value.get("name") or re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise RecipeError(f"{where}.name: {show(name)} must be a C identifier")
    definitions = value.get("definitions") or {}
    if not isinstance(definitions, dict):
        raise RecipeError(f"{where}.definitions: expected a mapping, got {describe(definitions)}")
    for key, definition in definitions.items():
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise RecipeError(f"{where}.definitions: {show(key)} must be a C identifier "
                              f"(a macro name)")
        if not isinstance(definition, (str, int, float)) or (
                isinstance(definition, float) and not math.isfinite(definition)):
            raise RecipeError(f"{key_path(where, 'definitions', key)}: a macro's value is a "
                              f"number or a string, got {describe(definition)}")
    return CppKernelSpec(os.path.abspath(path), op_type, name, dict(definitions))


def output_shapes(spec: OperatorSpec, dtype: str) -> list[tuple]:
    """Output shapes of ``spec`` by ONNX shape inference of a one-node model."""
    import numpy as np
    import onnx
    from onnx import helper
    element = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    names = [f"x{i}" for i in range(len(spec.input_shapes))]
    node = helper.make_node(spec.op_type, names, ["y"], **spec.attributes)
    graph = helper.make_graph(
        [node], "kernel", [helper.make_tensor_value_info(n, element, list(s))
                           for n, s in zip(names, spec.input_shapes)],
        [helper.make_tensor_value_info("y", element, None)])
    model = helper.make_model(graph)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as exc:  # onnx raises several types for invalid nodes
        raise RecipeError(f"{spec.label}: ONNX shape inference failed, so the C++ kernel's "
                          f"output shape is unknown: {exc}") from None
    outputs = [v for v in inferred.graph.output if v.name == "y"]
    dims = outputs[0].type.tensor_type.shape.dim if outputs else []
    if not dims or any(not d.HasField("dim_value") for d in dims):
        raise RecipeError(f"{spec.label}: ONNX shape inference gives no static output shape "
                          f"for the C++ kernel")
    return [tuple(d.dim_value for d in dims)]
