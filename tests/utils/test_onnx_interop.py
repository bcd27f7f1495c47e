"""The ONNX intermediate representation: schema-derived classes, parser, visitor."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500 as d5
from deep500.utils.errors import Deep500Error, UnsupportedError
from deep500.utils.onnx_interop import (ModelError, OnnxBaseVisitor, load_and_parse_model,
                                        operator_class, operators)


def small_model(opset=17, extra_nodes=(), domain_opsets=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    steps = numpy_helper.from_array(np.array([1], np.int64), "steps")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], name="sm", axis=1), *extra_nodes]
    graph = helper.make_graph(nodes, "small", [x], [y], [w, steps])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v)
                                                 for d, v in domain_opsets]
    return helper.make_model(graph, opset_imports=opsets)


def test_classes_come_from_the_schema_at_the_model_opset():
    assert operator_class("Softmax", 11).since_version == 11
    assert operator_class("Softmax", 13).since_version == 13
    assert operator_class("Softmax", 11).attribute_defaults["axis"] == 1
    assert operator_class("Softmax", 13).attribute_defaults["axis"] == -1
    conv = operators.Conv
    assert conv.attribute_defaults["auto_pad"] == "NOTSET"
    assert conv.attribute_defaults["group"] == 1
    assert [name for name, _ in conv.input_specs] == ["X", "W", "B"]
    assert dict(conv.input_specs)["B"] == "optional"
    assert operators.Concat.attribute_defaults["axis"] is not None  # required marker
    with pytest.raises(UnsupportedError, match="no operator 'Frobnicate'"):
        operator_class("Frobnicate")


def test_named_inputs_outputs_and_attribute_defaults():
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    op = operator_class("Conv", 17).from_node(node, "c1")
    assert (op.i_X, op.i_W, op.i_B, op.o_Y) == ("x", "w", None, "y")
    assert op.attributes["pads"] == [1, 1, 1, 1] and op.attributes["group"] == 1
    concat = operators.Concat.from_node(helper.make_node("Concat", ["a", "b"], ["c"],
                                                         axis=0), "cat")
    assert concat.i_inputs == ["a", "b"]
    with pytest.raises(AttributeError, match="no formal parameter 'Q'"):
        _ = op.i_Q
    with pytest.raises(UnsupportedError, match="lacks required attributes \\['axis'\\]"):
        operators.Concat.from_node(helper.make_node("Concat", ["a"], ["c"]), "bad")


def test_parse_model_runs_checker_and_shape_inference(tmp_path):
    path = tmp_path / "small.onnx"
    onnx.save(small_model(), str(path))
    model = d5.parser.load_and_parse_model(str(path))
    assert model.opset == 17 and model.name == "small"
    assert [op.op_type for op in model.operations] == ["MatMul", "Relu", "Softmax"]
    assert model.operations[1].name == "Relu_1"  # generated for an unnamed node
    assert model.value_info["h"].shape == ("N", 3)  # from shape inference
    assert [v.name for v in model.feed_inputs] == ["x"]
    assert model.parameters == ["w"]  # floating initializers only
    np.testing.assert_array_equal(model.initializers["w"],
                                  np.arange(12, dtype=np.float32).reshape(4, 3))
    assert model.operation("sm").attributes["axis"] == 1


def test_corrupt_and_missing_files_give_clear_errors(tmp_path):
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07this is not protobuf\xff\xff\xff")
    with pytest.raises(ModelError, match="is not a valid ONNX file"):
        load_and_parse_model(str(corrupt))
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(small_model().SerializeToString()[:-7])
    with pytest.raises(Deep500Error, match="truncated.onnx"):
        load_and_parse_model(str(truncated))
    with pytest.raises(ModelError, match="does not exist"):
        load_and_parse_model(str(tmp_path / "none.onnx"))


def test_invalid_graph_fails_the_checker():
    model = small_model()
    model.graph.node[1].input[0] = "nowhere"
    with pytest.raises(ModelError, match="fails the ONNX checker"):
        load_and_parse_model(model)


def test_unknown_operator_names_node_and_model():
    model = small_model(extra_nodes=[helper.make_node("Frobnicate", ["y"], ["z"],
                                                      name="frob", domain="my.ops")],
                        domain_opsets=[("my.ops", 1)])
    with pytest.raises(UnsupportedError) as error:
        load_and_parse_model(model, check=False)
    assert "frob" in str(error.value) and "Frobnicate" in str(error.value)


def test_visitor_calls_hooks_in_order_and_names_missing_operator():
    calls = []

    class Recorder(OnnxBaseVisitor):
        framework = "the recorder"

        def visit_graph(self, model, network):
            calls.append("graph")

        def visit_initializer(self, name, value, network):
            calls.append(f"init:{name}")

        def visit_input(self, value_info, network):
            calls.append(f"input:{value_info.name}")

        def visit_matmul(self, op, network):
            calls.append(f"op:{op.name}")

        def visit_relu(self, op, network):
            calls.append(f"op:{op.name}")

        def visit_output(self, value_info, network):
            calls.append(f"output:{value_info.name}")

    model = load_and_parse_model(small_model())
    with pytest.raises(UnsupportedError) as error:
        Recorder().visit_model(model, None)
    assert calls == ["graph", "init:w", "init:steps", "input:x", "op:mm", "op:Relu_1"]
    message = str(error.value)
    assert "the recorder does not support operator Softmax" in message
    assert "node 'sm'" in message and "model 'small'" in message
    Recorder.visit_softmax = lambda self, op, network: calls.append("op:sm")
    calls.clear()
    Recorder().visit_model(model, None)
    assert calls[-2:] == ["op:sm", "output:y"]
