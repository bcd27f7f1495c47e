"""The table of which module implements each reference operator agrees with what the
``op_*.py`` modules register, and operators are imported only when asked for."""
import importlib
import pkgutil
import subprocess
import sys


import deep500.frameworks.reference.operators as operators
from deep500.frameworks.reference.operators import registry
from deep500.frameworks.reference.operators.operator_modules import OPERATOR_MODULES


def _op_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(operators.__path__)
                  if m.name.startswith("op_"))


def test_every_op_module_registers_exactly_its_table_rows():
    for name in _op_modules():
        importlib.import_module(f"{operators.__name__}.{name}")
    registered = {op_type: (cls.__module__.rpartition(".")[2], cls.domain)
                  for op_type, cls in registry._OPERATORS.items()
                  if cls.__module__.startswith(operators.__name__ + ".op_")}
    missing = {k: v for k, v in registered.items() if OPERATOR_MODULES.get(k) != v}
    assert not missing, f"add or correct these rows in operator_modules.py: {missing}"
    assert set(OPERATOR_MODULES) == set(registered), \
        f"rows of no registered operator: {sorted(set(OPERATOR_MODULES) - set(registered))}"
    assert sorted({module for module, _ in OPERATOR_MODULES.values()}) == _op_modules()


def test_names_and_keys_match_the_loaded_classes():
    assert registry.operator_names() == sorted(OPERATOR_MODULES)
    keys = registry.operator_keys()
    for domain, op_type in keys:
        assert registry.get_operator_class(op_type).domain == domain
    assert len(keys) == len(OPERATOR_MODULES)


def test_operators_load_when_asked_and_a_listed_name_stays_reserved():
    code = """
import sys
import deep500.frameworks.reference as d5ref
loaded = lambda: sorted(m for m in sys.modules if '.operators.op_' in m)
print(loaded())
try:
    @d5ref.register("Gemm")
    class NotGemm(d5ref.ReferenceOp):
        pass
except RuntimeError as error:
    print(error)
d5ref.create_operator("Relu")
print(loaded())
print(d5ref.get_operator_class("Gemm").__module__)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == ["[]", "Reference operator Gemm registered twice",
                   "['deep500.frameworks.reference.operators.op_relu']",
                   "deep500.frameworks.reference.operators.op_gemm"]
