"""The framework registry: names, capabilities, factories, missing-dependency messages
and supported operators, all from one table, without importing frameworks that are not
asked for."""
import dataclasses
import pathlib
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from deep500.frameworks import registry
from deep500.lv0_operators import nativeop_validation
from deep500.utils.errors import Deep500Error, MissingDependencyError

ROOT = pathlib.Path(__file__).resolve().parents[2]


def relu_model() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_names_and_capabilities():
    assert registry.names() == ["reference", "pytorch", "tensorflow", "onnxruntime"]
    assert registry.names(backprop=True) == ["reference", "pytorch", "tensorflow"]
    assert registry.names(backprop=False) == ["onnxruntime"]
    assert registry.names(native_operators=True) == ["reference", "pytorch", "tensorflow"]
    assert "pytorch_compiled" in registry.executor_names(backprop=True)
    assert "tensorflow_function" in registry.executor_names()
    assert "onnxruntime" not in registry.executor_names(backprop=True)
    assert registry.framework_of("pytorch_compiled").name == "pytorch"
    assert registry.get("reference").capabilities.devices == ("cpu",)
    for framework in registry.FRAMEWORKS.values():
        assert framework.name in framework.executors   # its own name is an executor
        assert framework.module == f"deep500.frameworks.{framework.name}"
        assert (ROOT / "deep500" / "frameworks" / framework.name / "__init__.py").is_file()


@pytest.mark.parametrize("lookup,name,suggestion", [
    (registry.get, "pytroch", "pytorch"), (registry.framework_of, "tensorflow_functon",
                                           "tensorflow_function")])
def test_unknown_names_list_the_registered_ones_and_the_closest(lookup, name, suggestion):
    with pytest.raises(Deep500Error) as error:
        lookup(name)
    message = str(error.value)
    assert f"Did you mean '{suggestion}'?" in message
    assert all(n in message for n in registry.names())
    with pytest.raises(Deep500Error, match="registered: "):
        registry.get(3)


def test_missing_dependency_messages_name_the_pip_package_and_install_command():
    setup = (ROOT / "setup.py").read_text()
    for name in ("pytorch", "tensorflow", "onnxruntime"):
        framework = registry.get(name)
        message = framework.missing_dependency_message()
        assert f"pip package '{framework.pip}'" in message
        assert f"pip install 'deep500[{framework.extra}]'" in message
        assert f'"{framework.extra}":' in setup      # an extra setup.py declares
    ghost = dataclasses.replace(registry.get("pytorch"), name="ghost",
                                module="deep500.frameworks.ghost_bridge",
                                requires=("no_such_package_d5",), extra="pytorch")
    assert not ghost.is_installed()
    with pytest.raises(ImportError):
        ghost.load()


def test_a_bridge_whose_dependency_is_missing_says_what_to_install(monkeypatch):
    framework = registry.get("pytorch")
    real_import = registry.importlib.import_module

    def no_torch(name, *args):
        if name.startswith("deep500.frameworks.pytorch"):
            error = ModuleNotFoundError("No module named 'torch'")
            error.name = "torch"
            raise error
        return real_import(name, *args)

    monkeypatch.setattr(registry.importlib, "import_module", no_torch)
    with pytest.raises(MissingDependencyError, match=r"deep500\[pytorch\]"):
        framework.executor_factory()


def test_importing_the_registry_imports_no_framework():
    code = ("import sys\nfrom deep500.frameworks import registry\n"
            "registry.names(); registry.executor_names(); registry.get('pytorch').install\n"
            "registry.get('reference').supported_operators()\n"
            "print(sorted(m for m in ('torch', 'tensorflow', 'onnxruntime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"


def test_supported_operators_come_from_each_framework():
    from deep500.frameworks.reference.operators import operator_keys
    reference = registry.get("reference").supported_operators()
    assert set(operator_keys()) <= reference
    # operators of other domains are supported in their domain only
    assert registry.get("reference").supports("LabelEncoder", domain="ai.onnx.ml")
    assert not registry.get("reference").supports("LabelEncoder")
    assert registry.get("reference").supports("Relu")
    assert registry.get("reference").supports("Relu", domain="ai.onnx")
    assert not registry.get("reference").supports("Frobnicate")
    for name in ("pytorch", "tensorflow"):
        framework = registry.get(name)
        if not framework.is_installed():
            continue
        visitor = registry._attribute(framework.visitor, framework)
        ops = framework.supported_operators()
        assert ("", "Conv") in ops and ("", "Frobnicate") not in ops
        for _, op_type in ops:   # each one is a visit_<op> method of its visitor
            assert callable(getattr(visitor, f"visit_{op_type.lower()}")), (name, op_type)
        methods = {m[6:] for m in dir(visitor) if m.startswith("visit_")}
        spelled = {s.name.lower() for s in onnx.defs.get_all_schemas_with_history()}
        assert {op.lower() for _, op in ops} == methods & spelled


def test_onnxruntime_supports_what_it_declares():
    ort = pytest.importorskip("onnxruntime")
    ops = registry.get("onnxruntime").supported_operators()
    kernels = {k.op_name for k in ort.capi._pybind_state.get_all_opkernel_def()
               if k.domain in ("", "ai.onnx")}
    assert {("", op) for op in kernels} <= ops
    assert ("com.microsoft", "FusedConv") in ops or not any(
        k.domain == "com.microsoft" for k in ort.capi._pybind_state.get_all_opkernel_def())
    assert registry.get("onnxruntime").supports("DFT")
    assert not registry.get("onnxruntime").supports("Frobnicate")


@pytest.mark.parametrize("executor", ["reference", "onnxruntime", "pytorch", "tensorflow"])
def test_executor_factories_build_working_executors(executor):
    framework = registry.framework_of(executor)
    if not framework.is_installed():
        pytest.skip(framework.missing_dependency_message())
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    y = registry.executor_factory(executor)(relu_model()).inference({"x": x})["y"]
    np.testing.assert_array_equal(np.asarray(y), np.maximum(x, 0))


def test_optimizers_and_operators_by_capability():
    assert registry.get("reference").optimizer_module().GradientDescent
    with pytest.raises(Deep500Error, match="no optimizers.*runs inference only"):
        registry.get("onnxruntime").optimizer_module()
    with pytest.raises(Deep500Error, match="no native operators|offers no native"):
        registry.get("onnxruntime").native_operator_factory()
    relu = registry.get("reference").native_operator_factory()("Relu")
    np.testing.assert_array_equal(relu.forward(np.array([-1.0, 2.0])), [0.0, 2.0])
    assert registry.get("reference").gpus() == 0


def test_level_0_finds_reference_operators_by_name_through_the_registry():
    # deep500.frameworks registered the factory when it was imported (injection: level 0
    # itself imports no framework)
    op = nativeop_validation._reference("Relu")
    np.testing.assert_array_equal(op.forward(np.array([-2.0, 3.0])), [0.0, 3.0])
    with pytest.raises(Deep500Error, match="Did you mean|NoSuchOp"):
        nativeop_validation._reference("NoSuchOp")


def test_glue_modules_exist():
    for framework in registry.FRAMEWORKS.values():
        for module in framework.glue:
            path = ROOT / (module.replace(".", "/") + ".py")
            assert path.is_file(), module
        if framework.visitor:
            module = framework.visitor.partition(":")[0]
            assert (ROOT / (module.replace(".", "/") + ".py")).is_file()
        assert re.fullmatch(r"[a-z_]+", framework.name)
