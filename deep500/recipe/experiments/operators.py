"""Level-0 experiments: single operators across frameworks (``experiment: operators``).

Every framework gets the same seeded inputs; errors are against the NumPy reference
computed in float64 on those inputs. A framework alternative may also be a C++ kernel
(``{cpp: kernels/relu.cpp, op: Relu}``, see ``deep500.recipe.cpp_kernel``).
"""
from __future__ import annotations

import math
import zlib

import numpy as np

from deep500.lv0_operators.op_validation import test_op_forward
from deep500.recipe import components
from deep500.recipe.cpp_kernel import CppKernelSpec, parse_cpp_kernel
from deep500.recipe.experiments import base
from deep500.recipe.operator_spec import OperatorSpec, inference_problem, parse_operator
from deep500.utils.errors import Deep500Error, RecipeError


def make_inputs(spec: OperatorSpec, dtype: str, seed: int) -> list[np.ndarray]:
    """The same inputs for every framework: standard normal, seeded by (seed, operator)."""
    rng = np.random.default_rng([seed, zlib.crc32(spec.label.encode())])
    return [rng.standard_normal(shape).astype(dtype) for shape in spec.input_shapes]


def _framework(value, where, recipe_dir=None):
    if isinstance(value, dict):
        return parse_cpp_kernel(value, where, recipe_dir)
    return components.registered_name(
        value, "framework", where, components.framework_names(),
        hint=", or a C++ kernel {cpp: SOURCE, op: ONNX_OPERATOR}")


def _machine_memory() -> int | None:
    try:
        import psutil
        return int(psutil.virtual_memory().total)
    except Exception:  # no psutil, or no memory information on this system
        return None


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
        **base.CONDITIONS,
    }
    input_components = ("operator", "dtype", "seed")
    metric_names = ("WallclockTime", "FLOPs", "L1Error", "L2Error", "MaxError",
                    "DiffHeatmap", "VarHeatmap", "Energy")

    def check(self, recipe, problems) -> None:
        """Every framework must be installed and offer every operator, and every
        operator must pass ONNX shape inference, checked up front."""
        operators = recipe.located("operator")
        devices = recipe.located("device")
        runnable = {path: True for path, _ in operators}
        for fpath, framework in recipe.located("framework"):
            if isinstance(framework, CppKernelSpec):
                self._check_kernel(recipe, framework, fpath, problems)
                continue
            before = len(problems)
            with problems.check(fpath, framework):
                components.framework_module(framework)
            for dpath, device in devices:
                with problems.check(fpath, device):
                    components.check_device(framework, device)
            if len(problems) > before:
                continue  # not installed, or not on this device: once is enough
            for opath, spec in operators:
                for _, device in devices:
                    with problems.check(opath, spec.label):
                        try:
                            components.create_operator(framework, spec, device)
                        except Deep500Error as exc:
                            runnable[opath] = False
                            raise RecipeError(f"{fpath}: framework {framework!r} cannot "
                                              f"run {opath} ({spec.label}): {exc}") from None
        dtypes = sorted({d for _, d in recipe.located("dtype")})
        memory = _machine_memory()
        for opath, spec in operators:
            if not runnable[opath]:
                continue  # the framework's reason is given
            for dtype in dtypes:
                problem = inference_problem(spec, dtype)
                if problem:
                    problems.add(opath, f"{spec.label}: ONNX shape inference rejects this "
                                        f"operator: {problem}")
                    break
            elements = sum(math.prod(shape) for shape in spec.input_shapes)
            need = elements * (max(np.dtype(d).itemsize for d in dtypes) + 8)
            if memory and need > memory:
                problems.add(opath, f"{spec.label}: its inputs alone take "
                                    f"{need / 2**30:.1f} GiB (in {'/'.join(dtypes)}, plus the "
                                    f"float64 copy the reference computes on), more than "
                                    f"this machine's {memory / 2**30:.1f} GiB of memory")

    @staticmethod
    def _check_kernel(recipe, kernel: CppKernelSpec, where: str, problems) -> None:
        """Build the kernel for every operator it implements before anything runs."""
        if any(str(d) != "cpu" for d in recipe.alternatives("device")):
            problems.add(where, f"the C++ kernel {kernel.name} runs on the CPU only; use "
                                f"device: cpu")
            return
        specs = [s for s in recipe.alternatives("operator") if s.op_type == kernel.op_type]
        if not specs:
            problems.add(where, f"the C++ kernel {kernel.name} implements {kernel.op_type}, "
                                f"but the recipe has no {kernel.op_type} operator")
        for spec in specs:
            for dtype in recipe.alternatives("dtype"):
                with problems.check(where, spec.label):
                    try:
                        _create_operator(kernel, spec, dtype, "cpu")
                    except Deep500Error as exc:
                        raise RecipeError(f"{where}: the C++ kernel {kernel.name} cannot "
                                          f"run {spec.label} in {dtype}: {exc}") from None

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
