"""TensorFlowVisitor methods for the attention, normalization, recurrent (LSTM, GRU, RNN)
and resampling operators of the ONNX operator set (issue 19), mixed into
:class:`deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`: each ``visit_<op>`` uses the
visitor's own helpers and follows https://onnx.ai/onnx/operators/.

Every closure is built from differentiable TensorFlow operations, so that GradientTape
differentiates through them (the recurrent operators unroll their time loop). NumPy only
computes constants known when the closure runs on static shapes (interpolation matrices,
causal masks).
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import onnx

from deep500.frameworks.tensorflow._tf import tf
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError

# ONNX's TensorProto element types of the softmax_precision / stash_type attributes.
_FLOAT_TYPES = {1: tf.float32, 10: tf.float16, 11: tf.float64, 16: tf.bfloat16}


def _static(value):
    """The value of an operand as a NumPy array, or None if only known at run time."""
    if value is None or isinstance(value, np.ndarray):
        return value
    if isinstance(value, tf.Variable):
        # A float initializer (Resize's scales, roi): its value when the closure runs or
        # is traced (a traced function keeps the value it was traced with).
        with tf.init_scope():
            return value.numpy()
    return tf.get_static_value(value)


def _given(value):
    """An optional operand's NumPy value; None when omitted or empty."""
    value = _static(value)
    return None if value is None or np.size(value) == 0 else np.asarray(value)


def _tensor(x):
    return x if isinstance(x, (tf.Tensor, tf.Variable)) else tf.convert_to_tensor(x)


def _like(value, x):
    """``value`` as a tensor in ``x``'s dtype."""
    value = _tensor(value)
    return value if value.dtype == x.dtype else tf.cast(value, x.dtype)


def _wide(x):
    """``x`` in at least single precision (statistics of half-precision inputs)."""
    return tf.cast(x, tf.float32) if x.dtype in (tf.float16, tf.bfloat16) else x


def _text(value, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


class SequenceOps:
    """Mixin of ``visit_<op>`` methods (see the module docstring). Methods that
    the visitor class defines itself take precedence over these."""

    # -- plumbing ------------------------------------------------------------------
    def _node_error(self, op, message: str, error=ShapeError):
        """An error of node ``op`` (closures raise it at run time, when the visitor's
        current node is another)."""
        return error(f"{self.framework}: node '{op.name}' ({op.op_type}) of network "
                     f"'{self.network.name}': {message}")

    def _emit_node(self, op, fn, static=()) -> None:
        """Emit ``fn`` over every input of ``op`` (omitted ones as None; those indexed
        in ``static`` are read at trace time) producing every output (a tuple when
        several)."""
        keys = [self.static_key(n) if i in static and n else self.key(n)
                for i, n in enumerate(op.inputs)]
        outputs = op.outputs[0] if len(op.outputs) == 1 else list(op.outputs)
        self.emit(fn, keys, outputs)

    # -- activations ---------------------------------------------------------------
    def visit_gelu(self, op, network) -> None:
        """Gelu: https://onnx.ai/onnx/operators/onnx__Gelu.html (exact, or the tanh
        approximation)."""
        approximate = _text(op.attributes.get("approximate"), "none")
        if approximate not in ("none", "tanh"):
            raise self._node_error(op, f"approximate={approximate!r} is not 'none' or 'tanh'",
                                   Deep500Error)
        if approximate == "tanh":
            def gelu(x):   # tf.nn.gelu rounds its constants to float32 in float64 too
                inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
                return 0.5 * x * (1 + tf.tanh(inner))
        else:
            def gelu(x):
                return 0.5 * x * (1 + tf.math.erf(x * (1 / math.sqrt(2))))
        self._emit_node(op, gelu)

    # -- normalizations ------------------------------------------------------------
    def _stash(self, op):
        """The dtype of stage one of a normalization (``stash_type``, default float)."""
        value = op.attributes.get("stash_type")
        value = 1 if value is None else int(value)
        if value not in _FLOAT_TYPES:
            raise self._node_error(op, f"stash_type={value} is not a float type (1, 10, 11 or "
                                   f"16)", Deep500Error)
        return _FLOAT_TYPES[value]

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
                raise self._node_error(op, f"axis={axis} is out of range for X of rank {rank}")
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
                raise self._node_error(op, f"axis={axis} is out of range for X of rank {rank}")
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
                raise self._node_error(op, f"{c} channels do not split into {groups} groups")
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
            raise self._unsupported("GroupNormalization before opset 21 (per-group scale "
                                    "and bias) is not supported", "export with opset >= 21")
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
            raise self._node_error(op, f"p={p} is not 1 or 2", Deep500Error)

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

    # -- attention -----------------------------------------------------------------
    def visit_rotaryembedding(self, op, network) -> None:
        """RotaryEmbedding (Su et al., https://arxiv.org/abs/2104.09864):
        https://onnx.ai/onnx/operators/onnx__RotaryEmbedding.html"""
        a = op.attributes
        interleaved = bool(a.get("interleaved") or 0)
        heads = int(a.get("num_heads") or 0)
        rotary_dim = int(a.get("rotary_embedding_dim") or 0)

        def rotary(x, cos, sin, position_ids=None):
            four_d = len(x.shape) == 4
            if four_d:          # (batch, heads, sequence, size) -> (batch, sequence, heads, size)
                x = tf.transpose(x, [0, 2, 1, 3])
            else:
                if not heads:
                    raise self._node_error(op, "3-D input needs the attribute num_heads",
                                           Deep500Error)
                b, s, hidden = x.shape
                x = tf.reshape(x, [b, s, heads, hidden // heads])
            size = x.shape[3]
            dim = rotary_dim or size
            rotate, keep = x[..., :dim], x[..., dim:]
            if position_ids is not None:
                cos, sin = tf.gather(cos, position_ids), tf.gather(sin, position_ids)
            cos, sin = _like(cos, x)[:, :, tf.newaxis], _like(sin, x)[:, :, tf.newaxis]
            if cos.shape[-1] != dim // 2:
                raise self._node_error(op, f"the caches' last dimension {cos.shape[-1]} is not "
                                       f"rotary_embedding_dim / 2 = {dim // 2}")
            if interleaved:
                x1, x2 = rotate[..., 0::2], rotate[..., 1::2]
            else:
                x1, x2 = rotate[..., :dim // 2], rotate[..., dim // 2:]
            real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
            if interleaved:
                rotated = tf.reshape(tf.stack([real, imag], -1), tf.shape(rotate))
            else:
                rotated = tf.concat([real, imag], -1)
            y = tf.concat([rotated, keep], -1)
            if four_d:
                return tf.transpose(y, [0, 2, 1, 3])
            return tf.reshape(y, [y.shape[0], y.shape[1], -1])
        self._emit_node(op, rotary)

    def visit_attention(self, op, network) -> None:
        """Attention (opset 23+): https://onnx.ai/onnx/operators/onnx__Attention.html
        (Vaswani et al., https://arxiv.org/abs/1706.03762): 3-D or 4-D Q, K, V; grouped
        key/value heads; past_key/past_value concatenated into present_key/present_value;
        boolean or additive masks, causal and sliding-window masks aligned to the cache
        offset, padding by nonpad_kv_seqlen; scale, softcap, softmax_precision and the
        qk_matmul_output of the chosen stage. A query row that may attend no key gives
        zeros."""
        a = op.attributes
        causal = bool(a.get("is_causal") or 0)
        q_heads, kv_heads = a.get("q_num_heads"), a.get("kv_num_heads")
        mode = int(a.get("qk_matmul_output_mode") or 0)
        scale_attr = a.get("scale")
        cap = float(a.get("softcap") or 0.0)
        precision = a.get("softmax_precision")
        left = int(a["left_window_size"]) if a.get("left_window_size") is not None else -1
        right = int(a["right_window_size"]) if a.get("right_window_size") is not None else -1
        if mode not in (0, 1, 2, 3):
            raise self._node_error(op, f"qk_matmul_output_mode={mode} is not 0, 1, 2 or 3",
                                   Deep500Error)
        if precision is not None and int(precision) not in _FLOAT_TYPES:
            raise self._node_error(op, f"softmax_precision={precision} is not a float type "
                                   f"(1, 10, 11 or 16)", Deep500Error)
        n_out = len(op.outputs)

        def split(x, heads, name):
            b, s, hidden = x.shape
            if not heads:
                raise self._node_error(op, "3-D Q, K and V need the attributes q_num_heads and "
                                       "kv_num_heads", Deep500Error)
            if hidden % heads:
                raise self._node_error(op, f"the hidden size {hidden} of {name} is not a "
                                       f"multiple of its {heads} heads")
            return tf.transpose(tf.reshape(x, [b, s, heads, hidden // heads]), [0, 2, 1, 3])

        def attention(q, k, v, mask=None, past_k=None, past_v=None, nonpad=None):
            three_d = len(q.shape) == 3
            if not len(q.shape) == len(k.shape) == len(v.shape) or len(q.shape) not in (3, 4):
                raise self._node_error(op, f"Q, K and V must all be 3-D or all 4-D, got shapes "
                                       f"{q.shape}, {k.shape} and {v.shape}")
            if three_d:
                q, k, v = split(q, q_heads, "Q"), split(k, kv_heads, "K"), split(v, kv_heads, "V")
            if (past_k is None) != (past_v is None):
                raise self._node_error(op, "past_key and past_value must be given together",
                                       Deep500Error)
            past = 0
            if past_k is not None:
                past = past_k.shape[2]
                k = tf.concat([_like(past_k, k), k], 2)
                v = tf.concat([_like(past_v, v), v], 2)
            present_k, present_v = k, v
            if q.shape[1] % k.shape[1] or q.shape[3] != k.shape[3]:
                raise self._node_error(op, f"Q (as 4-D {q.shape}) and K ({k.shape}) disagree: "
                                       f"Q's heads must be a multiple of K's and the head "
                                       f"sizes must match")
            repeats = q.shape[1] // k.shape[1]
            if repeats > 1:
                k, v = tf.repeat(k, repeats, axis=1), tf.repeat(v, repeats, axis=1)
            dtype = q.dtype
            scale = 1 / math.sqrt(q.shape[3]) if scale_attr is None else float(scale_attr)
            root = tf.constant(math.sqrt(scale), dtype)
            raw = tf.linalg.matmul(q * root, k * root, transpose_b=True)
            capped = raw if cap <= 0 else cap * tf.tanh(raw / cap)
            q_len, kv_len = raw.shape[2], raw.shape[3]
            bias = None
            if mask is not None:
                if mask.dtype == tf.bool:
                    bias = tf.where(mask, tf.constant(0, dtype), tf.constant(-np.inf, dtype))
                else:
                    bias = _like(mask, raw)
                if bias.shape[-1] < kv_len:   # keys beyond the mask are padding
                    pads = [[0, 0]] * (len(bias.shape) - 1) + [[0, kv_len - bias.shape[-1]]]
                    bias = tf.pad(bias, pads, constant_values=-np.inf)
            allowed = None
            if causal or left >= 0 or right >= 0:
                if nonpad is not None and past == 0:
                    offset = tf.reshape(tf.cast(nonpad, tf.int64) - q_len, [-1, 1, 1, 1])
                else:
                    offset = tf.constant(past, tf.int64)
                positions = (offset + tf.range(q_len, dtype=tf.int64)[:, tf.newaxis]
                             - tf.range(kv_len, dtype=tf.int64)[tf.newaxis, :])
                allowed = tf.ones_like(positions, tf.bool)
                if causal:
                    allowed = allowed & (positions >= 0)
                if left >= 0:
                    allowed = allowed & (positions <= left)
                if right >= 0:
                    allowed = allowed & (-positions <= right)
            if nonpad is not None:
                valid = (tf.range(kv_len, dtype=tf.int64)[tf.newaxis, tf.newaxis, tf.newaxis]
                         < tf.reshape(tf.cast(nonpad, tf.int64), [-1, 1, 1, 1]))
                allowed = valid if allowed is None else allowed & valid
            if allowed is not None:
                extra = tf.where(allowed, tf.constant(0, dtype), tf.constant(-np.inf, dtype))
                bias = extra if bias is None else bias + extra
            biased = capped if bias is None else capped + bias
            wide = dtype if precision is None else _FLOAT_TYPES[int(precision)]
            if bias is None:
                probs = tf.cast(tf.nn.softmax(tf.cast(biased, wide), -1), dtype)
            else:
                # Rows with no key allowed give zeros; their scores are replaced before
                # the softmax so that neither it nor its gradient sees -inf - -inf.
                empty = tf.reduce_max(bias, -1, keepdims=True) == -np.inf
                guarded = tf.where(empty, tf.zeros_like(biased), biased)
                probs = tf.cast(tf.nn.softmax(tf.cast(guarded, wide), -1), dtype)
                probs = tf.where(empty, tf.zeros_like(probs), probs)
            y = tf.linalg.matmul(probs, _like(v, probs))
            if three_d:
                b, h, s, size = y.shape
                y = tf.reshape(tf.transpose(y, [0, 2, 1, 3]), [b, s, h * size])
            if n_out == 1:
                return y
            qk = (raw, capped, biased, probs)[mode]
            return (y, present_k, present_v, qk)[:n_out]
        self._emit_node(op, attention)

    def visit_linearattention(self, op, network) -> None:
        """LinearAttention (opset 27): https://onnx.ai/onnx/operators/onnx__LinearAttention.html
        — a recurrent state S (batch, kv_heads, d_k, d_v) updated per time step by the
        ``update_rule``: linear S += kᵀv; gated S = exp(g)·S + kᵀv; delta S += kᵀ·β(v -
        kS) (Schlag et al., https://arxiv.org/abs/2102.11174); gated_delta both (Yang et
        al., https://arxiv.org/abs/2412.06464); output scale·qS per step (query heads
        share key/value heads in groups), then present_state. Unrolled over time in at
        least float32."""
        a = op.attributes
        rule = _text(a.get("update_rule"), "gated_delta")
        if rule not in ("linear", "gated", "delta", "gated_delta"):
            raise self._node_error(op, f"update_rule={rule!r} is not linear, gated, delta "
                                       f"or gated_delta", Deep500Error)
        q_heads, kv_heads = a.get("q_num_heads"), a.get("kv_num_heads")
        if not q_heads or not kv_heads or q_heads % kv_heads:
            raise self._node_error(op, f"q_num_heads ({q_heads}) must be a positive multiple "
                                       f"of kv_num_heads ({kv_heads})", Deep500Error)
        q_heads, kv_heads = int(q_heads), int(kv_heads)
        gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
        given = {name: bool(n) for name, n in zip(("decay", "beta"), list(op.inputs[4:6]) +
                                                  [""] * 2)}
        for name, needed in (("decay", gating), ("beta", delta)):
            if given[name] != needed:
                raise self._node_error(op, f"update_rule={rule!r} "
                                           f"{'requires' if needed else 'forbids'} the input "
                                           f"{name}", Deep500Error)
        scale_attr = a.get("scale")
        n_out = len(op.outputs)

        def heads(x, count):   # (B, T, H·D) -> (B, H, T, D)
            b, t, hd = x.shape
            if hd % count:
                raise self._node_error(op, f"the last axis {hd} of shape {list(x.shape)} is "
                                           f"not a multiple of {count} heads")
            return tf.transpose(tf.reshape(x, [b, t, count, hd // count]), [0, 2, 1, 3])

        def linear_attention(q, k, v, past=None, decay=None, beta=None):
            for name, x in (("query", q), ("key", k), ("value", v)):
                if len(x.shape) != 3:
                    raise self._node_error(op, f"{name} must be 3-D (B, T, H·D), got shape "
                                               f"{list(x.shape)}")
            work = tf.float64 if q.dtype == tf.float64 else tf.float32
            b, t = q.shape[0], q.shape[1]
            q4, k4, v4 = (tf.cast(heads(x, n), work) for x, n in
                          ((q, q_heads), (k, kv_heads), (v, kv_heads)))
            d_k, d_v = q4.shape[3], v4.shape[3]
            if decay is not None:
                if decay.shape[-1] == kv_heads:
                    decay4 = tf.reshape(tf.transpose(decay, [0, 2, 1]), [b, kv_heads, t, 1])
                elif decay.shape[-1] == kv_heads * d_k:
                    decay4 = heads(decay, kv_heads)
                else:
                    raise self._node_error(op, f"decay's last axis {decay.shape[-1]} must be "
                                               f"kv_num_heads ({kv_heads}) or kv_num_heads·d_k "
                                               f"({kv_heads * d_k})")
                decay4 = tf.cast(decay4, work)
            if beta is not None:
                if beta.shape[-1] not in (kv_heads, 1):
                    raise self._node_error(op, f"beta's last axis {beta.shape[-1]} must be "
                                               f"kv_num_heads ({kv_heads}) or 1")
                beta4 = tf.cast(tf.transpose(beta, [0, 2, 1])[..., tf.newaxis], work)
            if past is not None:
                if tuple(past.shape) != (b, kv_heads, d_k, d_v):
                    raise self._node_error(op, f"past_state has shape {list(past.shape)}, "
                                               f"not {[b, kv_heads, d_k, d_v]}")
                state = tf.cast(past, work)
            else:
                state = tf.zeros([b, kv_heads, d_k, d_v], work)
            scale = 1 / math.sqrt(d_k) if not scale_attr else float(scale_attr)
            group = q_heads // kv_heads
            outputs = []
            for i in range(t):
                k_t, v_t = k4[:, :, i], v4[:, :, i]
                if gating:
                    state = state * tf.exp(decay4[:, :, i])[..., tf.newaxis]
                if delta:
                    retrieved = tf.einsum("bhdm,bhd->bhm", state, k_t)
                    v_t = beta4[:, :, i] * (v_t - retrieved)
                state = state + k_t[..., :, tf.newaxis] * v_t[..., tf.newaxis, :]
                read = state if group == 1 else tf.repeat(state, group, axis=1)
                outputs.append(scale * tf.einsum("bhd,bhdm->bhm", q4[:, :, i], read))
            y = tf.reshape(tf.stack(outputs, 1), [b, t, q_heads * d_v])   # (B, T, H, d_v)
            y = tf.cast(y, q.dtype)
            if n_out == 1:
                return y
            return y, tf.cast(state, q.dtype if past is None else past.dtype)
        self._emit_node(op, linear_attention)

    # -- resampling ----------------------------------------------------------------
    def visit_resize(self, op, network) -> None:
        """Resize: https://onnx.ai/onnx/operators/onnx__Resize.html — every mode,
        coordinate_transformation_mode, nearest_mode, exclude_outside, antialias, axes,
        keep_aspect_ratio_policy and extrapolation_value. The interpolation is separable:
        each resized axis is an index (nearest) or an (output, input) weight matrix
        computed once per input shape by the ONNX semantics the reference executor
        implements (``_op_common_resize``), then a gather or a tensordot here."""
        self._resample(op, "Resize")

    def visit_upsample(self, op, network) -> None:
        """Upsample (deprecated for Resize): nearest or linear by ``scales``, Resize's
        asymmetric coordinates and floor rounding:
        https://onnx.ai/onnx/operators/onnx__Upsample.html"""
        self._resample(op, "Upsample")

    def _resample(self, op, op_type: str) -> None:
        from deep500.frameworks.reference.operators.registry import create_operator
        reference = create_operator(op_type, **dict(op.given_attributes))
        extrapolation = float(op.attributes.get("extrapolation_value") or 0.0)
        plans_cache: dict = {}

        def plans_of(x, rest):
            for name, given in zip(op.inputs[1:], rest):
                if given is not None and _static(given) is None:
                    raise self._node_error(op, f"the values of input {name!r} are computed "
                                           f"at run time inside a traced function; use "
                                           f"mode='eager'", UnsupportedError)
            values = [_given(r) for r in rest]
            key = (tuple(x.shape), tuple(None if v is None else (v.dtype.str, v.tobytes())
                                         for v in values))
            if key not in plans_cache:
                shape_only = np.broadcast_to(np.zeros((), np.float32), tuple(x.shape))
                plans_cache[key] = reference._plans_from(shape_only, values)
            return plans_cache[key]

        def resize(x, *rest):
            from deep500.frameworks.reference.operators._op_common_resize import _outside_mask
            plans = plans_of(x, rest)
            integer = not x.dtype.is_floating
            y = tf.cast(x, tf.float64) if integer else _wide(x)
            for plan in plans:
                if plan.index is not None:
                    y = tf.gather(y, plan.index, axis=plan.axis)
                    continue
                moved = tf.tensordot(tf.constant(plan.weights, y.dtype), y,
                                     [[1], [plan.axis]])
                rank = len(y.shape)
                perm = list(range(1, plan.axis + 1)) + [0] + list(range(plan.axis + 1, rank))
                y = tf.transpose(moved, perm)
            if integer:
                y = tf.saturate_cast(tf.round(y), x.dtype)
            else:
                y = tf.cast(y, x.dtype)
            outside = _outside_mask(plans, tuple(y.shape))
            if outside is not None:
                y = tf.where(outside, tf.constant(extrapolation, y.dtype), y)
            return y
        self._emit_node(op, resize, static=(1, 2, 3))

    def visit_affinegrid(self, op, network) -> None:
        """AffineGrid: the sampling grid (N, *size, rank) of affine matrices theta (N,
        rank, rank + 1) over normalised output coordinates in [-1, 1] (pixel centres, or
        corners with align_corners), x (the last axis) first:
        https://onnx.ai/onnx/operators/onnx__AffineGrid.html"""
        align = bool(op.attributes.get("align_corners") or 0)

        def affine_grid(theta, size):
            size = _ints(size, "size", self, op)
            spatial = size[2:]
            rank = len(spatial)
            if rank not in (2, 3) or tuple(theta.shape[1:]) != (rank, rank + 1):
                raise self._node_error(op, f"theta of shape {list(theta.shape)} and size "
                                           f"{size} must be (N, 2, 3) with a 4-D size or "
                                           f"(N, 3, 4) with a 5-D size")
            axes = [np.linspace(-1, 1, n) if align else (2 * np.arange(n) + 1) / n - 1
                    for n in spatial]
            mesh = np.meshgrid(*axes, indexing="ij")          # per spatial axis, *spatial
            base = np.stack(list(mesh[::-1]) + [np.ones(spatial)], -1).reshape(-1, rank + 1)
            grid = tf.einsum("nij,pj->npi", theta, tf.constant(base, theta.dtype))
            return tf.reshape(grid, [-1, *spatial, rank])
        self._emit_node(op, affine_grid, static=(1,))

    def visit_maxunpool(self, op, network) -> None:
        """MaxUnpool: X's values scattered to the flat positions I (from MaxPool's
        Indices) of a zero tensor of the inferred shape, placed at the start of
        ``output_shape`` when given: https://onnx.ai/onnx/operators/onnx__MaxUnpool.html"""
        a = op.attributes
        kernel = list(a["kernel_shape"])

        def max_unpool(x, indices, output_shape=None):
            rank = len(x.shape) - 2
            strides = list(a.get("strides") or [1] * rank)
            pads = list(a.get("pads") or [0] * (2 * rank))
            if len(kernel) != rank or len(strides) != rank or len(pads) != 2 * rank:
                raise self._node_error(op, f"kernel_shape {kernel}, strides {strides} and "
                                           f"pads {pads} do not fit X with {rank} spatial axes")
            inferred = list(x.shape[:2]) + [
                (n - 1) * s - (pads[i] + pads[i + rank]) + k
                for i, (n, s, k) in enumerate(zip(x.shape[2:], strides, kernel))]
            flat = tf.scatter_nd(tf.reshape(tf.cast(indices, tf.int64), [-1, 1]),
                                 tf.reshape(x, [-1]), [math.prod(inferred)])
            y = tf.reshape(flat, inferred)
            if output_shape is None:
                return y
            shape = _ints(output_shape, "output_shape", self, op)
            if len(shape) != len(inferred) or any(o < n for o, n in zip(shape, inferred)):
                raise self._node_error(op, f"output_shape {shape} must have rank "
                                           f"{len(inferred)} and be at least the inferred "
                                           f"shape {inferred} on every axis")
            return tf.pad(y, [[0, o - n] for o, n in zip(shape, inferred)])
        self._emit_node(op, max_unpool, static=(2,))

    def visit_roialign(self, op, network) -> None:
        """RoiAlign (He et al., Mask R-CNN, https://arxiv.org/abs/1703.06870):
        https://onnx.ai/onnx/operators/onnx__RoiAlign.html — per region and output bin,
        bilinear samples on a regular grid (sampling_ratio, or ceil(bin size)), averaged
        (avg) or the largest weighted corner (max, as ONNX's reference). The sample
        positions depend on the regions' values, read when the closure runs (traced:
        at trace time); differentiable in X."""
        a = op.attributes
        mode = _text(a.get("mode"), "avg")
        half_pixel = _text(a.get("coordinate_transformation_mode"), "half_pixel") == \
            "half_pixel"
        out_h, out_w = int(a.get("output_height") or 1), int(a.get("output_width") or 1)
        ratio = int(a.get("sampling_ratio") or 0)
        spatial_scale = float(a["spatial_scale"] if a.get("spatial_scale") is not None
                              else 1.0)
        if mode not in ("avg", "max"):
            raise self._node_error(op, f"mode={mode!r} is not 'avg' or 'max'", Deep500Error)

        def axis_samples(start, length, bins, grid, size):
            """Per (bin, sample): (low, high) indices, (low, high) weights and whether
            the sample lies inside [-1, size]."""
            bin_size = length / bins
            pos = (start + np.arange(bins)[:, None] * bin_size
                   + (np.arange(grid)[None, :] + 0.5) * bin_size / grid)
            inside = (pos >= -1.0) & (pos <= size)
            pos = np.maximum(pos, 0)
            low = np.floor(pos).astype(np.int64)
            edge = low >= size - 1
            low = np.where(edge, size - 1, low)
            high = np.where(edge, size - 1, low + 1)
            pos = np.where(edge, low, pos)
            frac = pos - low
            return (low, high), (1 - frac, frac), inside

        def roi_align(x, rois, batch_indices):
            boxes = _static(rois)
            batches = _static(batch_indices)
            if boxes is None or batches is None:
                raise self._node_error(op, "the values of rois and batch_indices are "
                                           "computed at run time inside a traced function; "
                                           "use mode='eager'", UnsupportedError)
            n, c, height, width = x.shape
            flat = tf.reshape(x, [n, c, height * width])
            results = []
            offset = 0.5 if half_pixel else 0.0
            for box, b in zip(np.asarray(boxes, np.float64).reshape(-1, 4),
                              np.asarray(batches).reshape(-1)):
                x1, y1, x2, y2 = box * spatial_scale - offset
                roi_w, roi_h = x2 - x1, y2 - y1
                if not half_pixel:
                    roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
                grid_h = ratio if ratio > 0 else int(np.ceil(roi_h / out_h))
                grid_w = ratio if ratio > 0 else int(np.ceil(roi_w / out_w))
                count = max(grid_h * grid_w, 1)
                ys, wys, in_y = axis_samples(y1, roi_h, out_h, grid_h, height)
                xs, wxs, in_x = axis_samples(x1, roi_w, out_w, grid_w, width)
                # (out_h, out_w, grid_h, grid_w, 4 corners): flat positions and weights.
                inside = in_y[:, None, :, None] & in_x[None, :, None, :]
                index, weight = [], []
                for yi, wy in zip(ys, wys):
                    for xi, wx in zip(xs, wxs):
                        index.append(yi[:, None, :, None] * width + xi[None, :, None, :])
                        weight.append(np.where(inside, wy[:, None, :, None]
                                               * wx[None, :, None, :], 0.0))
                index = np.where(inside[..., None], np.stack(index, -1), 0)
                weight = np.stack(weight, -1)
                values = tf.gather(flat[int(b)], index.reshape(-1), axis=1)
                values = tf.reshape(values, [c, out_h, out_w, grid_h * grid_w, 4]) * \
                    tf.constant(weight.reshape(out_h, out_w, grid_h * grid_w, 4), x.dtype)
                if mode == "avg":
                    results.append(tf.reduce_sum(values, [3, 4]) / count)
                else:
                    results.append(tf.reduce_max(values, [3, 4]))
            if not results:
                return tf.zeros([0, c, out_h, out_w], x.dtype)
            return tf.stack(results)
        self._emit_node(op, roi_align, static=(1, 2))

    # -- recurrent -----------------------------------------------------------------
    def _recurrent(self, op, gates: int, defaults: tuple, cell) -> None:
        """RNN, GRU and LSTM: https://onnx.ai/onnx/operators/onnx__RNN.html, .../onnx__GRU.html,
        .../onnx__LSTM.html. The time loop is unrolled with TensorFlow operations, so
        GradientTape backpropagates through time. ``cell(xa, h, c, R, Rb, P, fns)``
        returns (h, c) from the step's X-projection ``xa`` (with W's bias)."""
        from deep500.frameworks.reference.operators._op_common_recurrent import (
            DIRECTIONS, parse_activations)
        a = op.attributes
        direction = _text(a.get("direction"), "forward")
        if direction not in DIRECTIONS:
            raise self._node_error(op, f"direction={direction!r} is not one of {DIRECTIONS}",
                                   Deep500Error)
        layout = int(a.get("layout") or 0)
        if layout not in (0, 1):
            raise self._node_error(op, f"layout={layout} must be 0 (sequence first) or 1 (batch "
                                   f"first)", Deep500Error)
        nd = 2 if direction == "bidirectional" else 1
        clip = a.get("clip")
        if clip is not None and clip <= 0:
            raise self._node_error(op, f"clip={clip} must be positive", Deep500Error)
        activations = parse_activations(op.op_type, a.get("activations"),
                                        a.get("activation_alpha"), a.get("activation_beta"),
                                        defaults, nd)
        fns = [[_tf_activation(f.name, f.alpha, f.beta) for f in per] for per in activations]
        n_out = len(op.outputs)
        hidden_attr = a.get("hidden_size")

        def clipped(v):
            return v if clip is None else tf.clip_by_value(v, -clip, clip)

        def run(x, w, r, b=None, lengths=None, h0=None, c0=None, p=None):
            if len(x.shape) != 3:
                raise self._node_error(op, f"X must be 3-D, got shape {x.shape}")
            if layout == 1:
                x = tf.transpose(x, [1, 0, 2])
                h0 = None if h0 is None else tf.transpose(h0, [1, 0, 2])
                c0 = None if c0 is None else tf.transpose(c0, [1, 0, 2])
            seq, batch = x.shape[0], x.shape[1]
            hidden = r.shape[2] if hidden_attr is None else int(hidden_attr)
            if tuple(w.shape) != (nd, gates * hidden, x.shape[2]) or tuple(r.shape) != (
                    nd, gates * hidden, hidden):
                raise self._node_error(op, f"W {list(w.shape)} and R {list(r.shape)} must be "
                                       f"[{nd}, {gates}*{hidden}, {x.shape[2]}] and "
                                       f"[{nd}, {gates}*{hidden}, {hidden}]")
            mask = None
            if lengths is not None:
                lengths = tf.cast(lengths, tf.int64)
                mask = tf.range(seq, dtype=tf.int64)[:, tf.newaxis] < lengths[tf.newaxis, :]
            ys, hs, cs = [], [], []
            for d in range(nd):
                backward = direction == "reverse" or d == 1
                xd = x
                if backward:
                    xd = (tf.reverse(x, [0]) if lengths is None else
                          tf.reverse_sequence(x, lengths, seq_axis=0, batch_axis=1))
                xa = tf.tensordot(xd, _like(w[d], x), [[2], [1]])
                rb = None
                if b is not None:
                    xa = xa + _like(b[d, :gates * hidden], x)
                    rb = _like(b[d, gates * hidden:], x)
                h = (tf.zeros([batch, hidden], x.dtype) if h0 is None else _like(h0[d], x))
                c = (tf.zeros([batch, hidden], x.dtype) if c0 is None else _like(c0[d], x))
                pd = None if p is None else _like(p[d], x)
                outputs = []
                for t in range(seq):
                    h_new, c_new = cell(xa[t], h, c, _like(r[d], x), rb, pd, fns[d], clipped)
                    if mask is None:
                        h, c = h_new, c_new
                        outputs.append(h_new)
                    else:
                        m = mask[t][:, tf.newaxis]
                        h, c = tf.where(m, h_new, h), tf.where(m, c_new, c)
                        outputs.append(tf.where(m, h_new, tf.zeros_like(h_new)))
                y = tf.stack(outputs)
                if backward:
                    y = (tf.reverse(y, [0]) if lengths is None else
                         tf.reverse_sequence(y, lengths, seq_axis=0, batch_axis=1))
                ys.append(y)
                hs.append(h)
                cs.append(c)
            results = [tf.stack(ys, 1), tf.stack(hs), tf.stack(cs)]
            if layout == 1:
                results = [tf.transpose(results[0], [2, 0, 1, 3])] + [
                    tf.transpose(v, [1, 0, 2]) for v in results[1:]]
            return results[0] if n_out == 1 else tuple(results[:n_out])
        self._emit_node(op, run)

    def visit_rnn(self, op, network) -> None:
        """RNN: Ht = f(Xt·Wᵀ + Ht-1·Rᵀ + Wb + Rb)."""
        def cell(xa, h, c, r, rb, p, fns, clipped):
            a = xa + tf.linalg.matmul(h, r, transpose_b=True)
            if rb is not None:
                a = a + rb
            return fns[0](clipped(a)), c
        self._recurrent(op, 1, ("Tanh",), cell)

    def visit_gru(self, op, network) -> None:
        """GRU (gates z, r, h; linear_before_reset applies r after Rh)."""
        linear_before_reset = bool(op.attributes.get("linear_before_reset") or 0)

        def cell(xa, h, c, r, rb, p, fns, clipped):
            f, g = fns
            xz, xr, xh = tf.split(xa, 3, axis=-1)
            rz, rr, rh = tf.split(r, 3, axis=0)
            bz, br, bh = (None, None, None) if rb is None else tf.split(rb, 3)

            def plus(v, bias):
                return v if bias is None else v + bias
            z = f(clipped(xz + plus(tf.linalg.matmul(h, rz, transpose_b=True), bz)))
            reset = f(clipped(xr + plus(tf.linalg.matmul(h, rr, transpose_b=True), br)))
            if linear_before_reset:
                candidate = xh + reset * plus(tf.linalg.matmul(h, rh, transpose_b=True), bh)
            else:
                candidate = xh + plus(tf.linalg.matmul(reset * h, rh, transpose_b=True), bh)
            hh = g(clipped(candidate))
            return (1 - z) * hh + z * h, c
        self._recurrent(op, 3, ("Sigmoid", "Tanh"), cell)

    def visit_lstm(self, op, network) -> None:
        """LSTM (gates i, o, f, c; peepholes P for i, o, f; input_forget couples f to
        1 - i)."""
        input_forget = bool(op.attributes.get("input_forget") or 0)
        if len(op.outputs) > 3:
            raise self._node_error(op, "LSTM has at most 3 outputs", Deep500Error)

        def cell(xa, h, c, r, rb, p, fns, clipped):
            f, g, hf = fns
            a = xa + tf.linalg.matmul(h, r, transpose_b=True)
            if rb is not None:
                a = a + rb
            ai, ao, af, ac = tf.split(a, 4, axis=-1)
            pi, po, pf = (None, None, None) if p is None else tf.split(p, 3)
            i = f(clipped(ai if pi is None else ai + pi * c))
            forget = 1 - i if input_forget else f(clipped(af if pf is None else af + pf * c))
            c_new = forget * c + i * g(clipped(ac))
            o = f(clipped(ao if po is None else ao + po * c_new))
            return o * hf(c_new), c_new
        self._recurrent(op, 4, ("Sigmoid", "Tanh", "Tanh"), cell)


    # -- windows: transposed convolution, Lp pooling ---------------------------------
    def visit_convtranspose(self, op, network) -> None:
        """ConvTranspose: https://onnx.ai/onnx/operators/onnx__ConvTranspose.html (1-D,
        2-D, 3-D; strides, dilations, group, pads, auto_pad, output_padding,
        output_shape). TensorFlow's channels-last transposed convolution computes the
        uncropped output of a zero-dilated filter, one call per group; the ONNX
        geometry (``conv_transpose_geometry``) then crops or zero-extends it."""
        from deep500.utils.onnx_interop.window import conv_transpose_geometry
        a = op.attributes
        w_rank = self.rank(op.inputs[1]) or self.rank(op.inputs[0])
        if w_rank is not None and w_rank - 2 not in (1, 2, 3):
            raise self._unsupported(f"{w_rank - 2}-D transposed convolutions are not "
                                    f"supported (1-D, 2-D and 3-D are)")
        group = int(a.get("group") or 1)

        def conv_transpose(x, w, b=None):   # x channels-last: (N, d..., C)
            spatial = len(x.shape) - 2
            channels = x.shape[-1]
            if len(w.shape) != spatial + 2 or w.shape[0] != channels or channels % group:
                raise self._node_error(op, f"W of shape {list(w.shape)} does not fit X with "
                                       f"{channels} channels, {spatial} spatial axes and "
                                       f"group={group}: W must be (C, M/group, k...)")
            kernel = tuple(w.shape[2:])
            if a.get("kernel_shape") is not None and tuple(a["kernel_shape"]) != kernel:
                raise self._node_error(op, f"kernel_shape={list(a['kernel_shape'])} does not "
                                       f"match W's spatial shape {list(kernel)}")
            auto_pad = _text(a.get("auto_pad"), "NOTSET")
            wanted = a.get("output_shape")
            g = conv_transpose_geometry(op.op_type, x.shape[1:-1], kernel,
                                        strides=a.get("strides"), dilations=a.get("dilations"),
                                        pads=None if wanted else a.get("pads"),
                                        auto_pad="NOTSET" if wanted else auto_pad,
                                        output_padding=a.get("output_padding"))
            if wanted:
                # The spec's implicit padding; an output_shape beyond the uncropped
                # output makes it negative: zeros are appended.
                target = [int(v) for v in wanted][-spatial:]
                totals = [f - t for f, t in zip(g.full, target)]
                begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in totals]
                g = dataclasses.replace(g, pads_begin=tuple(begin), pads_end=tuple(
                    t - b for t, b in zip(totals, begin)), output=tuple(target))
            # (k..., M/group, C): TensorFlow's filter of a transposed convolution.
            filt = _dilate(tf.transpose(_like(w, x), list(range(2, spatial + 2)) + [1, 0]),
                           g.dilations)
            extents = filt.shape[:spatial]
            base = [(n - 1) * s + e for n, s, e in zip(g.input, g.strides, extents)]
            batch = tf.shape(x)[0]
            per_group = w.shape[1]
            xs = tf.split(x, group, axis=-1) if group > 1 else [x]
            fs = tf.split(filt, group, axis=-1) if group > 1 else [filt]
            ys = []
            for xg, fg in zip(xs, fs):
                if spatial == 1:
                    y = tf.nn.conv2d_transpose(
                        xg[:, tf.newaxis], fg[tf.newaxis],
                        tf.stack([batch, 1, base[0], per_group]), [1, 1, g.strides[0], 1],
                        "VALID")[:, 0]
                elif spatial == 2:
                    y = tf.nn.conv2d_transpose(xg, fg, tf.stack([batch, *base, per_group]),
                                               [1, *g.strides, 1], "VALID")
                else:
                    y = tf.nn.conv3d_transpose(xg, fg, tf.stack([batch, *base, per_group]),
                                               [1, *g.strides, 1], "VALID")
                ys.append(y)
            y = tf.concat(ys, -1) if group > 1 else ys[0]
            # base + output_padding = full; then crop pads_begin/pads_end (negative
            # pads add zeros).
            pads = [[0, 0]]
            for n, begin, o in zip(base, g.pads_begin, g.output):
                pads.append([max(0, -begin), max(0, begin + o - n)])
            pads.append([0, 0])
            if any(p != [0, 0] for p in pads):
                y = tf.pad(y, pads)
            y = y[(slice(None),) + tuple(slice(max(begin, 0), max(begin, 0) + o)
                                         for begin, o in zip(g.pads_begin, g.output))]
            return y if b is None else tf.nn.bias_add(y, _like(b, y))
        self._channels_last_op(op, conv_transpose)

    def visit_deformconv(self, op, network) -> None:
        """DeformConv (Dai et al., https://arxiv.org/abs/1703.06211; modulated by a mask,
        Zhu et al., https://arxiv.org/abs/1811.11168), 2-D:
        https://onnx.ai/onnx/operators/onnx__DeformConv.html — every kernel tap reads X
        bilinearly (zero outside) at its position plus a learned offset, per offset
        group, times the mask; then a grouped convolution of these columns.
        Differentiable in X, W, offset, B and mask."""
        a = op.attributes
        group = int(a.get("group") or 1)
        offset_group = int(a.get("offset_group") or 1)

        def deform_conv(x, w, offset, b=None, mask=None):
            if len(x.shape) != 4:
                raise self._node_error(op, f"only 2-D deformable convolutions are "
                                           f"supported; X has shape {list(x.shape)}",
                                       UnsupportedError)
            n, c, height, width = x.shape
            out_c, kh, kw = w.shape[0], w.shape[2], w.shape[3]
            oh, ow = offset.shape[2], offset.shape[3]
            if c != w.shape[1] * group or out_c % group or c % offset_group or \
                    offset.shape[1] != offset_group * kh * kw * 2:
                raise self._node_error(op, f"X {list(x.shape)}, W {list(w.shape)} and offset "
                                           f"{list(offset.shape)} do not fit group={group} "
                                           f"and offset_group={offset_group}")
            strides = list(a.get("strides") or [1, 1])
            dilations = list(a.get("dilations") or [1, 1])
            pads = list(a.get("pads") or [0, 0, 0, 0])
            offset = tf.reshape(_like(offset, x), [n, offset_group, kh, kw, 2, oh, ow])
            base_y = (np.arange(kh)[:, None] * dilations[0] + np.arange(oh)[None, :]
                      * strides[0] - pads[0])                                 # (kh, oh)
            base_x = (np.arange(kw)[:, None] * dilations[1] + np.arange(ow)[None, :]
                      * strides[1] - pads[1])                                 # (kw, ow)
            y = offset[:, :, :, :, 0] + tf.constant(
                base_y[:, None, :, None].astype(x.dtype.as_numpy_dtype))    # (n,g,kh,kw,oh,ow)
            xs = offset[:, :, :, :, 1] + tf.constant(
                base_x[None, :, None, :].astype(x.dtype.as_numpy_dtype))
            y0, x0 = tf.stop_gradient(tf.floor(y)), tf.stop_gradient(tf.floor(xs))
            ly, lx = y - y0, xs - x0
            grouped = tf.reshape(x, [n, offset_group, c // offset_group, height * width])
            columns = None
            for dy, wy in ((0, 1 - ly), (1, ly)):
                for dx, wx in ((0, 1 - lx), (1, lx)):
                    yc, xc = y0 + dy, x0 + dx
                    valid = (yc >= 0) & (yc <= height - 1) & (xc >= 0) & (xc <= width - 1)
                    index = tf.cast(tf.clip_by_value(yc, 0, height - 1) * width
                                    + tf.clip_by_value(xc, 0, width - 1), tf.int32)
                    values = tf.gather(grouped, tf.reshape(index, [n, offset_group, -1]),
                                       axis=3, batch_dims=2)          # (n, g, c/g, L)
                    values = tf.reshape(values, [n, offset_group, c // offset_group, kh, kw,
                                                 oh, ow])
                    weight = tf.where(valid, wy * wx, tf.zeros_like(wy))
                    term = values * weight[:, :, tf.newaxis]
                    columns = term if columns is None else columns + term
            if mask is not None:
                columns = columns * tf.reshape(_like(mask, x), [n, offset_group, 1, kh, kw,
                                                                oh, ow])
            columns = tf.reshape(columns, [n, group, c // group, kh, kw, oh, ow])
            filters = tf.reshape(_like(w, x), [group, out_c // group, c // group, kh, kw])
            y_out = tf.reshape(tf.einsum("ngckluv,gockl->ngouv", columns, filters),
                               [n, out_c, oh, ow])
            return y_out if b is None else y_out + tf.reshape(_like(b, x), [1, -1, 1, 1])
        self._emit_node(op, deform_conv)

    def visit_lppool(self, op, network) -> None:
        """LpPool: (Σ |x|^p over each window)^(1/p), zero padding:
        https://onnx.ai/onnx/operators/onnx__LpPool.html (strides, dilations, pads,
        auto_pad, ceil_mode). Windows are sums of strided slices, one per kernel tap."""
        from deep500.utils.onnx_interop.window import window_geometry
        a = op.attributes
        p = float(a["p"] if a.get("p") is not None else 2)
        kernel = list(a["kernel_shape"])

        def lp_pool(x):
            spatial = len(x.shape) - 2
            if spatial != len(kernel):
                raise self._node_error(op, f"kernel_shape {kernel} has {len(kernel)} entries "
                                       f"but X has {spatial} spatial axes")
            g = window_geometry(op.op_type, x.shape[2:], kernel, strides=a.get("strides"),
                                dilations=a.get("dilations"), pads=a.get("pads"),
                                auto_pad=_text(a.get("auto_pad"), "NOTSET"),
                                ceil_mode=bool(a.get("ceil_mode") or 0))
            powered = tf.abs(x) if p == 1 else (tf.square(x) if p == 2 else
                                                tf.pow(tf.abs(x), p))
            padded = tf.pad(powered, [[0, 0], [0, 0]] + [
                [b, e + more] for b, e, more in zip(g.pads_begin, g.pads_end, g.overhang)])
            total = None
            for taps in np.ndindex(*g.kernel):
                index = (slice(None), slice(None)) + tuple(
                    slice(k * d, k * d + (o - 1) * s + 1, s)
                    for k, d, o, s in zip(taps, g.dilations, g.output, g.strides))
                total = padded[index] if total is None else total + padded[index]
            if p == 1:
                return total
            return tf.sqrt(total) if p == 2 else tf.pow(total, 1 / p)
        self._emit_node(op, lp_pool)


    def visit_col2im(self, op, network) -> None:
        """Col2Im: column blocks (N, C·∏block_shape, L) summed back into an image (N, C,
        *image_shape) where they overlap: https://onnx.ai/onnx/operators/onnx__Col2Im.html
        (strides, dilations, pads). A segment sum over the flat padded image, whose
        indices are computed once per shape."""
        from deep500.utils.onnx_interop.window import window_geometry
        a = op.attributes

        def col2im(cols, image_shape, block_shape):
            image, block = _ints(image_shape, "image_shape", self, op), _ints(block_shape,
                                                                          "block_shape", self,
                                                                          op)
            if len(image) != len(block) or not image:
                raise self._node_error(op, f"image_shape {image} and block_shape {block} must "
                                       f"have the same, non-zero length")
            g = window_geometry(op.op_type, image, block, strides=a.get("strides"),
                                dilations=a.get("dilations"), pads=a.get("pads"))
            taps, blocks = math.prod(block), math.prod(g.output)
            if len(cols.shape) != 3 or cols.shape[1] % taps or cols.shape[2] != blocks:
                raise self._node_error(op, f"input of shape {list(cols.shape)} must be (N, "
                                       f"C·{taps}, {blocks}) for image_shape {image}, "
                                       f"block_shape {block} and these strides, dilations "
                                       f"and pads")
            padded = [n + b + e for n, b, e in zip(image, g.pads_begin, g.pads_end)]
            # Flat padded-image index of (tap, block): Σ (k·d + o·s) · row stride.
            index = np.zeros(tuple(block) + tuple(g.output), np.int64)
            stride = 1
            for axis in reversed(range(len(image))):
                k = np.arange(block[axis]) * g.dilations[axis]
                o = np.arange(g.output[axis]) * g.strides[axis]
                view_k = [1] * (2 * len(image))
                view_k[axis] = -1
                view_o = [1] * (2 * len(image))
                view_o[len(image) + axis] = -1
                index = index + (k.reshape(view_k) + o.reshape(view_o)) * stride
                stride *= padded[axis]
            batch, channels = tf.shape(cols)[0], cols.shape[1] // taps
            data = tf.transpose(tf.reshape(cols, [batch, channels, taps * blocks]), [2, 0, 1])
            summed = tf.math.unsorted_segment_sum(data, index.reshape(-1), stride)
            y = tf.reshape(tf.transpose(summed, [1, 2, 0]), tf.concat(
                [[batch, channels], padded], 0))
            return y[(slice(None), slice(None)) + tuple(
                slice(b, b + n) for b, n in zip(g.pads_begin, image))]
        self._emit_node(op, col2im, static=(1, 2))

    def visit_centercroppad(self, op, network) -> None:
        """CenterCropPad: https://onnx.ai/onnx/operators/onnx__CenterCropPad.html (a crop
        drops ⌊d/2⌋ elements at the start, a pad adds ⌊d/2⌋ zeros there)."""
        axes_attr = op.attributes.get("axes")

        def center_crop_pad(x, shape):
            rank = len(x.shape)
            target = _ints(shape, "shape", self, op)
            axes = list(range(rank)) if axes_attr is None else [int(v) for v in axes_attr]
            if any(not -rank <= v < rank for v in axes) or len(target) != len(axes):
                raise self._node_error(op, f"axes {axes} must lie in [{-rank}, {rank - 1}] and "
                                       f"shape {target} give one size per axis")
            crop, pads = [slice(None)] * rank, [[0, 0]] * rank
            for axis, size in zip([v % rank for v in axes], target):
                length = x.shape[axis]
                if size < length:
                    start = (length - size) // 2
                    crop[axis] = slice(start, start + size)
                elif size > length:
                    start = (size - length) // 2
                    pads[axis] = [start, size - length - start]
            y = x[tuple(crop)]
            return tf.pad(y, pads) if any(p != [0, 0] for p in pads) else y
        self._emit_node(op, center_crop_pad, static=(1,))

    def visit_gridsample(self, op, network) -> None:
        """GridSample: https://onnx.ai/onnx/operators/onnx__GridSample.html — nearest,
        (multi-)linear or (multi-)cubic (Keys, a = -0.75) sampling of X (N, C, *spatial)
        at grid (N, *out, rank) (coordinates x, y[, z] in [-1, 1]), padding zeros, border
        or reflection, align_corners; differentiable in X and (linear, cubic) grid."""
        a = op.attributes
        names = {"bilinear": "linear", "bicubic": "cubic"}
        mode = _text(a.get("mode"), "linear")
        mode = names.get(mode, mode)
        padding = _text(a.get("padding_mode"), "zeros")
        align = bool(a.get("align_corners") or 0)
        if mode not in ("nearest", "linear", "cubic"):
            raise self._node_error(op, f"mode={mode!r} is not nearest, linear or cubic",
                                   Deep500Error)
        if padding not in ("zeros", "border", "reflection"):
            raise self._node_error(op, f"padding_mode={padding!r} is not zeros, border or "
                                   f"reflection", Deep500Error)

        def grid_sample(x, grid):
            rank = len(x.shape) - 2
            if len(grid.shape) != rank + 2 or grid.shape[-1] != rank:
                raise self._node_error(op, f"grid of shape {list(grid.shape)} does not fit X of "
                                       f"shape {list(x.shape)}: it must be (N, *out, {rank})")
            work = tf.float64 if x.dtype == tf.float64 else tf.float32
            g_all = tf.cast(grid, work)
            per_axis = []
            for axis in range(rank):
                size = x.shape[2 + axis]
                g = g_all[..., rank - 1 - axis]
                pos = (g + 1) * (size - 1) / 2 if align else ((g + 1) * size - 1) / 2
                low, high = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
                if mode == "nearest":
                    pos = tf.round(pos)
                if padding == "border":
                    pos = tf.clip_by_value(pos, 0.0, size - 1.0)
                elif padding == "reflection":
                    pos = _reflect(pos, low, high)
                if mode == "nearest":
                    offsets, base = [0], tf.stop_gradient(tf.math.floor(pos))
                    weights = [tf.ones_like(pos)]
                else:
                    base = tf.stop_gradient(tf.math.floor(pos))
                    t = pos - base
                    if mode == "linear":
                        offsets, weights = [0, 1], [1 - t, t]
                    else:
                        offsets = [-1, 0, 1, 2]
                        weights = [_keys(t + 1), _keys(t), _keys(1 - t), _keys(2 - t)]
                taps = []
                for offset, w in zip(offsets, weights):
                    index = base + offset
                    if padding == "zeros":
                        valid = (index >= 0) & (index < size)
                        w = tf.where(valid, w, tf.zeros_like(w))
                        index = tf.clip_by_value(index, 0, size - 1)
                    elif padding == "border":
                        index = tf.clip_by_value(index, 0, size - 1)
                    else:
                        index = _reflect(index, low, high)
                    taps.append((tf.cast(index, tf.int32), w))
                per_axis.append(taps)
            channels_last = tf.transpose(x, [0] + list(range(2, rank + 2)) + [1])
            y = None
            for combo in itertools.product(*per_axis):
                weight = combo[0][1]
                for _, w in combo[1:]:
                    weight = weight * w
                index = tf.stack([i for i, _ in combo], -1)
                values = tf.gather_nd(channels_last, index, batch_dims=1)   # (N, *out, C)
                term = tf.cast(weight, values.dtype)[..., tf.newaxis] * values
                y = term if y is None else y + term
            return tf.transpose(y, [0, rank + 1] + list(range(1, rank + 1)))
        self._emit_node(op, grid_sample)


def _tf_activation(name: str, alpha, beta):
    """The TensorFlow form of a recurrent cell's activation function (ONNX's list in
    https://onnx.ai/onnx/operators/onnx__LSTM.html)."""
    name = name.lower()
    if name == "relu":
        return tf.nn.relu
    if name == "tanh":
        return tf.tanh
    if name == "sigmoid":
        return tf.sigmoid
    if name == "affine":
        return lambda x: alpha * x + beta
    if name == "leakyrelu":
        return lambda x: tf.where(x >= 0, x, alpha * x)
    if name == "thresholdedrelu":
        return lambda x: tf.where(x > alpha, x, tf.zeros_like(x))
    if name == "scaledtanh":
        return lambda x: alpha * tf.tanh(beta * x)
    if name == "hardsigmoid":
        return lambda x: tf.clip_by_value(alpha * x + beta, 0, 1)
    if name == "elu":
        return lambda x: tf.where(x >= 0, x, alpha * tf.math.expm1(tf.minimum(x, 0)))
    if name == "softsign":
        return tf.nn.softsign
    if name == "softplus":
        return tf.math.softplus
    raise AssertionError(name)   # parse_activations has rejected other names


def _dilate(w, dilations):
    """A (k1, ..., kn, ...) filter with dilation - 1 zeros between its taps along each
    of its first axes, so that an undilated operation computes the dilated one."""
    for axis, rate in enumerate(dilations):
        if rate == 1:
            continue
        taps = w.shape[axis]
        spaced = tf.concat([tf.expand_dims(w, axis + 1)] + [
            tf.zeros_like(tf.expand_dims(w, axis + 1))] * (rate - 1), axis + 1)
        shape = list(w.shape)
        shape[axis] = taps * rate
        w = tf.reshape(spaced, shape)[(slice(None),) * axis + (slice(0, rate * (taps - 1) + 1),)]
    return w


def _ints(value, name: str, visitor, op) -> list:
    """A shape-like operand's values, known when the closure runs."""
    static = _static(value)
    if static is None:
        raise visitor._node_error(op, f"the values of {name} are computed at run time "
                                      f"inside a traced function; use mode='eager'",
                                  UnsupportedError)
    return [int(v) for v in np.reshape(static, -1)]


def _keys(d, a: float = -0.75):
    """The cubic convolution kernel of Keys (1981) at distances d."""
    d = tf.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = (((d - 5) * d + 8) * d - 4) * a
    return tf.where(d <= 1, near, tf.where(d < 2, far, tf.zeros_like(d)))


def _reflect(x, low: float, high: float):
    """x reflected at the borders until it lies in [low, high] (GridSample's
    reflection padding); differentiable in x."""
    span = high - low
    below, above = x < low, x > high
    distance = tf.where(below, low - x, tf.where(above, x - high, tf.zeros_like(x)))
    flips = tf.stop_gradient(tf.math.floor(distance / span)) if span > 0 else \
        tf.zeros_like(distance)
    rest = distance - flips * span
    even = tf.math.floormod(flips, 2) == 0
    from_low = tf.where(even, low + rest, high - rest)
    from_high = tf.where(even, high - rest, low + rest)
    return tf.where(below, from_low, tf.where(above, from_high, x))
