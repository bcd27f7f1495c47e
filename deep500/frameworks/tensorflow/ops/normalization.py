"""TensorFlowVisitor: the normalization family (``deep500/frameworks/families.py``),
normalization layers: https://onnx.ai/onnx/operators/. BatchNormalization computes in
channels-last; the others standardise in the ``stash_type`` precision, or at least in
float32 for half-precision inputs.
"""
from __future__ import annotations

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._values import FLOAT_TYPES, _like, _tensor, _wide
from deep500.utils.errors import Deep500Error, ShapeError


class NormalizationOps:
    """``visit_<op>`` of the normalization family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def _stash(self, op):
        """The dtype of stage one of a normalization (``stash_type``, default float)."""
        value = op.attributes.get("stash_type")
        value = 1 if value is None else int(value)
        if value not in FLOAT_TYPES:
            raise self.node_error(op, f"stash_type={value} is not a float type (1, 10, 11 "
                                      f"or 16)", Deep500Error)
        return FLOAT_TYPES[value]

    def visit_batchnormalization(self, op, network) -> None:
        """BatchNormalization: https://onnx.ai/onnx/operators/onnx__BatchNormalization.html
        (inference: the given statistics; training_mode=1: the batch's population
        statistics, and running statistics as outputs)."""
        a = op.attributes
        eps = float(a["epsilon"])
        momentum = float(a.get("momentum") if a.get("momentum") is not None else 0.9)
        training = bool(a.get("training_mode") or 0)
        extra_outputs = [o for o in op.outputs[1:] if o]

        def inference(x, scale, b, mean, var):
            # Channels are the last axis here; tf.nn.batch_normalization broadcasts.
            return tf.nn.batch_normalization(x, _like(mean, x), _like(var, x), _like(b, x),
                                             _like(scale, x), eps)

        def train(x, scale, b, mean, var):
            batch_mean, batch_var = tf.nn.moments(x, list(range(len(x.shape) - 1)))
            y = tf.nn.batch_normalization(x, batch_mean, batch_var, _like(b, x),
                                          _like(scale, x), eps)
            running_mean = mean * momentum + _like(batch_mean, mean) * (1 - momentum)
            running_var = var * momentum + _like(batch_var, var) * (1 - momentum)
            return y, running_mean, running_var

        if training:
            self._channels_last_op(op, train, 3)
        else:
            if extra_outputs:
                raise self.node_error(op, "running-statistic outputs need training_mode=1")
            self._channels_last_op(op, inference)

    def visit_layernormalization(self, op, network) -> None:
        """LayerNormalization: https://onnx.ai/onnx/operators/onnx__LayerNormalization.html
        (stage one, the standardisation over axes [axis, rank), in the ``stash_type``
        precision; outputs Y, and Mean and InvStdDev in the stash type)."""
        a = op.attributes
        axis = int(a["axis"] if a.get("axis") is not None else -1)
        eps = float(a["epsilon"] if a.get("epsilon") is not None else 1e-5)
        stash = self._stash(op)
        n_out = len(op.outputs)

        def layer_norm(x, scale, b=None):
            rank = len(x.shape)
            if not -rank <= axis < rank:
                raise self.node_error(op, f"axis={axis} is out of range for X of rank {rank}",
                                      ShapeError)
            axes = list(range(axis % rank, rank))
            xs = tf.cast(x, stash)
            mean = tf.reduce_mean(xs, axes, keepdims=True)
            centred = xs - mean
            inv_std = tf.math.rsqrt(tf.reduce_mean(centred * centred, axes, keepdims=True)
                                    + tf.constant(eps, stash))
            y = tf.cast(centred * inv_std, x.dtype) * _like(scale, x)
            if b is not None:
                y = y + _like(b, x)
            return (y, mean, inv_std)[:n_out] if n_out > 1 else y
        self._emit_node(op, layer_norm)

    def visit_rmsnormalization(self, op, network) -> None:
        """RMSNormalization (Zhang & Sennrich, https://arxiv.org/abs/1910.07467):
        https://onnx.ai/onnx/operators/onnx__RMSNormalization.html — x / sqrt(mean(x²,
        axes [axis, rank)) + epsilon) in the ``stash_type`` precision, times scale (the
        output has scale's type)."""
        a = op.attributes
        axis = int(a["axis"] if a.get("axis") is not None else -1)
        eps = float(a["epsilon"] if a.get("epsilon") is not None else 1e-5)
        stash = self._stash(op)

        def rms_norm(x, scale):
            rank = len(x.shape)
            if not -rank <= axis < rank:
                raise self.node_error(op, f"axis={axis} is out of range for X of rank {rank}",
                                      ShapeError)
            xs = tf.cast(x, stash)
            inv = tf.math.rsqrt(tf.reduce_mean(xs * xs, list(range(axis % rank, rank)),
                                               keepdims=True) + tf.constant(eps, stash))
            scale = _tensor(scale)
            return tf.cast(tf.cast(xs * inv, x.dtype), scale.dtype) * scale
        self._emit_node(op, rms_norm)

    def _per_channel_norm(self, op, groups_of, eps: float, stash=None) -> None:
        """Standardise x (N, C, ...) over groups of channels and the spatial axes (in
        ``stash``, default at least float32), then apply a per-channel scale and bias
        (GroupNormalization, InstanceNormalization)."""
        def norm(x, scale, b):
            shape = tf.shape(x)
            c = x.shape[1]
            groups = groups_of(c)
            if c is not None and c % groups:
                raise self.node_error(op, f"{c} channels do not split into {groups} groups",
                                      ShapeError)
            xs = _wide(x) if stash is None else tf.cast(x, stash)
            grouped = tf.reshape(xs, tf.stack([shape[0], groups, -1]))
            mean, var = tf.nn.moments(grouped, [2], keepdims=True)
            y = (grouped - mean) * tf.math.rsqrt(var + tf.constant(eps, xs.dtype))
            y = tf.cast(tf.reshape(y, shape), x.dtype)
            view = [1, -1] + [1] * (len(x.shape) - 2)
            return y * tf.reshape(_like(scale, x), view) + tf.reshape(_like(b, x), view)
        self._emit_node(op, norm)

    def visit_groupnormalization(self, op, network) -> None:
        """GroupNormalization (opset 21: per-channel scale and bias; statistics in the
        ``stash_type`` precision): https://onnx.ai/onnx/operators/onnx__GroupNormalization.html"""
        a = op.attributes
        groups = int(a["num_groups"])
        if op.original_version < 21:
            raise self.node_error(op, "GroupNormalization before opset 21 (per-group scale "
                                      "and bias) is not supported; export with opset >= 21")
        eps = a.get("epsilon")
        self._per_channel_norm(op, lambda c: groups, float(1e-5 if eps is None else eps),
                               self._stash(op))

    def visit_instancenormalization(self, op, network) -> None:
        """InstanceNormalization: https://onnx.ai/onnx/operators/onnx__InstanceNormalization.html"""
        eps = op.attributes.get("epsilon")
        self._per_channel_norm(op, lambda c: c, float(1e-5 if eps is None else eps))

    def visit_meanvariancenormalization(self, op, network) -> None:
        """MeanVarianceNormalization: (x - mean) / sqrt(var) over ``axes`` (default
        N, H, W): https://onnx.ai/onnx/operators/onnx__MeanVarianceNormalization.html"""
        axes = op.attributes.get("axes")
        axes = [0, 2, 3] if axes is None else [int(v) for v in axes]

        def mvn(x):
            xw = _wide(x)
            mean, var = tf.nn.moments(xw, [v % len(x.shape) for v in axes], keepdims=True)
            # onnx's function body: (x - mean) / (sqrt(var) + 1e-9)
            return tf.cast((xw - mean) / (tf.sqrt(var) + tf.constant(1e-9, xw.dtype)),
                           x.dtype)
        self._emit_node(op, mvn)

    def visit_lpnormalization(self, op, network) -> None:
        """LpNormalization: x / ||x||_p along ``axis`` (p = 1 or 2):
        https://onnx.ai/onnx/operators/onnx__LpNormalization.html"""
        a = op.attributes
        axis = int(a["axis"] if a.get("axis") is not None else -1)
        p = int(a["p"] if a.get("p") is not None else 2)
        if p not in (1, 2):
            raise self.node_error(op, f"p={p} is not 1 or 2", Deep500Error)

        def lp_norm(x):
            if p == 1:
                norm = tf.reduce_sum(tf.abs(x), axis, keepdims=True)
            else:
                norm = tf.sqrt(tf.reduce_sum(x * x, axis, keepdims=True))
            # A zero vector stays zero (no 0/0); the guard keeps its gradient finite.
            safe = tf.where(norm == 0, tf.ones_like(norm), norm)
            return tf.where(norm == 0, tf.zeros_like(x), x / safe)
        self._emit_node(op, lp_norm)

    def visit_lrn(self, op, network) -> None:
        """LRN: x / (bias + alpha/size · Σ x² over ``size`` neighbouring channels)^beta:
        https://onnx.ai/onnx/operators/onnx__LRN.html"""
        a = op.attributes
        size = int(a["size"])
        alpha = float(a["alpha"] if a.get("alpha") is not None else 1e-4)
        beta = float(a["beta"] if a.get("beta") is not None else 0.75)
        bias = float(a["bias"] if a.get("bias") is not None else 1.0)
        before, after = (size - 1) // 2, size // 2   # floor and ceil of (size - 1) / 2

        def lrn(x):
            squares = tf.square(x)
            padded = tf.pad(squares, [[0, 0], [before, after]] + [[0, 0]] * (len(x.shape) - 2))
            channels = x.shape[1]
            total = tf.add_n([padded[:, i:i + channels] for i in range(size)])
            return x / tf.pow(bias + (alpha / size) * total, beta)
        self._emit_node(op, lrn)
