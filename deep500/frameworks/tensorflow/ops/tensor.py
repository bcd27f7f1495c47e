"""TensorFlowVisitor: the tensor family (``deep500/frameworks/families.py``), creating
tensors and changing their element type: https://onnx.ai/onnx/operators/. Constants stay
NumPy unless floating, so that shape arithmetic on them stays static.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
import onnx.numpy_helper

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _attr, _text
from deep500.frameworks.tensorflow.ops._carried_casts import cast_to_carried, is_carried
from deep500.frameworks.tensorflow.ops._values import (_ints, _is_floating, _is_np,
                                                       _onnx_to_np_dtype, _tf_dtype,
                                                       tf_supports_dtype)


class TensorOps:
    """``visit_<op>`` of the tensor family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def visit_identity(self, op, network) -> None:
        """Identity: the input, in its layout."""
        self._same_layout(op, lambda x: x)

    def visit_cast(self, op, network) -> None:
        """Cast to ``to`` (https://onnx.ai/onnx/operators/onnx__Cast.html); to a type
        TensorFlow carries, rounded and saturated by ONNX's rules
        (``ops/_carried_casts.py``)."""
        target = _onnx_to_np_dtype(int(op.attributes["to"]))
        if is_carried(target):
            self._cast_to_carried(op, target)
            return
        source = self.network.dtypes.get(op.inputs[0])
        for dtype in (target, source):
            if dtype is not None and not tf_supports_dtype(dtype):
                raise self.node_error(op, f"TensorFlow cannot cast {np.dtype(dtype).name} "
                                          f"tensors")
        tf_target = tf.as_dtype(target)

        def cast(x):
            if isinstance(x, np.ndarray):
                return x.astype(target)
            return x if x.dtype == tf_target else tf.cast(x, tf_target)
        self._same_layout(op, cast)

    def _cast_to_carried(self, op, target) -> None:
        saturate = bool(_attr(op, "saturate", 1))
        round_mode = _text(op.attributes.get("round_mode"), "up")
        self._same_layout(op, lambda x, *_: cast_to_carried(x, target, saturate, round_mode))

    def visit_castlike(self, op, network) -> None:
        """CastLike: cast the input to the element type of ``target_type`` (its declared
        type where TensorFlow carries it in a wider one)."""
        target = self.network.carried_types.get(op.inputs[1])
        if is_carried(target):
            self._cast_to_carried(op, target)
            return

        def cast_like(x, like):
            if isinstance(x, np.ndarray) and isinstance(like, np.ndarray):
                return x.astype(like.dtype)
            return tf.cast(x, _tf_dtype(like))
        self.emit(cast_like, [self.key(n) for n in op.inputs], op.outputs[0],
                  rank=self.rank(op.inputs[0]))

    def visit_constant(self, op, network) -> None:
        """Constant: its value, NumPy unless floating (then a TensorFlow constant). The
        parser made value_float(s)/value_int(s) a ``value`` tensor."""
        if op.attributes.get("value") is None:
            raise self.node_error(op, "only numeric dense constants are supported")
        value = onnx.numpy_helper.to_array(op.attributes["value"])
        value = tf.constant(value) if _is_floating(value.dtype) else np.asarray(value)
        self.emit(lambda: value, [], op.outputs[0], rank=len(value.shape))

    def visit_constantofshape(self, op, network) -> None:
        """ConstantOfShape: a tensor of the given shape filled with ``value``'s one
        element (default float32 zero)."""
        given = op.attributes.get("value")
        fill = (onnx.numpy_helper.to_array(given).reshape(-1)[0] if given is not None
                else np.float32(0))

        def constant_of_shape(shape):
            dims = _ints(shape)
            if dims is not None and math.prod(dims) <= 4096:
                return np.full(dims, fill)
            return tf.fill(tf.cast(shape, tf.int64), tf.constant(fill))
        self.emit(constant_of_shape, [self.key(op.inputs[0])], op.outputs[0])

    def visit_range(self, op, network) -> None:
        """Range: start, start + delta, ... below (above, if delta < 0) limit."""
        def range_(start, limit, delta):
            # The spec's operands are scalars; one-element tensors (ONNX's own expanded
            # AffineGrid passes (1,)-shaped ones, as onnxruntime accepts) are read as such.
            if _is_np(start, limit, delta):
                start, limit, delta = (np.reshape(v, ()) for v in (start, limit, delta))
                return np.arange(start, limit, delta, dtype=start.dtype)
            return tf.range(*(tf.reshape(v, []) for v in (start, limit, delta)))
        self.emit(range_, [self.key(n) for n in op.inputs], op.outputs[0], rank=1)

    def visit_eyelike(self, op, network) -> None:
        """EyeLike: ones on diagonal k of a matrix shaped as the input."""
        k = int(_attr(op, "k", 0))
        given = op.attributes.get("dtype")
        target = None if given is None else tf.as_dtype(_onnx_to_np_dtype(int(given)))

        def eye_like(x):
            x = tf.convert_to_tensor(x)
            dims = tf.shape(x, out_type=tf.int64)
            diagonal = tf.equal(tf.range(dims[1])[None, :] - tf.range(dims[0])[:, None], k)
            return tf.cast(diagonal, target or _tf_dtype(x))
        self.emit(eye_like, [self.key(op.inputs[0])], op.outputs[0], rank=2)

    def visit_bitcast(self, op, network) -> None:
        """BitCast: the input's bits read as element type ``to`` of the same width
        (https://onnx.ai/onnx/operators/onnx__BitCast.html)."""
        target = _onnx_to_np_dtype(int(op.attributes["to"]))
        source = self.network.dtypes.get(op.inputs[0])
        if source is not None and np.dtype(source).itemsize != target.itemsize:
            raise self.node_error(op, f"BitCast from {np.dtype(source).name} to {target.name} "
                                      f"changes the element width; cast to a type of "
                                      f"{np.dtype(source).itemsize * 8} bits")
        tf_target = tf.as_dtype(target)

        def bit_cast(x):
            x = tf.convert_to_tensor(x)
            if _tf_dtype(x) == tf_target:
                return x
            if tf_target == tf.bool:      # a byte of 0 or 1
                return tf.not_equal(x, 0)
            if _tf_dtype(x) == tf.bool:
                return tf.bitcast(tf.cast(x, tf.uint8), tf_target)
            return tf.bitcast(x, tf_target)
        self._unary(op, bit_cast)
