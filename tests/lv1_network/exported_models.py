"""Real ONNX files made by other frameworks' exporters, for executor tests.

Each helper builds a small seeded model in its source framework, writes it as ONNX into
``folder`` and returns ``(path, inputs, expected)``: ``inputs`` maps the ONNX input names
to an example batch (NumPy), ``expected`` maps the ONNX output names to what the source
framework computed for that batch. The batch dimension of every file is symbolic.

* ``torch_cnn``/``torch_mlp``: ``torch.onnx.export`` with ``dynamo=False`` (the
  TorchScript exporter) or ``dynamo=True`` (the ``torch.export``-based exporter, which
  needs the ``onnxscript`` package). Models are in eval mode, so the exporters fold
  batch normalisation into the convolution.
* ``keras_cnn``/``keras_mlp``: Keras 3 models converted by ``tf2onnx``. Keras models are
  channels-last, so the CNN's input is (N, H, W, C). tf2onnx 1.17's ``from_keras`` fails
  on Keras 3 models (it looks up Keras 3 tensor names such as ``keras_tensor_4`` in the
  traced graph and raises KeyError), so the model is wrapped in a ``tf.function`` and
  converted with ``from_function``; its output is then named by TensorFlow
  (``Identity:0``).

Frameworks are imported inside the helpers so that importing this module is cheap;
:data:`EXPORTERS` names every helper with the package it needs.
"""
from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import pathlib
import warnings

import numpy as np

IMAGE = (1, 8, 8)       # C, H, W of the CNN inputs
FEATURES = 64           # MLP input features
CLASSES = 10
BATCH = 3


def _example(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((BATCH, *shape)).astype(np.float32)


# -- PyTorch ---------------------------------------------------------------------------
def _torch_cnn_module():
    import torch
    bn = torch.nn.BatchNorm2d(4)
    with torch.no_grad():  # running statistics that are not the identity
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return torch.nn.Sequential(
        torch.nn.Conv2d(IMAGE[0], 4, 3, padding=1), bn, torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AvgPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(8 * (IMAGE[1] // 4) * (IMAGE[2] // 4), CLASSES))


def _torch_mlp_module():
    import torch
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, CLASSES))


def _torch_export(make_module, shape, folder, name: str, dynamo: bool, seed: int):
    import torch
    torch.manual_seed(seed)
    module = make_module().eval()
    x = _example(shape, seed)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    path = pathlib.Path(folder) / f"{name}.onnx"
    options = dict(input_names=["input"], output_names=["output"], dynamo=dynamo)
    if dynamo:
        options.update(dynamic_shapes=({0: torch.export.Dim("N")},), external_data=False,
                       verbose=False)
    else:
        options.update(dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    # The exporters report progress, deprecations and missing torchvision kernels; the
    # tests only need the file.
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (torch.from_numpy(x),), str(path), **options)
    finally:
        logger.setLevel(level)
    return path, {"input": x}, {"output": expected}


def torch_cnn(folder, dynamo: bool = False, seed: int = 0):
    """Conv → BatchNorm → ReLU → MaxPool → Conv → ReLU → AvgPool → Flatten → Linear on
    (N, 1, 8, 8), exported by PyTorch."""
    name = f"torch_cnn_{'dynamo' if dynamo else 'torchscript'}"
    return _torch_export(_torch_cnn_module, IMAGE, folder, name, dynamo, seed)


def torch_mlp(folder, dynamo: bool = False, seed: int = 0):
    """Linear → Tanh → Linear → ReLU → Linear on (N, 64), exported by PyTorch."""
    name = f"torch_mlp_{'dynamo' if dynamo else 'torchscript'}"
    return _torch_export(_torch_mlp_module, (FEATURES,), folder, name, dynamo, seed)


# -- Keras / TensorFlow ----------------------------------------------------------------
def _keras_convert(make_layers, shape, folder, name: str, seed: int):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf
    import tf2onnx
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input(shape), *make_layers(keras)])
    x = _example(shape, seed)
    expected = model(x).numpy()
    path = pathlib.Path(folder) / f"{name}.onnx"
    signature = [tf.TensorSpec((None, *shape), tf.float32, name="input")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proto, _ = tf2onnx.convert.from_function(tf.function(model), signature,
                                                 opset=17, output_path=str(path))
    return path, {"input": x}, {proto.graph.output[0].name: expected}


def _dense(keras, units, activation=None):
    # A random bias, so that the converter cannot drop a zero addition.
    return keras.layers.Dense(units, activation=activation,
                              bias_initializer=keras.initializers.RandomUniform(-0.5, 0.5))


def keras_cnn(folder, seed: int = 0):
    """Conv2D → MaxPool → Conv2D → AveragePool → Flatten → Dense on channels-last
    (N, 8, 8, 1), converted by tf2onnx."""
    def layers(keras):
        return [keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
                keras.layers.MaxPooling2D(2),
                keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
                keras.layers.AveragePooling2D(2), keras.layers.Flatten(),
                _dense(keras, CLASSES)]
    shape = (IMAGE[1], IMAGE[2], IMAGE[0])
    return _keras_convert(layers, shape, folder, "keras_cnn", seed)


def keras_mlp(folder, seed: int = 0):
    """Dense(32, tanh) → Dense(16, relu) → Dense(10) on (N, 64), converted by tf2onnx."""
    def layers(keras):
        return [_dense(keras, 32, "tanh"), _dense(keras, 16, "relu"), _dense(keras, CLASSES)]
    return _keras_convert(layers, (FEATURES,), folder, "keras_mlp", seed)


EXPORTERS = {
    "torch_cnn_torchscript": (functools.partial(torch_cnn, dynamo=False), ("torch",)),
    "torch_mlp_torchscript": (functools.partial(torch_mlp, dynamo=False), ("torch",)),
    "torch_cnn_dynamo": (functools.partial(torch_cnn, dynamo=True), ("torch", "onnxscript")),
    "torch_mlp_dynamo": (functools.partial(torch_mlp, dynamo=True), ("torch", "onnxscript")),
    "keras_cnn": (keras_cnn, ("tensorflow", "keras", "tf2onnx")),
    "keras_mlp": (keras_mlp, ("tensorflow", "keras", "tf2onnx")),
}
"""File name → (helper(folder) -> (path, inputs, expected), packages it imports)."""


def export_all(folder, names=None) -> dict:
    """Run the helpers ``names`` (default: all of :data:`EXPORTERS`) into ``folder``."""
    return {name: EXPORTERS[name][0](folder) for name in (names or EXPORTERS)}
