"""What the bridges' native operators share (deep500/frameworks/_bridge/native_ops.py): a
table of builders by ONNX name, and the options of a function of a framework's tensors
wrapped as a d5.CustomOp. The PyTorch and TensorFlow operators themselves are tested in
test_native_ops.py."""
import numpy as np
import pytest

import deep500 as d5
from deep500.frameworks._bridge.native_ops import NativeOperators, native_function_options


def test_builders_are_found_by_onnx_name():
    table = NativeOperators("NumPy")

    @table.builder("Softmax")
    def softmax(attributes):
        return ("softmax over", attributes.get("axis", -1))
    table.without_attributes({"Relu": "relu", "Abs": "abs"})
    assert table.names() == ["Abs", "Relu", "Softmax"]
    assert table.build("Softmax", {"axis": 1}) == ("softmax over", 1)
    assert table.build("Relu", {"ignored": 3}) == "relu"
    assert table.build("Abs", {}) == "abs"          # each entry keeps its own value


def test_an_operator_without_builder_names_the_framework_and_the_others():
    table = NativeOperators("NumPy")
    table.without_attributes({"Relu": "relu", "Abs": "abs"})
    with pytest.raises(d5.UnsupportedError,
                       match=r"^No NumPy native wrapper for 'Conv'; available: Abs, Relu$"):
        table.build("Conv", {})


def test_function_options_name_and_descriptors():
    x = d5.tensordesc("float32", [2, 3])

    def scaled(a):
        return 2 * a
    assert native_function_options(scaled, "arrays", None) == {
        "op_type": "scaled", "input_descriptors": None, "output_descriptors": None}
    options = native_function_options(np.add, "arrays", "plus", x, (x, x))
    assert options == {"op_type": "plus", "input_descriptors": [x],
                       "output_descriptors": [x, x]}


def test_a_callable_without_name_is_named_by_its_type():
    class Doubler:
        __name__ = None

        def __call__(self, a):
            return 2 * a
    assert native_function_options(Doubler(), "arrays", None)["op_type"] == "Doubler"


def test_what_is_not_a_function_is_refused_naming_the_tensors():
    with pytest.raises(d5.Deep500Error, match="custom_op_from_native takes a function of "
                                              "torch tensors, got str"):
        native_function_options("matmul", "torch tensors", None)
