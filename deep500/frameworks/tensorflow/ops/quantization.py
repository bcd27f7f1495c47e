"""TensorFlowVisitor: the quantization family (``deep500/frameworks/families.py``),
quantized arithmetic and (de)quantization: https://onnx.ai/onnx/operators/. Integer
products are exact (int32, or float64 convolutions of integer values); requantization
rounds half to even and saturates.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _attr
from deep500.frameworks.tensorflow.ops._carried_casts import CARRIED, cast_to_carried, is_carried
from deep500.frameworks.tensorflow.ops._values import _axis, _onnx_to_np_dtype, _tf_dtype
from deep500.utils.onnx_interop.cast import FLOAT4, dtype_kind
from deep500.utils.onnx_interop.window import resolve_pads


def _quantization_parameter(parameter, x, axis, block_size):
    """A scale or zero point shaped to broadcast against ``x``: a scalar as is, a vector
    along ``axis``, or (blocked) each element repeated ``block_size`` times along it."""
    rank = len(x.shape)
    if len(parameter.shape) == 0 or (len(parameter.shape) == 1 and parameter.shape[0] == 1
                                     and block_size == 0):
        return tf.reshape(parameter, [])
    along = _axis(axis, rank)
    if block_size > 0:
        repeated = tf.repeat(parameter, block_size, axis=along)
        return repeated[(slice(None),) * along + (slice(0, x.shape[along]),)]
    shape = [1] * rank
    shape[along] = -1
    return tf.reshape(parameter, shape)


def _wider_float(a, b):
    for dtype in (tf.float64, tf.float32, tf.bfloat16):
        if dtype in (a, b):
            return dtype
    return tf.float16


class QuantizationOps:
    """``visit_<op>`` of the quantization family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def visit_dequantizelinear(self, op, network) -> None:
        """DequantizeLinear: (x - zero_point)·scale, per tensor, per axis or per block
        (https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html)."""
        axis = int(_attr(op, "axis", 1))
        block_size = int(_attr(op, "block_size", 0))
        given = int(_attr(op, "output_dtype", 0))
        target = tf.as_dtype(onnx.helper.tensor_dtype_to_np_dtype(given)) if given else None

        def dequantize(x, scale, zero_point=None):
            x, scale = tf.convert_to_tensor(x), tf.convert_to_tensor(scale)
            scale = _quantization_parameter(scale, x, axis, block_size)
            shifted = tf.cast(x, tf.float32)
            if zero_point is not None:
                zero_point = _quantization_parameter(tf.convert_to_tensor(zero_point), x,
                                                     axis, block_size)
                shifted = shifted - tf.cast(zero_point, tf.float32)
            y = shifted * tf.cast(scale, tf.float32) if _tf_dtype(scale) != tf.float64 else (
                tf.cast(shifted, tf.float64) * scale)
            return tf.cast(y, target or _tf_dtype(scale))
        self.emit(dequantize, [self.key(n) for n in op.inputs], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_quantizelinear(self, op, network) -> None:
        """QuantizeLinear: saturate(round_half_even(x / scale) + zero_point), per tensor,
        per axis or per block (https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html);
        to float8, x / scale cast (saturating unless ``saturate`` is 0); to FLOAT4E2M1,
        x / scale + zero_point cast, as ONNX's reference computes. The division is in
        ``precision``'s type, else in the wider of x's and scale's. Types TensorFlow
        carries (int4, float8, ...) come in their carrier (``ops/_carried_casts.py``)."""
        axis = int(_attr(op, "axis", 1))
        block_size = int(_attr(op, "block_size", 0))
        given = int(_attr(op, "output_dtype", 0))
        precision = int(_attr(op, "precision", 0))
        saturate = bool(_attr(op, "saturate", 1))
        zero = op.inputs[2] if len(op.inputs) > 2 else ""
        zero_dtype = (self.network.carried_types.get(zero, self.network.dtypes.get(zero))
                      if zero else None)
        target = np.dtype(zero_dtype if zero_dtype is not None else
                          _onnx_to_np_dtype(given) if given else np.uint8)
        if dtype_kind(target) == "f" and not is_carried(target):
            raise self.node_error(op, f"quantization to {target.name} is not supported "
                                      f"(integers, float8 and float4 are)")
        divide_in = tf.as_dtype(_onnx_to_np_dtype(precision)) if precision else None

        def scaled(x, scale):
            x, scale = tf.convert_to_tensor(x), tf.convert_to_tensor(scale)
            scale = _quantization_parameter(scale, x, axis, block_size)
            dtype = divide_in or _wider_float(_tf_dtype(x), _tf_dtype(scale))
            return tf.cast(x, dtype) / tf.cast(scale, dtype)

        def zero_point_of(zero_point, x, dtype):
            return tf.cast(_quantization_parameter(tf.convert_to_tensor(zero_point), x, axis,
                                                   block_size), dtype)

        if dtype_kind(target) == "f":
            def quantize(x, scale, zero_point=None):
                y = scaled(x, scale)
                if zero_point is not None and target == FLOAT4:
                    y = y + zero_point_of(zero_point, x, y.dtype)
                return cast_to_carried(y, target, saturate)
        else:
            bounds = ml_dtypes.iinfo(target)
            stored = tf.as_dtype(CARRIED.get(target, target))

            def quantize(x, scale, zero_point=None):
                q = tf.cast(tf.round(scaled(x, scale)), tf.float64)
                if zero_point is not None:
                    q = q + zero_point_of(zero_point, x, tf.float64)
                return tf.cast(tf.clip_by_value(q, float(bounds.min), float(bounds.max)),
                               stored)
        self.emit(quantize, [self.key(n) for n in op.inputs], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_dynamicquantizelinear(self, op, network) -> None:
        """DynamicQuantizeLinear: uint8 quantization with the scale and zero point of the
        input's range, widened to include 0
        (https://onnx.ai/onnx/operators/onnx__DynamicQuantizeLinear.html)."""
        def dynamic_quantize(x):
            x = tf.convert_to_tensor(x)
            high = tf.maximum(tf.reduce_max(x), 0)
            low = tf.minimum(tf.reduce_min(x), 0)
            span = tf.where(tf.equal(high, low), tf.ones_like(high), high - low)
            scale = span / 255
            zero_point = tf.round(tf.clip_by_value(-low / scale, 0, 255))
            y = tf.clip_by_value(tf.round(x / scale) + zero_point, 0, 255)
            return (tf.cast(y, tf.uint8), tf.cast(scale, _tf_dtype(x)),
                    tf.cast(zero_point, tf.uint8))
        self.emit(dynamic_quantize, [self.key(op.inputs[0])], list(op.outputs))

    def visit_qlinearmatmul(self, op, network) -> None:
        """QLinearMatMul: the integer product of the zero-point-shifted operands,
        requantized with scale a_scale·b_scale/y_scale
        (https://onnx.ai/onnx/operators/onnx__QLinearMatMul.html)."""
        y_zero_dtype = self.network.dtypes.get(op.inputs[7]) if len(op.inputs) > 7 else None

        def qlinear_matmul(a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero=None):
            a, b = tf.convert_to_tensor(a), tf.convert_to_tensor(b)
            a_int = tf.cast(a, tf.int32) - tf.cast(a_zero, tf.int32)
            b_int = tf.cast(b, tf.int32) - tf.cast(b_zero, tf.int32)
            product = tf.cast(tf.linalg.matmul(a_int, b_int), tf.float64)
            scale_dtype = _tf_dtype(tf.convert_to_tensor(a_scale))
            factor = (tf.cast(a_scale, scale_dtype) * tf.cast(b_scale, scale_dtype)
                      / tf.cast(y_scale, scale_dtype))
            y = product * tf.cast(factor, tf.float64)
            target = _tf_dtype(a)
            if y_zero is not None:
                y = y + tf.cast(y_zero, tf.float64)
                target = _tf_dtype(tf.convert_to_tensor(y_zero))
            elif y_zero_dtype is not None:
                target = tf.as_dtype(y_zero_dtype)
            bounds = np.iinfo(target.as_numpy_dtype)
            return tf.cast(tf.clip_by_value(tf.round(y), float(bounds.min), float(bounds.max)),
                           target)
        self.emit(qlinear_matmul, [self.key(n) for n in op.inputs], op.outputs[0])

    def visit_matmulinteger(self, op, network) -> None:
        """MatMulInteger: the int32 product of the zero-point-shifted operands
        (https://onnx.ai/onnx/operators/onnx__MatMulInteger.html)."""
        def matmul_integer(a, b, a_zero=None, b_zero=None):
            a_int = tf.cast(a, tf.int32)
            b_int = tf.cast(b, tf.int32)
            if a_zero is not None:
                zero = tf.cast(a_zero, tf.int32)
                if len(zero.shape) == 1:   # per row of a
                    zero = zero[:, None]
                a_int = a_int - zero
            if b_zero is not None:
                b_int = b_int - tf.cast(b_zero, tf.int32)   # per column of b broadcasts
            return tf.linalg.matmul(a_int, b_int)
        self.emit(matmul_integer, [self.key(n) for n in op.inputs], op.outputs[0])

    def _integer_conv(self, op, x, w, x_zero, w_zero):
        """The int32 convolution of zero-point-shifted integer operands (NCHW, OIHW), as
        an exact float64 convolution in channels-last."""
        a = op.attributes
        group = int(_attr(op, "group", 1))
        x = tf.cast(x, tf.float64) - (0 if x_zero is None else tf.cast(x_zero, tf.float64))
        w = tf.cast(w, tf.float64)
        if w_zero is not None:
            zero = tf.cast(w_zero, tf.float64)
            # per output channel: (M,) against weights (M, C/group, k...)
            w = w - (tf.reshape(zero, [-1] + [1] * (len(w.shape) - 1))
                     if len(zero.shape) == 1 else zero)
        spatial = len(x.shape) - 2
        kernel = list(w.shape[2:])
        strides = list(a.get("strides") or [1] * spatial)
        dilations = list(a.get("dilations") or [1] * spatial)
        begin, end = resolve_pads(op.op_type, list(x.shape[2:]), kernel, strides=strides,
                                  dilations=dilations, pads=a.get("pads"),
                                  auto_pad=_attr(op, "auto_pad", "NOTSET"))
        channels_last = tf.transpose(x, [0] + list(range(2, spatial + 2)) + [1])
        channels_last = tf.pad(channels_last, [[0, 0]] + [[b, e] for b, e in zip(begin, end)]
                               + [[0, 0]])
        filters = tf.transpose(w, list(range(2, spatial + 2)) + [1, 0])
        outputs = [tf.nn.convolution(xg, wg, strides=strides, padding="VALID",
                                     dilations=dilations)
                   for xg, wg in zip(tf.split(channels_last, group, axis=-1),
                                     tf.split(filters, group, axis=-1))]
        y = outputs[0] if group == 1 else tf.concat(outputs, axis=-1)
        return tf.transpose(y, [0, spatial + 1] + list(range(1, spatial + 1)))

    def visit_convinteger(self, op, network) -> None:
        """ConvInteger: https://onnx.ai/onnx/operators/onnx__ConvInteger.html"""
        def conv_integer(x, w, x_zero=None, w_zero=None):
            return tf.cast(tf.round(self._integer_conv(op, x, w, x_zero, w_zero)), tf.int32)
        self.emit(conv_integer, [self.key(n) for n in op.inputs], op.outputs[0])

    def visit_qlinearconv(self, op, network) -> None:
        """QLinearConv: the integer convolution (plus int32 bias), requantized with
        x_scale·w_scale/y_scale (https://onnx.ai/onnx/operators/onnx__QLinearConv.html)."""
        def qlinear_conv(x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias=None):
            y = self._integer_conv(op, x, w, x_zero, w_zero)
            if bias is not None:
                y = y + tf.reshape(tf.cast(bias, tf.float64), [-1] + [1] * (len(y.shape) - 2))
            w_scale = tf.cast(w_scale, tf.float64)
            if len(w_scale.shape) == 1:   # per output channel
                w_scale = tf.reshape(w_scale, [-1] + [1] * (len(y.shape) - 2))
            scale = tf.cast(x_scale, tf.float64) * w_scale / tf.cast(y_scale, tf.float64)
            target = _tf_dtype(tf.convert_to_tensor(y_zero))
            y = tf.round(y * scale) + tf.cast(y_zero, tf.float64)
            bounds = np.iinfo(target.as_numpy_dtype)
            return tf.cast(tf.clip_by_value(y, float(bounds.min), float(bounds.max)), target)
        self.emit(qlinear_conv, [self.key(n) for n in op.inputs], op.outputs[0])
