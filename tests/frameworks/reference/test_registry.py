"""The registry of reference operators."""
import pytest

import deep500.frameworks.reference as d5ref
from deep500.utils.errors import Deep500Error, UnsupportedError


def test_create_operator_with_attributes():
    op = d5ref.create_operator("Gemm", transA=1)
    assert op.op_type == "Gemm"
    assert op.attributes == {"alpha": 1.0, "beta": 1.0, "transA": 1, "transB": 0}
    assert isinstance(op, d5ref.ReferenceOp)
    assert op.conditions()["attributes"]["transA"] == 1


def test_get_operator_class():
    assert d5ref.get_operator_class("MatMul").op_type == "MatMul"
    assert {"Gemm", "MatMul", "Relu", "Flatten", "Reshape", "Transpose", "Concat", "Split",
            "ReduceMean", "ReduceSum"} <= set(d5ref.operator_names())


def test_unknown_operator_suggests_close_names():
    with pytest.raises(UnsupportedError, match="Did you mean") as info:
        d5ref.create_operator("Gem")
    assert "Gemm" in str(info.value)
    assert isinstance(info.value, Deep500Error)


def test_unknown_operator_without_close_names():
    with pytest.raises(UnsupportedError) as info:
        d5ref.create_operator("CompletelyUnknownThing")
    assert "Did you mean" not in str(info.value)


def test_unknown_attribute():
    with pytest.raises(Deep500Error, match="transC") as info:
        d5ref.create_operator("Gemm", transC=1)
    assert "Gemm" in str(info.value) and "transA" in str(info.value)


def test_defaults_do_not_leak_between_instances():
    first = d5ref.create_operator("Gemm", alpha=2.0)
    second = d5ref.create_operator("Gemm")
    assert first.attr("alpha") == 2.0 and second.attr("alpha") == 1.0
    first.attributes["alpha"] = 5.0   # a copy: changing it changes nothing
    assert first.attr("alpha") == 2.0
