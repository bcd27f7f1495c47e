"""Hand-written PyTorch and Keras versions of the zoo's LeNet and CIFAR ResNets, the
native baselines of ``lv1_executors.py``.

Each model is written the way a user of the framework writes it (layers as modules,
``forward`` / the functional API), with exactly the zoo graph's computation
(:mod:`deep500.networks.lenet`, :mod:`deep500.networks.resnet`): the same layers, kernel
sizes, strides and paddings, batch normalisation in inference form (PyTorch ``eval()``,
Keras ``training=False``) with the zoo's epsilon, ReLU out of place as ONNX's ``Relu``
is. The ``*_from_onnx`` functions build the model for a zoo model name and copy every
initializer of the ONNX model into it, so the native model computes the same function:

* PyTorch (NCHW like ONNX): module names mirror the ONNX node names, so the copy is by
  name (``bn.scale``/``bias``/``mean``/``var`` → ``weight``/``bias``/``running_mean``/
  ``running_var``); every parameter and buffer must be covered.
* Keras (channels_last, as Keras prefers on the CPU): kernels (O, I, kH, kW) →
  (kH, kW, I, O), dense weights (out, in) with transB=1 → (in, out); the first dense
  layer after a flatten also reorders its inputs from (C, H, W) to (H, W, C) order. A
  stride-2 3×3 convolution with the zoo's symmetric padding 1 is ``ZeroPadding2D(1)`` +
  ``padding="valid"``, since Keras' ``"same"`` pads (0, 1) at stride 2.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from deep500.networks._builder import BN_EPSILON, BN_MOMENTUM

CIFAR_DEPTHS = {"resnet20": 20, "resnet32": 32, "resnet44": 44, "resnet56": 56}
_LENET_INPUT = (1, 28, 28)   # the zoo's default LeNet input: conv1 pads 2 ("same")
_RESNET_INPUT = (3, 32, 32)


def model_names() -> list[str]:
    """Zoo model names with a native version here."""
    return ["lenet", *CIFAR_DEPTHS]


def _initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _input_shape(model: onnx.ModelProto) -> tuple[int, ...]:
    dims = model.graph.input[0].type.tensor_type.shape.dim
    return tuple(d.dim_value for d in dims[1:])


def _check(name: str, model: onnx.ModelProto) -> None:
    if name not in model_names():
        raise ValueError(f"no native version of zoo model {name!r}; have {model_names()}")
    expected = _LENET_INPUT if name == "lenet" else _RESNET_INPUT
    if _input_shape(model) != expected:
        raise ValueError(f"the native {name} is written for the zoo's default input "
                         f"{expected}, the ONNX model has {_input_shape(model)}")


def _classes(model: onnx.ModelProto) -> int:
    return model.graph.output[0].type.tensor_type.shape.dim[1].dim_value


# -- PyTorch ------------------------------------------------------------------------------
def _torch():
    import torch
    return torch


def torch_lenet(classes: int = 10):
    """LeNet-5 for 1×28×28 inputs: conv5×5(6, pad 2) → relu → maxpool2 → conv5×5(16) →
    relu → maxpool2 → flatten → fc(120) → relu → fc(84) → relu → fc(classes)."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(16 * 5 * 5, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, classes)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = torch.flatten(x, 1)
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            return self.fc3(x)

    return LeNet()


def torch_cifar_resnet(depth: int = 20, classes: int = 10):
    """CIFAR ResNet-depth with option-B (1×1 conv + BN) shortcuts."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    class ConvBN(nn.Module):
        def __init__(self, c_in, c_out, kernel, stride):
            super().__init__()
            self.conv = nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, bias=False)
            self.bn = nn.BatchNorm2d(c_out, eps=BN_EPSILON, momentum=1 - BN_MOMENTUM)

        def forward(self, x):
            return self.bn(self.conv(x))

    class BasicBlock(nn.Module):
        def __init__(self, c_in, c_out, stride):
            super().__init__()
            self.conv1 = ConvBN(c_in, c_out, 3, stride)
            self.conv2 = ConvBN(c_out, c_out, 3, 1)
            self.downsample = (ConvBN(c_in, c_out, 1, stride)
                               if stride != 1 or c_in != c_out else None)

        def forward(self, x):
            y = self.conv2(F.relu(self.conv1(x)))
            shortcut = x if self.downsample is None else self.downsample(x)
            return F.relu(y + shortcut)

    class CifarResNet(nn.Module):
        def __init__(self):
            super().__init__()
            n = (depth - 2) // 6
            self.conv1 = ConvBN(3, 16, 3, 1)
            c_in = 16
            for stage, (c_out, stride) in enumerate(((16, 1), (32, 2), (64, 2)), start=1):
                blocks = []
                for index in range(n):
                    blocks.append(BasicBlock(c_in, c_out, stride if index == 0 else 1))
                    c_in = c_out
                setattr(self, f"layer{stage}", nn.Sequential(*blocks))
            self.fc = nn.Linear(64, classes)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = self.layer3(self.layer2(self.layer1(x)))
            x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
            return self.fc(x)

    return CifarResNet()


_TORCH_BN = {"scale": "weight", "bias": "bias", "mean": "running_mean",
             "var": "running_var"}


def torch_model_from_onnx(name: str, model: onnx.ModelProto):
    """The native PyTorch module of zoo model ``name``, in eval mode, holding the ONNX
    model's initializers, and ``{ONNX initializer name: state_dict key}``. Raises if an
    initializer or a module tensor is left over."""
    torch = _torch()
    _check(name, model)
    module = (torch_lenet(_classes(model)) if name == "lenet"
              else torch_cifar_resnet(CIFAR_DEPTHS[name], _classes(model)))
    bn_inputs = {n.input[i]: i for n in model.graph.node
                 if n.op_type == "BatchNormalization" for i in range(1, 5)}
    state = module.state_dict()
    wanted = {key for key in state if not key.endswith("num_batches_tracked")}
    copied, keys = {}, {}
    for onnx_name, value in _initializers(model).items():
        key = onnx_name
        if onnx_name in bn_inputs:
            prefix, suffix = onnx_name.rsplit(".", 1)
            key = f"{prefix}.{_TORCH_BN[suffix]}"
        if key not in wanted:
            raise KeyError(f"ONNX initializer {onnx_name!r} has no place in the native "
                           f"{name} (looked for {key!r})")
        copied[key] = torch.from_numpy(np.array(value))
        keys[onnx_name] = key
    missing = wanted - set(copied)
    if missing:
        raise KeyError(f"native {name}: no ONNX initializer for {sorted(missing)}")
    module.load_state_dict(copied, strict=False)
    return module.eval(), keys


# -- Keras --------------------------------------------------------------------------------
def _keras():
    import keras
    return keras


def _conv_kernel(w: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(w.transpose(2, 3, 1, 0))


def keras_lenet(classes: int = 10):
    """LeNet-5 (as :func:`torch_lenet`) on NHWC 28×28×1 inputs. Returns the model and
    ``{ONNX node name: (layer, kind)}`` for copying weights."""
    keras = _keras()
    L = keras.layers
    conv1 = L.Conv2D(6, 5, padding="same", activation="relu", name="conv1")
    conv2 = L.Conv2D(16, 5, padding="valid", activation="relu", name="conv2")
    fc1 = L.Dense(120, activation="relu", name="fc1")
    fc2 = L.Dense(84, activation="relu", name="fc2")
    fc3 = L.Dense(classes, name="fc3")
    inputs = keras.Input((28, 28, 1), name="input")
    x = L.MaxPooling2D(2)(conv1(inputs))
    x = L.MaxPooling2D(2)(conv2(x))
    x = fc3(fc2(fc1(L.Flatten()(x))))
    layers = {"conv1": (conv1, "conv"), "conv2": (conv2, "conv"),
              "fc1": (fc1, ("dense_after_flatten", (16, 5, 5))), "fc2": (fc2, "dense"),
              "fc3": (fc3, "dense")}
    return keras.Model(inputs, x, name="lenet"), layers


def keras_cifar_resnet(depth: int = 20, classes: int = 10):
    """CIFAR ResNet-depth (as :func:`torch_cifar_resnet`) on NHWC 32×32×3 inputs.
    Returns the model and ``{ONNX node name: (layer, kind)}``."""
    keras = _keras()
    L = keras.layers
    layers = {}

    def conv_bn(x, channels, kernel, stride, name, relu=True):
        if kernel == 3 and stride != 1:
            x = L.ZeroPadding2D(1)(x)
            padding = "valid"
        else:
            padding = "same" if kernel == 3 else "valid"
        conv = L.Conv2D(channels, kernel, stride, padding=padding, use_bias=False)
        bn = L.BatchNormalization(epsilon=BN_EPSILON, momentum=BN_MOMENTUM)
        layers[f"{name}.conv"], layers[f"{name}.bn"] = (conv, "conv"), (bn, "bn")
        x = bn(conv(x))
        return L.ReLU()(x) if relu else x

    inputs = keras.Input((32, 32, 3), name="input")
    x = conv_bn(inputs, 16, 3, 1, "conv1")
    c_in = 16
    for stage, (channels, stride) in enumerate(((16, 1), (32, 2), (64, 2)), start=1):
        for index in range((depth - 2) // 6):
            name, s = f"layer{stage}.{index}", stride if index == 0 else 1
            y = conv_bn(x, channels, 3, s, f"{name}.conv1")
            y = conv_bn(y, channels, 3, 1, f"{name}.conv2", relu=False)
            shortcut = (x if s == 1 and c_in == channels
                        else conv_bn(x, channels, 1, s, f"{name}.downsample", relu=False))
            x = L.ReLU()(L.Add()([y, shortcut]))
            c_in = channels
    fc = L.Dense(classes)
    layers["fc"] = (fc, "dense")
    x = fc(L.GlobalAveragePooling2D()(x))
    return keras.Model(inputs, x, name=f"resnet{depth}"), layers


_KERAS_BN = {"scale": "gamma", "bias": "beta", "mean": "moving_mean",
             "var": "moving_variance"}


def _keras_target(layer, kind, suffix: str):
    """(variable, ONNX array → native array) of an ONNX initializer ``<node>.<suffix>``."""
    if kind == "bn":
        return getattr(layer, _KERAS_BN[suffix]), lambda v: v
    if suffix == "bias":
        return layer.bias, lambda v: v
    if kind == "conv":
        return layer.kernel, _conv_kernel
    if kind == "dense":
        return layer.kernel, lambda v: np.ascontiguousarray(v.T)
    _, (c, h, w) = kind   # dense after an NCHW flatten: inputs in (C, H, W) order
    return layer.kernel, lambda v: np.ascontiguousarray(
        v.reshape(-1, c, h, w).transpose(0, 2, 3, 1).reshape(v.shape[0], -1).T)


def keras_model_from_onnx(name: str, model: onnx.ModelProto):
    """The native Keras model of zoo model ``name`` holding the ONNX model's
    initializers, and ``{ONNX initializer name: (variable, to_native)}`` where
    ``to_native`` maps an array in the ONNX layout (a value or a gradient) to the
    variable's layout."""
    _check(name, model)
    keras_model, layers = (keras_lenet(_classes(model)) if name == "lenet"
                           else keras_cifar_resnet(CIFAR_DEPTHS[name], _classes(model)))
    mapping = {}
    for onnx_name, value in _initializers(model).items():
        node, suffix = onnx_name.rsplit(".", 1)
        layer, kind = layers[node]
        variable, to_native = _keras_target(layer, kind, suffix)
        native = to_native(value)
        if tuple(variable.shape) != native.shape:
            raise ValueError(f"native {name}: {onnx_name!r} {value.shape} does not fit "
                             f"{variable.path} {tuple(variable.shape)}")
        variable.assign(native)
        mapping[onnx_name] = (variable, to_native)
    covered = {id(v) for v, _ in mapping.values()}
    missing = [v.path for v in keras_model.weights if id(v) not in covered]
    if missing:
        raise KeyError(f"native {name}: no ONNX initializer for {missing}")
    return keras_model, mapping
