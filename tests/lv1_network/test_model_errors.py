"""Every executor gives the same Deep500 error class for the same bad model or bad
inputs: ModelError (a model that cannot be read, checked or run), ShapeError (tensors
that do not fit), UnsupportedError (what a framework lacks). Framework errors keep their
message, name the node, and are the Deep500 error's ``__cause__``."""
import importlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500 as d5
from deep500.networks import create_model
from deep500.utils.errors import Deep500Error, ModelError, ShapeError, UnsupportedError

EXECUTORS = {
    "reference": "deep500.frameworks.reference",
    "pytorch": "deep500.frameworks.pytorch",
    "tensorflow": "deep500.frameworks.tensorflow",
    "onnxruntime": "deep500.frameworks.onnxruntime",
}
TRAINING = ("reference", "pytorch", "tensorflow")


def from_onnx(name, model, **options):
    return importlib.import_module(EXECUTORS[name]).from_onnx(model, **options)


def small(w_shape=(3, 4), target=(2, 2, 2), opset=17, loss=False) -> onnx.ModelProto:
    """x[N, 3] → MatMul(w) → Reshape(target) → y: fits N = 2 only, which no input
    shape says, so other batches fail inside the framework. With ``loss``, also
    ReduceSum(y) → loss, a scalar."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
             helper.make_node("Reshape", ["h", "shape"], ["y"], name="reshape")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(target))]
    if loss:
        nodes.append(helper.make_node("ReduceSum", ["y"], ["loss"], name="sum", keepdims=0))
        outputs.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    initializers = [
        numpy_helper.from_array(np.linspace(-1, 1, int(np.prod(w_shape)), dtype=np.float32)
                                .reshape(w_shape), "w"),
        numpy_helper.from_array(np.array(target, np.int64), "shape")]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


GOOD = {"x": np.ones((2, 3), np.float32)}


# -- building from a bad model ------------------------------------------------------------
def _corrupt(tmp_path):
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(b"\x08\x07this is not protobuf\xff\xff\xff")
    return str(path), "corrupt.onnx"


def _truncated(tmp_path):
    path = tmp_path / "lenet.onnx"
    path.write_bytes(create_model("lenet", batch_size=2).SerializeToString()[:5000])
    return str(path), "lenet.onnx"


def _text(tmp_path):
    path = tmp_path / "model.txt"
    path.write_text("ir_version: 8\ngraph { name: 'g' }\n")
    return str(path), "model.txt"


def _missing(tmp_path):
    return str(tmp_path / "none.onnx"), "none.onnx"


def _dangling(tmp_path):
    model = small()
    model.graph.node[1].input[0] = "nowhere"
    return model, "nowhere"


def _inner_dims(tmp_path):
    return small(w_shape=(4, 4)), "matmul"   # x[N, 3] @ w[4, 4]: strict inference fails


def _future_opset(tmp_path):
    return small(opset=onnx.defs.onnx_opset_version() + 1), "opset"


def _short_initializer(tmp_path):
    model = small()
    model.graph.initializer[0].raw_data = model.graph.initializer[0].raw_data[:-4]
    return model, "tensor name: w"


BAD_MODELS = {"corrupt file": _corrupt, "truncated file": _truncated,
              "text file": _text, "missing file": _missing, "dangling input": _dangling,
              "incompatible matmul": _inner_dims, "future opset": _future_opset,
              "initializer data too short": _short_initializer}


@pytest.mark.parametrize("executor", list(EXECUTORS))
@pytest.mark.parametrize("bad", list(BAD_MODELS))
def test_bad_models_are_model_errors_naming_the_file_or_node(tmp_path, executor, bad):
    model, named = BAD_MODELS[bad](tmp_path)
    with pytest.raises(ModelError) as error:
        from_onnx(executor, model)
    assert named in str(error.value)


@pytest.mark.parametrize("executor", list(EXECUTORS))
def test_unknown_operator_is_unsupported_everywhere(executor):
    model = small()
    model.graph.node.append(helper.make_node("Frobnicate", ["y"], ["z"], name="frob",
                                             domain="my.ops"))
    model.opset_import.append(helper.make_opsetid("my.ops", 1))
    with pytest.raises(UnsupportedError, match="frob"):
        from_onnx(executor, model)


def test_parser_names_what_it_cannot_read(tmp_path):
    """Problems only an unchecked parse reaches: an initializer whose data does not fit
    its dims, an element type ONNX does not define, an attribute that is not UTF-8."""
    model = small()
    model.graph.initializer[0].raw_data = model.graph.initializer[0].raw_data[:-4]
    with pytest.raises(ModelError, match="initializer 'w'.*cannot be read"):
        d5.parser.load_and_parse_model(model, check=False)
    model = small()
    model.graph.input[0].type.tensor_type.elem_type = 99
    with pytest.raises(ModelError, match="tensor 'x'"):
        d5.parser.load_and_parse_model(model, check=False)
    model = small()
    model.graph.node[1].attribute.append(helper.make_attribute("allowzero", b"\xff\xfe"))
    with pytest.raises(ModelError, match="node 'reshape'"):
        d5.parser.load_and_parse_model(model, check=False)
    with pytest.raises(ModelError, match="file path or an onnx.ModelProto"):
        d5.parser.load_and_parse_model(42)


# -- running with bad inputs --------------------------------------------------------------
BAD_FEEDS = {
    "missing input": ({}, ModelError, "needs inputs \\['x'\\]"),
    "wrong shape": ({"x": np.ones((2, 4), np.float32)}, ShapeError, "should have shape"),
    "wrong rank": ({"x": np.ones((2, 3, 1), np.float32)}, ShapeError, "should have shape"),
    "wrong dtype": ({"x": np.ones((2, 3), np.float64)}, ShapeError, "should have dtype"),
    # passes the input check (N is free), fails inside the framework at the Reshape
    "batch the model cannot take": ({"x": np.ones((3, 3), np.float32)}, ShapeError,
                                    "'reshape'"),
}


@pytest.mark.parametrize("executor", list(EXECUTORS))
@pytest.mark.parametrize("bad", list(BAD_FEEDS))
def test_bad_inputs_give_the_same_error_class_everywhere(executor, bad):
    feeds, error_class, message = BAD_FEEDS[bad]
    runner = from_onnx(executor, small())
    with pytest.raises(error_class, match=message):
        runner.inference(feeds)
    # and the executor still works afterwards
    np.testing.assert_allclose(runner.inference(GOOD)["y"], _expected(), rtol=1e-6)


def _expected():
    w = numpy_helper.to_array(small().graph.initializer[0])
    return (GOOD["x"] @ w).reshape(2, 2, 2)


@pytest.mark.parametrize("executor", list(EXECUTORS))
def test_extra_inputs_are_ignored_everywhere(executor):
    runner = from_onnx(executor, small())
    outputs = runner.inference({**GOOD, "not_in_the_model": np.zeros(3, np.float32)})
    np.testing.assert_allclose(outputs["y"], _expected(), rtol=1e-6)


@pytest.mark.parametrize("executor", ["pytorch", "tensorflow"])
def test_framework_errors_keep_message_and_cause(executor):
    runner = from_onnx(executor, small())
    with pytest.raises(ShapeError) as error:
        runner.inference({"x": np.ones((3, 3), np.float32)})
    cause = error.value.__cause__
    assert cause is not None and not isinstance(cause, Deep500Error)
    assert type(cause).__name__ in str(error.value)
    assert "at node 'reshape' (Reshape)" in str(error.value)


@pytest.mark.parametrize("executor", TRAINING)
def test_backprop_gives_the_same_error_class(executor):
    runner = from_onnx(executor, small(loss=True))
    with pytest.raises(ShapeError, match="'reshape'"):
        runner.inference_and_backprop({"x": np.ones((3, 3), np.float32)}, y="loss")
    gradients = runner.inference_and_backprop(GOOD, y="loss")
    # d(sum(x @ w))/dw = column sums of x, repeated over w's columns
    np.testing.assert_allclose(gradients[d5.gradient_name("w")], np.full((3, 4), 2.0),
                               rtol=1e-6)


@pytest.mark.parametrize("executor", list(EXECUTORS))
@pytest.mark.parametrize("raised", [KeyboardInterrupt, MemoryError, SystemExit])
def test_interrupts_and_memory_errors_pass_unchanged(monkeypatch, executor, raised):
    runner = from_onnx(executor, small())

    def interrupted(*args):
        raise raised()
    monkeypatch.setattr(runner, "_inference", interrupted)
    with pytest.raises(raised):
        runner.inference(GOOD)


@pytest.mark.parametrize("executor", list(EXECUTORS))
def test_malformed_node_is_a_model_error_naming_it(executor):
    """A node the checker would refuse (MatMul with one input), parsed unchecked: each
    framework's failure (a TypeError in three, onnxruntime's InvalidGraph) is a
    ModelError that names the node and keeps the original as its cause."""
    model = small()
    del model.graph.node[0].input[1]
    parsed = d5.parser.load_and_parse_model(model, check=False)
    with pytest.raises(ModelError, match="matmul") as error:
        from_onnx(executor, parsed).inference(GOOD)
    assert error.value.__cause__ is not None


def test_validation_names_reference_outputs_the_network_lacks():
    runner = from_onnx("reference", small())
    with pytest.raises(ModelError, match="produced no \\['nothing'\\].*\\['y'\\]"):
        d5.test_executor_inference(runner, GOOD, {"nothing": np.zeros(3)},
                                   metrics=[d5.L2Error()])
