"""ONNX files written by PyTorch's exporters and tf2onnx load in Deep500 and reproduce
their source framework's outputs in onnxruntime."""
import numpy as np
import pytest

from deep500.utils.onnx_interop import load_and_parse_model
from tests.lv1_network.exported_models import EXPORTERS


@pytest.mark.parametrize("name", sorted(EXPORTERS))
def test_exported_model_loads(exported_files, name):
    path, inputs, expected = exported_files(name)
    model = load_and_parse_model(path)
    assert [v.name for v in model.feed_inputs] == list(inputs)
    assert [v.name for v in model.outputs] == list(expected)
    for value in model.feed_inputs:
        assert value.dtype == np.float32
        assert value.shape[1:] == inputs[value.name].shape[1:]
        assert isinstance(value.shape[0], str), "the batch dimension is symbolic"
    assert model.operations and model.parameters


@pytest.mark.parametrize("name", sorted(EXPORTERS))
def test_onnxruntime_reproduces_source_framework(exported_files, name):
    ort = pytest.importorskip("onnxruntime")
    path, inputs, expected = exported_files(name)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    outputs = dict(zip(names, session.run(None, inputs)))
    for key, value in expected.items():
        np.testing.assert_allclose(outputs[key], value, rtol=1e-4, atol=1e-4)
    # A different batch size works too: the batch dimension is symbolic.
    doubled = {k: np.concatenate([v, v]) for k, v in inputs.items()}
    again = dict(zip(names, session.run(None, doubled)))
    for key, value in expected.items():
        np.testing.assert_allclose(again[key], np.concatenate([value, value]),
                                   rtol=1e-4, atol=1e-4)
