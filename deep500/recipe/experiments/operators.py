"""Level-0 experiments: single operators across frameworks (``experiment: operators``).

Every framework gets the same seeded inputs; errors are against the NumPy reference
computed in float64 on those inputs. A framework alternative may also be a C++ kernel
(``{cpp: kernels/relu.cpp, op: Relu}``, see ``deep500.recipe.cpp_kernel``).
"""
from __future__ import annotations

import zlib

import numpy as np

from deep500.lv0_operators.op_validation import test_op_forward
from deep500.recipe import components
from deep500.recipe.cpp_kernel import CppKernelSpec, parse_cpp_kernel
from deep500.recipe.experiments import base
from deep500.recipe.operator_spec import OperatorSpec, parse_operator
from deep500.utils.errors import Deep500Error, RecipeError


def make_inputs(spec: OperatorSpec, dtype: str, seed: int) -> list[np.ndarray]:
    """The same inputs for every framework: standard normal, seeded by (seed, operator)."""
    rng = np.random.default_rng([seed, zlib.crc32(spec.label.encode())])
    return [rng.standard_normal(shape).astype(dtype) for shape in spec.input_shapes]


def _framework(value, where, recipe_dir=None):
    if isinstance(value, dict):
        return parse_cpp_kernel(value, where, recipe_dir)
    if value not in components.FRAMEWORKS:
        raise RecipeError(f"{where}: unknown framework {value!r}; known: "
                          f"{sorted(components.FRAMEWORKS)}, or a C++ kernel "
                          f"{{cpp: SOURCE, op: ONNX_OPERATOR}}")
    return value


def _create_operator(framework, spec: OperatorSpec, dtype: str, device):
    if isinstance(framework, CppKernelSpec):
        from deep500.frameworks.reference import custom_op
        return custom_op(framework.compile(spec, dtype))
    return components.create_operator(framework, spec, device)


class OperatorsExperiment(base.Experiment):
    name = "operators"
    level = 0
    components = {
        "framework": (_framework, base.REQUIRED),
        "operator": (parse_operator, base.REQUIRED),
        "dtype": (base.dtype, "float32"),
        "threads": (base.positive_int, None),
        "device": (base.device, "cpu"),
        "seed": (base.non_negative_int, 0),
    }
    input_components = ("operator", "dtype", "seed")
    metric_names = ("WallclockTime", "FLOPs", "L1Error", "L2Error", "MaxError",
                    "DiffHeatmap", "VarHeatmap")

    def check(self, recipe, where: str) -> None:
        """Every framework must be installed and offer every operator, checked up front."""
        for framework in recipe.alternatives("framework"):
            if isinstance(framework, CppKernelSpec):
                self._check_kernel(recipe, framework, where)
                continue
            for device in recipe.alternatives("device"):
                try:
                    components.check_device(framework, device)
                except RecipeError as exc:
                    raise RecipeError(f"{where}: {exc}") from None
            for spec in recipe.alternatives("operator"):
                for device in recipe.alternatives("device"):
                    try:
                        components.create_operator(framework, spec, device)
                    except Deep500Error as exc:
                        raise RecipeError(f"{where}: framework {framework!r} cannot run "
                                          f"{spec.label}: {exc}") from None

    @staticmethod
    def _check_kernel(recipe, kernel: CppKernelSpec, where: str) -> None:
        """Build the kernel for every operator it implements before anything runs."""
        if any(str(d) != "cpu" for d in recipe.alternatives("device")):
            raise RecipeError(f"{where}: the C++ kernel {kernel.name} runs on the CPU only; "
                              f"use device: cpu")
        specs = [s for s in recipe.alternatives("operator") if s.op_type == kernel.op_type]
        if not specs:
            raise RecipeError(f"{where}: the C++ kernel {kernel.name} implements "
                              f"{kernel.op_type}, but the recipe has no {kernel.op_type} "
                              f"operator")
        for spec in specs:
            for dtype in recipe.alternatives("dtype"):
                try:
                    _create_operator(kernel, spec, dtype, "cpu")
                except Deep500Error as exc:
                    raise RecipeError(f"{where}: the C++ kernel {kernel.name} cannot run "
                                      f"{spec.label} in {dtype}: {exc}") from None

    def applicable(self, configuration):
        """Why a configuration is skipped: a C++ kernel only runs its own operator."""
        kernel, spec = configuration["framework"], configuration["operator"]
        if isinstance(kernel, CppKernelSpec) and spec.op_type != kernel.op_type:
            return f"the C++ kernel {kernel.name} implements {kernel.op_type}, not {spec.op_type}"
        return None

    def measure(self, recipe, configuration, tag, output_dir, state):
        spec: OperatorSpec = configuration["operator"]
        inputs = make_inputs(spec, configuration["dtype"], configuration["seed"])
        key = (spec.label, configuration["dtype"], configuration["seed"])
        if state.get("key") != key:
            # Only the latest reference is kept: configurations sharing inputs are
            # consecutive, and outputs of large convolutions are too big to hoard.
            reference_op = components.create_operator("reference", spec, "cpu")
            outputs = reference_op.forward(*[x.astype(np.float64) for x in inputs])
            state.update(key=key, reference=outputs if isinstance(outputs, tuple)
                         else (outputs,))
        op = _create_operator(configuration["framework"], spec, configuration["dtype"],
                              configuration["device"])
        metrics = recipe.build_metrics(output_dir, tag)
        return test_op_forward(op, inputs, state["reference"], metrics)

    def describe(self, configuration):
        described = {**configuration, "operator": configuration["operator"].to_dict()}
        if isinstance(configuration["framework"], CppKernelSpec):
            described["framework"] = str(configuration["framework"])
            described["cpp_kernel"] = configuration["framework"].to_dict()
        return described
