"""Framework bridges: ``reference`` (NumPy), ``pytorch``, ``tensorflow``,
``onnxruntime``. :mod:`deep500.frameworks.registry` names them and says what each can
do; ask it rather than naming frameworks by hand."""
from deep500.frameworks import registry
from deep500.lv0_operators import nativeop_validation as _nativeop_validation


def _reference_operator(op_type: str):
    return registry.get("reference").native_operator_factory()(op_type)


# Level 0 validates framework operators against reference operators named by the user;
# it learns where they come from here (dependency injection: it imports no framework).
_nativeop_validation.set_reference_factory(_reference_operator)

__all__ = ["registry"]
