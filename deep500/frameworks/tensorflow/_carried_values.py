"""The values of a model that TensorFlow carries in a wider type
(``ops/_carried_casts.py``): fed and stored ones (``carried_types.carry``) and those that
nodes produce (Cast, CastLike or QuantizeLinear to such a type), which the visitor rounds
to the declared type and returns in its carrier."""
from __future__ import annotations

import dataclasses

from deep500.frameworks.tensorflow.ops._carried_casts import CARRIED
from deep500.utils.onnx_interop.carried_types import CarriedModel, carry

FRAMEWORK = "The TensorFlow executor"


def carry_values(model) -> tuple[CarriedModel, dict]:
    """``model`` with every value of a carried type declared in its carrier, and
    ``{name: declared dtype}`` of those values (the visitor reads the declared types of
    CastLike's and QuantizeLinear's type-giving inputs; outputs are restored to them)."""
    carried = carry(model, CARRIED, FRAMEWORK)
    values = list(model.inputs) + list(model.outputs) + list(model.value_info.values())
    declared = {vi.name: vi.dtype for vi in values if vi.dtype in CARRIED}
    declared.update({name: value.dtype for name, value in model.initializers.items()
                     if value.dtype in CARRIED})
    if not declared:
        return carried, declared

    def in_carrier(vi):
        return dataclasses.replace(vi, dtype=CARRIED[vi.dtype]) if vi.dtype in CARRIED else vi
    rewritten = dataclasses.replace(
        carried.model, outputs=[in_carrier(vi) for vi in carried.model.outputs],
        value_info={name: in_carrier(vi) for name, vi in carried.model.value_info.items()})
    outputs = {vi.name: declared[vi.name] for vi in model.outputs if vi.name in declared}
    return CarriedModel(rewritten, carried.inputs, outputs), declared
