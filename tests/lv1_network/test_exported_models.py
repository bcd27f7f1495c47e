"""ONNX files written by PyTorch's exporters and tf2onnx load in Deep500 and reproduce
their source framework's outputs in onnxruntime."""
import importlib.util

import numpy as np
import pytest

from deep500.utils.onnx_interop import load_and_parse_model
from tests.lv1_network.exported_models import EXPORTERS


def _missing(packages) -> list[str]:
    return [p for p in packages if importlib.util.find_spec(p) is None]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """name → (path, inputs, expected), each exported once per test session."""
    folder = tmp_path_factory.mktemp("exported_models")
    cache = {}

    def get(name):
        missing = _missing(EXPORTERS[name][1])
        if missing:
            pytest.skip(f"{name} needs {missing}")
        if name not in cache:
            cache[name] = EXPORTERS[name][0](folder)
        return cache[name]
    return get


@pytest.mark.parametrize("name", sorted(EXPORTERS))
def test_exported_model_loads(exported, name):
    path, inputs, expected = exported(name)
    model = load_and_parse_model(path)
    assert [v.name for v in model.feed_inputs] == list(inputs)
    assert [v.name for v in model.outputs] == list(expected)
    for value in model.feed_inputs:
        assert value.dtype == np.float32
        assert value.shape[1:] == inputs[value.name].shape[1:]
        assert isinstance(value.shape[0], str), "the batch dimension is symbolic"
    assert model.operations and model.parameters


@pytest.mark.parametrize("name", sorted(EXPORTERS))
def test_onnxruntime_reproduces_source_framework(exported, name):
    ort = pytest.importorskip("onnxruntime")
    path, inputs, expected = exported(name)
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
