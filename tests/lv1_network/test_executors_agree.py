"""All four executors agree with each other on the model zoo and on files exported by
PyTorch and tf2onnx: the same ONNX file, the same weights, the same inputs."""
import numpy as np
import onnx
import pytest

import deep500 as d5
from deep500.networks import create_model
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError
from tests.lv1_network import exported_models

EXECUTORS = {
    "reference": lambda: __import__("deep500.frameworks.reference", fromlist=["x"]),
    "pytorch": lambda: __import__("deep500.frameworks.pytorch", fromlist=["x"]),
    "tensorflow": lambda: __import__("deep500.frameworks.tensorflow", fromlist=["x"]),
    "onnxruntime": lambda: __import__("deep500.frameworks.onnxruntime", fromlist=["x"]),
}
TRAINING = ("reference", "pytorch", "tensorflow")
# float32 networks computed with different summation orders: relative L2 error bounds.
OUTPUT_RTOL = 1e-4
GRADIENT_RTOL = 1e-4

ZOO = {
    "mlp": dict(input_shape=(1, 8, 8)),
    "lenet": dict(),
    "resnet20": dict(),
    "resnet18": dict(input_shape=(3, 32, 32), classes=10),
    "wrn16_4": dict(input_shape=(3, 16, 16)),
}
BATCH = 4


def executor(name, model, **options):
    return EXECUTORS[name]().from_onnx(model, **options)


def inputs_for(model, seed=0, classes=10):
    from deep500.recipe.experiments.networks import make_inputs
    return make_inputs(model, BATCH, seed, classes)


def relative_l2(got, want):
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) /
                 max(np.linalg.norm(np.asarray(want, np.float64)), 1e-30))


@pytest.fixture(scope="module")
def zoo_models():
    return {name: create_model(name, batch_size=BATCH, **kwargs)
            for name, kwargs in ZOO.items()}


@pytest.fixture(scope="module")
def zoo_models_with_loss():
    return {name: create_model(name, batch_size=BATCH, loss="softmax_cross_entropy",
                               **kwargs) for name, kwargs in ZOO.items()}


@pytest.mark.parametrize("model_name", list(ZOO))
def test_inference_agrees_on_the_zoo(zoo_models, model_name):
    model = zoo_models[model_name]
    inputs = inputs_for(model)
    reference = executor("reference", model).inference(inputs)
    for name in ("pytorch", "tensorflow", "onnxruntime"):
        result = d5.test_executor_inference(executor(name, model), inputs, reference,
                                            metrics=[d5.L2Error(), d5.MaxError()])
        assert result["L2Error"].summary["relative"] <= OUTPUT_RTOL, (name, result)


@pytest.mark.parametrize("model_name", list(ZOO))
def test_backprop_agrees_on_the_zoo(zoo_models_with_loss, model_name):
    model = zoo_models_with_loss[model_name]
    inputs = inputs_for(model)
    ref = executor("reference", model)
    expected = ref.inference_and_backprop(inputs, "loss")
    params = ref.network.get_params()
    assert params and not any("running" in p or "_mean" in p for p in params)
    for name in ("pytorch", "tensorflow"):
        other = executor(name, model)
        assert sorted(other.network.get_params()) == sorted(params), name
        got = other.inference_and_backprop(inputs, "loss")
        assert relative_l2(got["loss"], expected["loss"]) <= OUTPUT_RTOL
        for param in params:
            grad = d5.gradient_name(param)
            assert relative_l2(got[grad], expected[grad]) <= GRADIENT_RTOL, (name, param)


@pytest.mark.parametrize("file_name", list(exported_models.EXPORTERS))
@pytest.mark.parametrize("executor_name", list(EXECUTORS))
def test_executors_run_exported_files(exported_files, file_name, executor_name):
    path, inputs, expected = exported_files(file_name)
    outputs = executor(executor_name, str(path)).inference(inputs)
    for name, value in expected.items():
        assert relative_l2(outputs[name], value) <= OUTPUT_RTOL, (executor_name, name)


@pytest.mark.parametrize("executor_name", list(EXECUTORS))
def test_bad_models_and_inputs_give_clear_errors(tmp_path, executor_name, zoo_models):
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"not an onnx file at all \x00\xff")
    with pytest.raises(Deep500Error, match="not a valid ONNX file"):
        executor(executor_name, str(corrupt))

    model = onnx.ModelProto()
    model.CopyFrom(zoo_models["mlp"])
    node = onnx.helper.make_node("Frobnicate", ["output"], ["weird"], name="frob",
                                 domain="my.ops")
    model.graph.node.append(node)
    model.opset_import.append(onnx.helper.make_opsetid("my.ops", 1))
    with pytest.raises(UnsupportedError, match="Frobnicate"):
        executor(executor_name, model)

    lenet = executor(executor_name, zoo_models["lenet"])
    with pytest.raises(Deep500Error, match="needs inputs \\['input'\\]"):
        lenet.inference({})
    with pytest.raises(ShapeError, match="should have shape"):
        lenet.inference({"input": np.zeros((BATCH, 1, 27, 28), np.float32)})


@pytest.mark.parametrize("executor_name", list(EXECUTORS))
def test_inputs_are_still_checked_after_a_good_run(executor_name, zoo_models):
    """Inputs with the last accepted signature skip the full check; anything else must
    still get it, on every run."""
    lenet = executor(executor_name, zoo_models["lenet"])
    good = np.zeros((BATCH, 1, 28, 28), np.float32)
    lenet.inference({"input": good})
    lenet.inference({"input": good + 1})     # same signature: accepted again
    with pytest.raises(ShapeError, match="should have shape"):
        lenet.inference({"input": np.zeros((BATCH, 1, 27, 28), np.float32)})
    with pytest.raises(ShapeError, match="should have dtype"):
        lenet.inference({"input": good.astype(np.float64)})
    with pytest.raises(Deep500Error, match="needs inputs \\['input'\\]"):
        lenet.inference({"other": good})
    with pytest.raises(Deep500Error, match="needs inputs \\['input'\\]"):
        lenet.inference({})
    with pytest.raises(ShapeError, match="should have dtype"):
        lenet.inference({"input": good.tolist()})     # not an array: checked in full
