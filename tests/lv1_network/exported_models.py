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
* ``torch_sequence``/``keras_sequence`` (:data:`SEQUENCE_EXPORTERS`, issue 19): a
  transformer encoder classifier with a padding mask, a decoder-only LM with a causal
  mask, LSTM and GRU classifiers and an up-sampling CNN (ConvTranspose, bilinear
  resize, instance and group normalisation), from PyTorch (both exporters) and Keras.

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


def _quiet_export(module, x, path, options) -> None:
    """``torch.onnx.export`` of ``module`` on ``x`` to ``path``. The exporters report
    progress, deprecations and missing torchvision kernels; the tests only need the
    file."""
    import torch
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (torch.from_numpy(x),), str(path), **options)
    finally:
        logger.setLevel(level)


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
    _quiet_export(module, x, path, options)
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


# -- Sequence models and the newer CNN layers (issue 19) -------------------------------
# Token sequences: (N, SEQUENCE) int64 ids in [1, VOCAB); id PAD marks padding, which the
# encoder classifier masks. Keras sequence models take float (N, SEQUENCE, WIDTH) inputs.
VOCAB = 16
SEQUENCE = 6
WIDTH = 8               # model width (embedding size, features per step)
HEADS = 2
PAD = 0
UPSAMPLE_IMAGE = (2, 6, 6)   # C, H, W of the up-sampling CNN input


def _tokens(seed: int, padded: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, VOCAB, size=(BATCH, SEQUENCE), dtype=np.int64)
    if padded:  # row i has i padding positions at its end; every row keeps a token
        for row in range(BATCH):
            if row:
                tokens[row, SEQUENCE - row:] = PAD
    return tokens


def _torch_modules():
    """The issue-19 PyTorch modules, defined on first use so that torch is imported
    only then."""
    import torch
    from torch import nn
    import torch.nn.functional as F

    class EncoderClassifier(nn.Module):
        """Embedding → TransformerEncoderLayer (GELU, padding mask) → masked mean →
        Linear."""
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, WIDTH)
            self.layer = nn.TransformerEncoderLayer(WIDTH, HEADS, dim_feedforward=16,
                                                    dropout=0.0, activation="gelu",
                                                    batch_first=True)
            self.head = nn.Linear(WIDTH, CLASSES)

        def forward(self, tokens):
            padding = tokens == PAD
            h = self.layer(self.embed(tokens), src_key_padding_mask=padding)
            keep = (~padding).unsqueeze(-1).to(h.dtype)
            return self.head((h * keep).sum(1) / keep.sum(1))

    class DecoderLM(nn.Module):
        """Token + position embeddings → TransformerEncoderLayer with a causal
        ``torch.triu`` mask (pre-norm) → LayerNorm → Linear over the vocabulary."""
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, WIDTH)
            self.position = nn.Embedding(SEQUENCE, WIDTH)
            self.layer = nn.TransformerEncoderLayer(WIDTH, HEADS, dim_feedforward=16,
                                                    dropout=0.0, activation="gelu",
                                                    batch_first=True, norm_first=True)
            self.norm = nn.LayerNorm(WIDTH)
            self.head = nn.Linear(WIDTH, VOCAB)

        def forward(self, tokens):
            steps = tokens.shape[1]
            positions = torch.arange(steps, device=tokens.device)
            mask = torch.triu(torch.full((steps, steps), float("-inf")), diagonal=1)
            h = self.embed(tokens) + self.position(positions)
            h = self.layer(h, src_mask=mask, is_causal=True)
            return self.head(self.norm(h))

    class RecurrentClassifier(nn.Module):
        """Embedding → LSTM, GRU or RNN (tanh; batch first) → last hidden state →
        Linear."""
        def __init__(self, cell):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, WIDTH)
            self.rnn = getattr(nn, cell)(WIDTH, 12, batch_first=True)
            self.head = nn.Linear(12, CLASSES)

        def forward(self, tokens):
            out, _ = self.rnn(self.embed(tokens))
            return self.head(out[:, -1])

    class UpsamplingCNN(nn.Module):
        """Conv → InstanceNorm (affine) → ReLU → ConvTranspose (stride 2) → GroupNorm →
        bilinear Upsample → Conv → F.interpolate (bilinear, down) → mean."""
        def __init__(self):
            super().__init__()
            channels = UPSAMPLE_IMAGE[0]
            self.conv = nn.Conv2d(channels, 4, 3, padding=1)
            self.instance = nn.InstanceNorm2d(4, affine=True)
            self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1)
            self.group = nn.GroupNorm(3, 6)
            self.resize = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.out = nn.Conv2d(6, 3, 3, padding=1)
            with torch.no_grad():  # affine parameters that are not the identity
                for norm in (self.instance, self.group):
                    norm.weight.uniform_(0.5, 1.5)
                    norm.bias.uniform_(-0.5, 0.5)

        def forward(self, x):
            h = torch.relu(self.instance(self.conv(x)))
            h = self.resize(self.group(self.up(h)))
            h = self.out(h)
            return F.interpolate(h, size=(UPSAMPLE_IMAGE[1], UPSAMPLE_IMAGE[2]),
                                 mode="bilinear", align_corners=False)

    return dict(encoder=EncoderClassifier, decoder=DecoderLM,
                lstm=functools.partial(RecurrentClassifier, "LSTM"),
                gru=functools.partial(RecurrentClassifier, "GRU"),
                rnn=functools.partial(RecurrentClassifier, "RNN"),
                upsample=UpsamplingCNN)


TORCH_SEQUENCE_MODELS = ("encoder", "decoder", "lstm", "gru", "rnn", "upsample")


def _torch_sequence_example(kind: str, seed: int) -> np.ndarray:
    if kind == "upsample":
        return _example(UPSAMPLE_IMAGE, seed)
    return _tokens(seed, padded=kind == "encoder")


def torch_sequence(folder, kind: str, dynamo: bool = False, seed: int = 0):
    """One of :data:`TORCH_SEQUENCE_MODELS` exported by PyTorch, opset 17 (TorchScript)
    or the dynamo exporter's default opset. Token models take int64 ids (N, 6); the
    up-sampling CNN takes (N, 2, 6, 6). The batch dimension is symbolic."""
    import torch
    torch.manual_seed(seed)
    module = _torch_modules()[kind]().eval()
    x = _torch_sequence_example(kind, seed)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    name = f"torch_{kind}_{'dynamo' if dynamo else 'torchscript'}"
    path = pathlib.Path(folder) / f"{name}.onnx"
    options = dict(input_names=["input"], output_names=["output"], dynamo=dynamo)
    if dynamo:
        options.update(dynamic_shapes=({0: torch.export.Dim("N")},), external_data=False,
                       verbose=False)
    else:
        options.update(opset_version=17,
                       dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    _quiet_export(module, x, path, options)
    return path, {"input": x}, {"output": expected}


def _keras_convert_model(make_model, shape, folder, name: str, seed: int):
    """Like :func:`_keras_convert` for a model built by ``make_model(keras)`` (a
    functional model, for layers that take several inputs)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf
    import tf2onnx
    keras.utils.set_random_seed(seed)
    model = make_model(keras)
    x = _example(shape, seed)
    expected = np.asarray(model(x))
    path = pathlib.Path(folder) / f"{name}.onnx"
    signature = [tf.TensorSpec((None, *shape), tf.float32, name="input")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proto, _ = tf2onnx.convert.from_function(tf.function(model), signature,
                                                 opset=17, output_path=str(path))
    return path, {"input": x}, {proto.graph.output[0].name: expected}


def _keras_attention(keras):
    inputs = keras.Input((SEQUENCE, WIDTH))
    attended = keras.layers.MultiHeadAttention(HEADS, WIDTH // HEADS)(
        inputs, inputs, use_causal_mask=True)
    h = keras.layers.LayerNormalization()(inputs + attended)
    h = keras.layers.LayerNormalization()(h + _dense(keras, WIDTH, "relu")(h))
    pooled = keras.layers.GlobalAveragePooling1D()(h)
    return keras.Model(inputs, _dense(keras, CLASSES)(pooled))


def _keras_recurrent(cell):
    def make(keras):
        return keras.Sequential([keras.Input((SEQUENCE, WIDTH)),
                                 getattr(keras.layers, cell)(12), _dense(keras, CLASSES)])
    return make


def _keras_upsample(keras):
    return keras.Sequential([
        keras.Input((UPSAMPLE_IMAGE[1], UPSAMPLE_IMAGE[2], UPSAMPLE_IMAGE[0])),
        keras.layers.Conv2D(4, 3, padding="same", activation="relu"),
        keras.layers.Conv2DTranspose(6, 3, strides=2, padding="same"),
        keras.layers.GroupNormalization(groups=3),
        keras.layers.UpSampling2D(2, interpolation="bilinear"),
        keras.layers.Conv2D(3, 3, padding="same")])


KERAS_SEQUENCE_MODELS = {
    "attention": (_keras_attention, (SEQUENCE, WIDTH)),
    "lstm": (_keras_recurrent("LSTM"), (SEQUENCE, WIDTH)),
    "gru": (_keras_recurrent("GRU"), (SEQUENCE, WIDTH)),
    "rnn": (_keras_recurrent("SimpleRNN"), (SEQUENCE, WIDTH)),
    "upsample": (_keras_upsample, (UPSAMPLE_IMAGE[1], UPSAMPLE_IMAGE[2], UPSAMPLE_IMAGE[0])),
}
"""Keras model kind → (builder(keras) -> model, input shape without the batch)."""


def keras_sequence(folder, kind: str, seed: int = 0):
    """One of :data:`KERAS_SEQUENCE_MODELS` converted by tf2onnx (opset 17):
    ``attention`` is MultiHeadAttention with a causal mask, LayerNormalization, a ReLU
    Dense and mean pooling on (N, 6, 8); ``lstm``/``gru``/``rnn`` (SimpleRNN) classify (N, 6, 8);
    ``upsample`` is Conv2D → Conv2DTranspose → GroupNormalization → bilinear
    UpSampling2D → Conv2D on channels-last (N, 6, 6, 2)."""
    make, shape = KERAS_SEQUENCE_MODELS[kind]
    return _keras_convert_model(make, shape, folder, f"keras_{kind}", seed)


SEQUENCE_EXPORTERS = {
    **{f"torch_{kind}_{'dynamo' if dynamo else 'torchscript'}":
       (functools.partial(torch_sequence, kind=kind, dynamo=dynamo),
        ("torch", "onnxscript") if dynamo else ("torch",))
       for kind in TORCH_SEQUENCE_MODELS for dynamo in (False, True)},
    **{f"keras_{kind}": (functools.partial(keras_sequence, kind=kind),
                         ("tensorflow", "keras", "tf2onnx"))
       for kind in KERAS_SEQUENCE_MODELS},
}
"""File name → (helper(folder) -> (path, inputs, expected), packages it imports): the
transformer, recurrent and up-sampling models of issue 19. Kept apart from
:data:`EXPORTERS`, whose files every executor already runs."""
