"""TensorFlow's own operators behind Deep500's ``CustomOp`` interface (eager mode).

``native_operator("Conv", ...)`` maps an ONNX operator and its attributes onto
``tf.nn``/``tf.linalg``. TensorFlow's CPU convolution takes NHWC activations and HWIO
filters, so ONNX's NCHW/OIHW tensors are transposed when converted — outside the timed
call — and the layout is recorded in the measurement's conditions. Backward uses
``tf.GradientTape``.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from deep500.frameworks._bridge.native_ops import NativeOperators
from deep500.frameworks.tensorflow._tf import tf
from deep500.lv0_operators.custom_op import CustomOp, as_tuple
from deep500.utils.device import parse_device
from deep500.utils.errors import UnsupportedError


class TensorFlowNativeOp(CustomOp):
    """A TensorFlow function as a CustomOp on NumPy arrays.

    Args:
        fn: a function of TF tensors (in the native layout) returning one tensor or a
            tuple.
        backward_fn: the same function in a form TensorFlow can differentiate, where
            ``fn``'s kernels have no gradient (default: ``fn``).
        input_transforms: per input, a NumPy function to the layout ``fn`` expects
            (None = unchanged); ``output_transform`` maps ``fn``'s outputs back.
    """
    framework = "tensorflow"

    def __init__(self, fn: Callable, op_type: str = "TensorFlowOp",
                 attributes: dict | None = None, device=None,
                 input_transforms: Sequence[Callable | None] = (),
                 output_transform: Callable | None = None, native_layout: str | None = None,
                 backward_fn: Callable | None = None,
                 input_descriptors=None, output_descriptors=None):
        super().__init__(input_descriptors, output_descriptors, parse_device(device))
        self.fn = fn
        self.backward_fn = backward_fn or fn
        self.op_type = op_type
        self._attributes = dict(attributes or {})
        self.input_transforms = list(input_transforms)
        self.output_transform = output_transform
        self.native_layout = native_layout

    @property
    def attributes(self) -> dict:
        return dict(self._attributes)

    def conditions(self) -> dict:
        conditions = super().conditions()
        conditions["execution"] = "eager"
        if self.native_layout:
            conditions["native_layout"] = self.native_layout
        return conditions

    def _to_tf(self, inputs):
        tensors = []
        with tf.device(self.device.tf_device()):
            for index, array in enumerate(inputs):
                if array is None:
                    tensors.append(None)
                    continue
                transform = (self.input_transforms[index]
                             if index < len(self.input_transforms) else None)
                array = transform(array) if transform else array
                tensors.append(tf.constant(np.asarray(array, order="C")))
        return tensors

    def _to_numpy(self, result) -> tuple:
        # np.asarray: .numpy() of a 0-d tensor is a NumPy scalar, not an array.
        outputs = tuple(np.asarray(t.numpy()) if t is not None else None
                        for t in as_tuple(result))
        return self.output_transform(outputs) if self.output_transform else outputs

    def forward(self, *inputs):
        outputs = self._to_numpy(self.fn(*self._to_tf(inputs)))
        return outputs[0] if len(outputs) == 1 else outputs

    def backward(self, grads, fwd_inputs, fwd_outputs):
        tensors = self._to_tf(fwd_inputs)
        differentiable = [t is not None and t.dtype.is_floating for t in tensors]
        variables = [t for t, d in zip(tensors, differentiable) if d]
        with tf.GradientTape() as tape:
            for t in variables:
                tape.watch(t)
            outputs = as_tuple(self.backward_fn(*tensors))
        # Upstream gradients arrive in ONNX layout; bring them to TF's, like the outputs.
        native_grads = self._grads_to_native(grads)
        pairs = [(o, g) for o, g in zip(outputs, native_grads) if g is not None]
        computed = tape.gradient([o for o, _ in pairs], variables,
                                 output_gradients=[g for _, g in pairs])
        computed = iter(computed)
        result = []
        for index, (array, is_diff) in enumerate(zip(fwd_inputs, differentiable)):
            if not is_diff:
                result.append(None)
                continue
            grad = next(computed)
            grad = np.zeros_like(array) if grad is None else grad.numpy()
            inverse = self._inverse_input_transform(index)
            result.append(inverse(grad) if inverse else grad)
        return result

    def _grads_to_native(self, grads):
        inverse = getattr(self.output_transform, "inverse", None)
        converted = inverse(tuple(grads)) if inverse else tuple(grads)
        with tf.device(self.device.tf_device()):
            return [tf.constant(np.asarray(g, order="C")) if g is not None else None
                    for g in converted]

    def _inverse_input_transform(self, index):
        if index < len(self.input_transforms) and self.input_transforms[index]:
            return getattr(self.input_transforms[index], "inverse")
        return None

    def native_call(self, inputs: Sequence[np.ndarray]):
        tensors = self._to_tf(inputs)
        fn = self.fn
        return (lambda: fn(*tensors)), self._to_numpy


class _Transpose:
    """A NumPy transpose that knows its inverse (for layouts and their gradients)."""

    def __init__(self, perm):
        self.perm = tuple(perm)

    def __call__(self, array):
        return np.ascontiguousarray(np.transpose(array, self.perm))

    def inverse(self, array):
        return np.ascontiguousarray(np.transpose(array, tuple(np.argsort(self.perm))))


class _EachOutput:
    """Apply a transform to every output (and its inverse to every gradient)."""

    def __init__(self, transform):
        self.transform = transform

    def __call__(self, outputs):
        return tuple(self.transform(o) if o is not None else None for o in outputs)

    def inverse(self, grads):
        return tuple(self.transform.inverse(g) if g is not None else None for g in grads)


NCHW_TO_NHWC = _Transpose((0, 2, 3, 1))
OIHW_TO_HWIO = _Transpose((2, 3, 1, 0))
NHWC_TO_NCHW = _EachOutput(_Transpose((0, 3, 1, 2)))

# -- ONNX operators onto tf.nn / tf.linalg ---------------------------------------------
# Each builder returns TensorFlowNativeOp's keyword arguments: ``fn`` and, for
# convolutions, the layouts it works in.
_OPERATORS = NativeOperators("TensorFlow")
_OPERATORS.without_attributes({"Relu": {"fn": tf.nn.relu}, "Sigmoid": {"fn": tf.math.sigmoid},
                               "Tanh": {"fn": tf.math.tanh}})


@_OPERATORS.builder("Conv")
def _conv(attributes):
    if attributes.get("auto_pad", "NOTSET") != "NOTSET":
        raise UnsupportedError("The TensorFlow Conv wrapper takes explicit pads; "
                               "auto_pad is not supported")
    sh, sw = attributes.get("strides", [1, 1])
    dh, dw = attributes.get("dilations", [1, 1])
    top, left, bottom, right = attributes.get("pads", [0, 0, 0, 0])
    padding = [[0, 0], [top, bottom], [left, right], [0, 0]]

    group = int(attributes.get("group", 1))

    def conv(X, W, B=None):
        # Grouped convolution: TF infers the group count from the channel ratio.
        Y = tf.nn.conv2d(X, W, strides=[1, sh, sw, 1], padding=padding,
                         dilations=[1, dh, dw, 1], data_format="NHWC")
        return Y if B is None else tf.nn.bias_add(Y, B, data_format="NHWC")

    def dilated(W):
        # HWIO filter with dilation - 1 zeros between taps, so that a dilation-1
        # convolution computes the dilated one.
        for axis, rate in ((0, dh), (1, dw)):
            if rate > 1:
                taps = W.shape[axis]
                spaced = tf.pad(tf.expand_dims(W, axis + 1),
                                [[0, rate - 1] if a == axis + 1 else [0, 0]
                                 for a in range(5)])
                shape = list(W.shape)
                shape[axis] = taps * rate
                W = tf.reshape(spaced, shape)[(slice(None),) * axis +
                                              (slice(0, rate * (taps - 1) + 1),)]
        return W

    def conv_differentiable(X, W, B=None):
        # TF's CPU kernels have no gradient for grouped or dilated convolutions: one
        # conv per group, with the dilation spelled out in the filter.
        W = dilated(W)
        Y = tf.concat([tf.nn.conv2d(x, w, strides=[1, sh, sw, 1], padding=padding,
                                    data_format="NHWC")
                       for x, w in zip(tf.split(X, group, axis=3),
                                       tf.split(W, group, axis=3))], axis=3)
        return Y if B is None else tf.nn.bias_add(Y, B, data_format="NHWC")

    needs_workaround = group > 1 or dh > 1 or dw > 1
    return {"fn": conv, "backward_fn": conv_differentiable if needs_workaround else None,
            "input_transforms": [NCHW_TO_NHWC, OIHW_TO_HWIO, None],
            "output_transform": NHWC_TO_NCHW, "native_layout": "NHWC"}


@_OPERATORS.builder("Gemm")
def _gemm(attributes):
    alpha, beta = attributes.get("alpha", 1.0), attributes.get("beta", 1.0)
    trans_a, trans_b = bool(attributes.get("transA", 0)), bool(attributes.get("transB", 0))

    def gemm(A, B, C=None):
        Y = tf.linalg.matmul(A, B, transpose_a=trans_a, transpose_b=trans_b)
        if alpha != 1.0:
            Y = Y * alpha
        if C is not None and beta != 0:
            Y = Y + (C * beta if beta != 1.0 else C)
        return Y
    return {"fn": gemm}


@_OPERATORS.builder("MatMul")
def _matmul(attributes):
    def matmul(A, B):
        # ONNX (NumPy) semantics: a 1-D operand is a row (A) or column (B) vector whose
        # axis is dropped from the result; tf.linalg.matmul needs rank >= 2.
        if A.shape.rank > 1 and B.shape.rank > 1:
            return tf.linalg.matmul(A, B)
        Y = tf.linalg.matmul(A[tf.newaxis] if A.shape.rank == 1 else A,
                             B[:, tf.newaxis] if B.shape.rank == 1 else B)
        if B.shape.rank == 1:
            Y = tf.squeeze(Y, -1)
        return tf.squeeze(Y, -2 if B.shape.rank > 1 else -1) if A.shape.rank == 1 else Y
    return {"fn": matmul}


@_OPERATORS.builder("Softmax")
def _softmax(attributes):
    axis = attributes.get("axis", -1)
    return {"fn": lambda X: tf.nn.softmax(X, axis=axis)}


@_OPERATORS.builder("LogSoftmax")
def _log_softmax(attributes):
    axis = attributes.get("axis", -1)
    return {"fn": lambda X: tf.nn.log_softmax(X, axis=axis)}


def native_operator(op_type: str, device=None, **attributes) -> TensorFlowNativeOp:
    """TensorFlow's implementation of ONNX operator ``op_type`` as a CustomOp."""
    return TensorFlowNativeOp(op_type=op_type, attributes=attributes, device=device,
                              **_OPERATORS.build(op_type, attributes))


def native_operator_names() -> list[str]:
    """The ONNX operators :func:`native_operator` maps onto TensorFlow, sorted."""
    return _OPERATORS.names()
