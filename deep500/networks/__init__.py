"""The model zoo: ONNX models built in code, with seeded initial weights.

``create_model(name, batch_size=..., loss=None, seed=0, dtype="float32", **kwargs)``
builds model ``name`` (see :func:`model_names`) as an ``onnx.ModelProto`` at ONNX opset
17 (IR version 8) with one input ``input`` of shape [batch_size, C, H, W] and one output
``output`` (logits); ``kwargs`` override the builder's defaults (``input_shape``,
``classes``, ``hidden``, ``depth``, ``width``).

The sequence models ``transformer``, ``gpt`` and ``lstm`` instead take ``input`` as
**int64 token ids** of shape [batch_size, T] (``input_shape=(T,)``, ids below ``vocab``);
``gpt``'s ``output`` is per-position logits [batch_size, classes, T]. See their modules
and ``docs/sequence_models.md``. ``alexnet`` and ``vgg11`` are torchvision's layouts
adapted to 32×32 inputs (see their modules). ``vgg16``, ``resnet18`` … ``resnet101`` and
``densenet121`` are the papers' ImageNet models (224×224, 1000 classes by default; see
``docs/sequence_models.md``). With ``loss=`` the named loss of
:mod:`deep500.utils.onnx_interop.losses` is attached to ``output``: a graph input
``labels`` and a scalar graph output ``loss`` are added. The same arguments always give
a byte-identical model.
"""
from __future__ import annotations

import inspect

import onnx

from deep500.networks._builder import IR_VERSION, OPSET, GraphBuilder, parameter_count
from deep500.networks.alexnet import alexnet
from deep500.networks.densenet import densenet
from deep500.networks.gpt import gpt
from deep500.networks.lenet import lenet
from deep500.networks.lstm import lstm
from deep500.networks.mlp import mlp
from deep500.networks.resnet import CIFAR_DEPTHS, IMAGENET_DEPTHS, cifar_resnet, imagenet_resnet
from deep500.networks.transformer import transformer
from deep500.networks.vgg11 import vgg11
from deep500.networks.vgg16 import vgg16
from deep500.networks.wide_resnet import wide_resnet
from deep500.utils.errors import Deep500Error
from deep500.utils.onnx_interop.losses import LOSSES, add_loss

MODELS: dict[str, tuple] = {"mlp": (mlp, {}), "lenet": (lenet, {})}
MODELS.update({f"resnet{d}": (cifar_resnet, {"depth": d}) for d in CIFAR_DEPTHS})
MODELS.update({f"resnet{d}": (imagenet_resnet, {"depth": d}) for d in IMAGENET_DEPTHS})
MODELS.update({f"wrn{d}_{k}": (wide_resnet, {"depth": d, "width": k})
               for d, k in ((16, 4), (28, 10), (40, 4))})
MODELS["wide_resnet"] = (wide_resnet, {})
MODELS.update({"alexnet": (alexnet, {}), "vgg11": (vgg11, {}), "vgg16": (vgg16, {}),
               "densenet121": (densenet, {}),
               "transformer": (transformer, {}), "gpt": (gpt, {}), "lstm": (lstm, {})})
"""Model name → (builder, default keyword arguments)."""


def model_names() -> list[str]:
    """Names accepted by :func:`create_model`."""
    return sorted(MODELS)


def create_model(name: str, batch_size="N", loss: str | None = None, seed: int = 0,
                 dtype: str = "float32", **kwargs) -> onnx.ModelProto:
    """Model ``name`` of the zoo with seeded initial weights (see the module docstring)."""
    if name not in MODELS:
        raise Deep500Error(f"unknown model {name!r}; the model zoo has {model_names()}")
    builder, defaults = MODELS[name]
    arguments = {**defaults, **kwargs, "batch_size": batch_size, "dtype": dtype,
                 "seed": seed, "name": name}
    try:
        inspect.signature(builder).bind(**arguments)
    except TypeError:
        accepted = [p for p in inspect.signature(builder).parameters
                    if p not in ("batch_size", "dtype", "seed", "name", *defaults)]
        raise Deep500Error(f"model {name!r} does not take the options "
                           f"{sorted(set(kwargs) - set(accepted))}; it accepts {accepted}"
                           ) from None
    model = builder(**arguments)
    if loss is not None:
        model = add_loss(model, loss, output="output")
    return model


__all__ = ["GraphBuilder", "IR_VERSION", "LOSSES", "MODELS", "OPSET", "alexnet",
           "cifar_resnet", "create_model", "densenet", "gpt", "imagenet_resnet", "lenet",
           "lstm", "mlp", "model_names", "parameter_count", "transformer", "vgg11", "vgg16",
           "wide_resnet"]
