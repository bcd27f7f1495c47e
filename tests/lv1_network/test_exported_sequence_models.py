"""Transformer, recurrent and up-sampling models exported fresh by ``torch.onnx.export``
(the TorchScript exporter at opset 17 and ``dynamo=True``) and by tf2onnx run on every
executor (issue 19, "Checked by").

Each file must reproduce its source framework's own forward pass, the executors must
agree with each other, and with a loss attached the reference and PyTorch executors
must compute the same gradients. Exporter failures skip the combination (with the
exporter's error); Deep500 failures fail the test, or are marked ``xfail(strict=True)``
in :data:`KNOWN_FAILURES` with the operator, node and message.
"""
import importlib.util

import numpy as np
import onnx
import pytest

import deep500 as d5
from deep500.utils.onnx_interop.losses import add_loss
from tests.lv1_network.exported_models import SEQUENCE_EXPORTERS

EXECUTORS = ("reference", "pytorch", "tensorflow", "onnxruntime")
# float32 forward passes of a few hundred operations, summed in different orders: the
# elementwise bound is rtol plus an atol proportional to the output's magnitude.
RTOL = 1e-4
ATOL_PER_MAGNITUDE = 2e-5
# Relative L2 of gradients between two float32 backward passes (issue 19).
GRADIENT_RTOL = 1e-4
# A gradient that is zero in exact arithmetic (the bias of a convolution followed by
# instance normalisation) is float32 round-off in both executors: below this fraction
# of the norm of all the gradients, both must merely vanish.
VANISHING = 1e-6
# The dynamo exporter and tf2onnx take a few seconds per file.
SLOW = {name for name in SEQUENCE_EXPORTERS if name.endswith("_dynamo")}

KNOWN_FAILURES: dict[tuple[str, str], tuple[type, str]] = {}
"""(file name, executor) → (exception type, reason) of Deep500 failures found by these
tests: each combination is ``xfail(strict=True)``, so the mark fails once fixed."""
KNOWN_BACKPROP_FAILURES: dict[str, tuple[type, str]] = {}
"""file name → (exception type, reason) for the reference-vs-PyTorch gradient test."""


def _executor(name, model):
    return importlib.import_module(f"deep500.frameworks.{name}").from_onnx(model)


def _missing(packages) -> list[str]:
    return [p for p in packages if importlib.util.find_spec(p) is None]


def _params(names, executors, known):
    """pytest params for every (name, executor), slow and xfail marks attached."""
    cases = []
    for name in names:
        for executor in executors:
            key = (name, executor) if executor is not None else name
            marks = [pytest.mark.slow] if name in SLOW else []
            if key in known:
                raises, reason = known[key]
                marks.append(pytest.mark.xfail(strict=True, raises=raises, reason=reason))
            args = (name, executor) if executor is not None else (name,)
            cases.append(pytest.param(*args, marks=marks,
                                      id="-".join(a for a in args)))
    return cases


@pytest.fixture(scope="session")
def exported_sequence(tmp_path_factory):
    """name → (path, inputs, expected), each exported at most once per session."""
    folder = tmp_path_factory.mktemp("exported_sequence_models")
    cache = {}

    def get(name):
        helper, packages = SEQUENCE_EXPORTERS[name]
        missing = _missing(packages)
        if missing:
            pytest.skip(f"{name} needs {missing}")
        if name not in cache:
            try:
                cache[name] = helper(folder)
            except Exception as error:  # the exporter's bug, not Deep500's
                cache[name] = error
        if isinstance(cache[name], Exception):
            error = cache[name]
            pytest.skip(f"exporter failed on {name}: {type(error).__name__}: {error}"[:500])
        return cache[name]
    return get


def _assert_close(got, want, what):
    want = np.asarray(want)
    atol = ATOL_PER_MAGNITUDE * max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=atol, err_msg=what)


def _relative_l2(got, want):
    want = np.asarray(want, np.float64)
    return float(np.linalg.norm(np.asarray(got, np.float64) - want) /
                 max(np.linalg.norm(want), 1e-30))


@pytest.mark.parametrize("name,executor", _params(SEQUENCE_EXPORTERS, EXECUTORS,
                                                  KNOWN_FAILURES))
def test_executor_reproduces_source_framework(exported_sequence, name, executor):
    path, inputs, expected = exported_sequence(name)
    outputs = _executor(executor, str(path)).inference(inputs)
    for key, value in expected.items():
        assert outputs[key].shape == value.shape, (name, executor, key)
        _assert_close(outputs[key], value, f"{executor} on {name}, output {key}")


@pytest.mark.parametrize("name,executor", _params(SEQUENCE_EXPORTERS, EXECUTORS[:3],
                                                  KNOWN_FAILURES))
def test_executors_agree_with_onnxruntime(exported_sequence, name, executor):
    """The same file on another batch (twice the size, other values): each executor
    against onnxruntime, not only against the source framework's one batch."""
    path, inputs, expected = exported_sequence(name)
    rng = np.random.default_rng(7)
    batch = {}
    for key, value in inputs.items():
        if value.dtype.kind == "i":   # token ids: a permutation keeps them valid
            batch[key] = np.concatenate([value, value[:, rng.permutation(value.shape[1])]])
        else:
            batch[key] = np.concatenate([value, rng.standard_normal(value.shape)
                                         .astype(value.dtype)])
    want = _executor("onnxruntime", str(path)).inference(batch)
    got = _executor(executor, str(path)).inference(batch)
    for key in expected:
        _assert_close(got[key], want[key], f"{executor} vs onnxruntime on {name}, {key}")


def _frozen_scalars(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its one-element floating initializers frozen (``deep500.frozen``,
    what a recipe's ``network.frozen`` writes). In these files every one of them is a
    constant the exporter stored as an initializer (a normalisation's epsilon, an
    attention mask's fill value, 1/sqrt(2) of GELU, a loop's bounds), never a weight.
    The gradient of such a scalar is a sum over a whole activation, often with heavy
    cancellation, so comparing it at the weights' tolerance measures summation order,
    not the executors (a CI run gave 1.17e-4 for a LayerNorm epsilon of keras_attention
    against the 1e-4 that every weight meets)."""
    import json
    import re
    from onnx import helper
    from deep500.utils.onnx_interop.parser import FROZEN_METADATA
    floating = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16,
                onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
    names = [i.name for i in model.graph.initializer
             if i.data_type in floating and int(np.prod(i.dims)) == 1]
    if names:
        helper.set_model_props(model, {FROZEN_METADATA: json.dumps(
            [re.escape(name) for name in names])})
    return model


def _with_loss(path, inputs, expected):
    """The file with a loss on its output (its scalar exporter constants frozen), and
    the feed including the labels: softmax cross-entropy for (N, classes) scores, mean
    squared error otherwise."""
    model = _frozen_scalars(onnx.load(str(path)))
    (output, value), = expected.items()
    rng = np.random.default_rng(3)
    if value.ndim == 2:
        labels = rng.integers(0, value.shape[1], size=value.shape[0]).astype(np.int64)
        model = add_loss(model, "softmax_cross_entropy", output=output)
    else:
        labels = rng.standard_normal(value.shape).astype(np.float32)
        model = add_loss(model, "mean_squared_error", output=output)
    return model, {**inputs, "labels": labels}


@pytest.mark.parametrize("name", _params(SEQUENCE_EXPORTERS, [None],
                                         KNOWN_BACKPROP_FAILURES))
def test_reference_and_pytorch_gradients_agree(exported_sequence, name):
    model, feed = _with_loss(*exported_sequence(name))
    reference = _executor("reference", model)
    params = sorted(reference.network.get_params())
    assert params, f"{name} has no trainable parameters"
    assert all(np.size(reference.network.fetch_tensors([p])[0]) != 1 for p in params), name
    want = reference.inference_and_backprop(feed, "loss")
    other = _executor("pytorch", model)
    assert sorted(other.network.get_params()) == params
    got = other.inference_and_backprop(feed, "loss")
    assert _relative_l2(got["loss"], want["loss"]) <= GRADIENT_RTOL, name
    grads = [d5.gradient_name(param) for param in params]
    total = np.sqrt(sum(np.sum(np.square(want[g], dtype=np.float64)) for g in grads))
    assert total > 0, f"all gradients of {name} vanish"
    for param, grad in zip(params, grads):
        if np.linalg.norm(want[grad]) <= VANISHING * total:
            assert np.linalg.norm(got[grad]) <= VANISHING * total, (name, param)
        else:
            assert _relative_l2(got[grad], want[grad]) <= GRADIENT_RTOL, (name, param)
