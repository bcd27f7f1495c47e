"""A CustomOp checks what it is given and what its forward returned against its
descriptors (deep500/lv0_operators/custom_op.py): count first, then each tensor's shape
and dtype, naming the operator, the kind and the index."""
import numpy as np
import pytest

import deep500 as d5

F32 = d5.tensordesc("float32", [2, 3])
I64 = d5.tensordesc("int64", [2])


def op(inputs=(F32, I64), outputs=(F32,)):
    return d5.CustomPythonOp(lambda x, k: x, None, list(inputs), list(outputs), name="pick")


def test_matching_inputs_and_outputs_pass():
    x, k = np.zeros((2, 3), np.float32), np.zeros(2, np.int64)
    op().check_inputs([x, k])
    op().check_outputs([x])
    assert op()(x, k) is x


@pytest.mark.parametrize("check,values,message", [
    ("check_inputs", [np.zeros((2, 3), np.float32)],
     r"^python:pick: expected 2 inputs, got 1$"),
    ("check_inputs", [np.zeros((2, 3), np.float32), np.zeros(3, np.int64)],
     r"python:pick input 1"),
    ("check_outputs", [], r"^python:pick.forward: expected 1 outputs, got 0$"),
    ("check_outputs", [np.zeros((2, 3), np.float64)], r"python:pick.forward output 0"),
])
def test_a_mismatch_names_the_operator_kind_and_index(check, values, message):
    with pytest.raises(d5.ShapeError, match=message):
        getattr(op(), check)(values)


def test_without_descriptors_anything_goes():
    free = d5.CustomPythonOp(lambda x: x)
    free.check_inputs([1, "two"])
    free.check_outputs([])
