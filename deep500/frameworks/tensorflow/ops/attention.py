"""TensorFlowVisitor: the attention family (``deep500/frameworks/families.py``),
attention and positional encodings: https://onnx.ai/onnx/operators/onnx__Attention.html,
.../onnx__LinearAttention.html, .../onnx__RotaryEmbedding.html. Built from differentiable
TensorFlow operations; NumPy only computes masks known from static shapes.
"""
from __future__ import annotations

import math

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _text
from deep500.frameworks.tensorflow.ops._body import Body
from deep500.frameworks.tensorflow.ops._values import FLOAT_TYPES, _like
from deep500.utils.errors import Deep500Error, ShapeError


class AttentionOps:
    """``visit_<op>`` of the attention family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

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
                    raise self.node_error(op, "3-D input needs the attribute num_heads",
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
                raise self.node_error(op, f"the caches' last dimension {cos.shape[-1]} is not "
                                      f"rotary_embedding_dim / 2 = {dim // 2}", ShapeError)
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
            raise self.node_error(op, f"qk_matmul_output_mode={mode} is not 0, 1, 2 or 3",
                                  Deep500Error)
        if precision is not None and int(precision) not in FLOAT_TYPES:
            raise self.node_error(op, f"softmax_precision={precision} is not a float type "
                                  f"(1, 10, 11 or 16)", Deep500Error)
        n_out = len(op.outputs)

        def split(x, heads, name):
            b, s, hidden = x.shape
            if not heads:
                raise self.node_error(op, "3-D Q, K and V need the attributes q_num_heads and "
                                      "kv_num_heads", Deep500Error)
            if hidden % heads:
                raise self.node_error(op, f"the hidden size {hidden} of {name} is not a "
                                      f"multiple of its {heads} heads", ShapeError)
            return tf.transpose(tf.reshape(x, [b, s, heads, hidden // heads]), [0, 2, 1, 3])

        def attention(q, k, v, mask=None, past_k=None, past_v=None, nonpad=None):
            three_d = len(q.shape) == 3
            if not len(q.shape) == len(k.shape) == len(v.shape) or len(q.shape) not in (3, 4):
                raise self.node_error(op, f"Q, K and V must all be 3-D or all 4-D, got shapes "
                                      f"{q.shape}, {k.shape} and {v.shape}", ShapeError)
            if three_d:
                q, k, v = split(q, q_heads, "Q"), split(k, kv_heads, "K"), split(v, kv_heads, "V")
            if (past_k is None) != (past_v is None):
                raise self.node_error(op, "past_key and past_value must be given together",
                                      Deep500Error)
            past = 0
            if past_k is not None:
                past = past_k.shape[2]
                k = tf.concat([_like(past_k, k), k], 2)
                v = tf.concat([_like(past_v, v), v], 2)
            present_k, present_v = k, v
            if q.shape[1] % k.shape[1] or q.shape[3] != k.shape[3]:
                raise self.node_error(op, f"Q (as 4-D {q.shape}) and K ({k.shape}) disagree: "
                                      f"Q's heads must be a multiple of K's and the head "
                                      f"sizes must match", ShapeError)
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
            wide = dtype if precision is None else FLOAT_TYPES[int(precision)]
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

    def visit_flexattention(self, op, network) -> None:
        """FlexAttention (domain ai.onnx.preview):
        https://onnx.ai/onnx/operators/onnx_aionnxpreview_FlexAttention.html — scaled
        dot-product attention of rank-4 Q (B, Hq, L, E), K (B, Hkv, S, E), V (B, Hkv, S,
        Ev) whose scores and probabilities the ``score_mod`` and ``prob_mod`` bodies may
        rewrite: Scores = score_mod((Q·Kᵀ)·scale), P = prob_mod(Softmax(Scores)), Y = P·V.
        ``scale`` defaults to 1/√E; query head h reads key/value head h // (Hq/Hkv);
        scores, softmax and bodies run in ``softmax_precision`` (float32 unless the inputs
        are double). A row masked whole (all -inf) gives NaN, as ONNX's Softmax does."""
        bodies = {name: Body(self, op, name) for name in ("score_mod", "prob_mod")
                  if op.subgraphs.get(name) is not None}
        precision = op.attributes.get("softmax_precision")
        if precision is not None and int(precision) not in FLOAT_TYPES:
            raise self.node_error(op, f"softmax_precision={precision} is not a float type "
                                      f"(1, 10, 11 or 16)", Deep500Error)
        scale_attr = op.attributes.get("scale")
        outer = list(op.implicit_inputs)

        def modified(name, value, scope):
            body = bodies.get(name)
            return value if body is None else tf.cast(body([value], scope)[0], value.dtype)

        def flex_attention(q, k, v, *outer_values):
            scope = dict(zip(outer, outer_values))
            if not len(q.shape) == len(k.shape) == len(v.shape) == 4 or \
                    q.shape[1] % k.shape[1] or q.shape[3] != k.shape[3]:
                raise self.node_error(op, f"Q (B, Hq, L, E), K (B, Hkv, S, E), V (B, Hkv, S, "
                                          f"Ev) with Hq a multiple of Hkv; got "
                                          f"{list(q.shape)}, {list(k.shape)}, "
                                          f"{list(v.shape)}", ShapeError)
            work = (FLOAT_TYPES[int(precision)] if precision is not None
                    else tf.float64 if q.dtype == tf.float64 else tf.float32)
            group = q.shape[1] // k.shape[1]
            q_w, k_w, v_w = (tf.cast(x, work) for x in (q, k, v))
            if group > 1:
                k_w, v_w = tf.repeat(k_w, group, axis=1), tf.repeat(v_w, group, axis=1)
            scale = 1 / math.sqrt(q.shape[3]) if scale_attr is None else float(scale_attr)
            scores = tf.linalg.matmul(q_w, k_w, transpose_b=True) * tf.constant(scale, work)
            scores = modified("score_mod", scores, scope)
            probabilities = modified("prob_mod", tf.nn.softmax(scores, -1), scope)
            return tf.cast(tf.linalg.matmul(probabilities, v_w), q.dtype)
        self.emit(flex_attention, [self.key(n) for n in op.inputs[:3]]
                  + [self.key(n) for n in outer], op.outputs[0])

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
            raise self.node_error(op, f"update_rule={rule!r} is not linear, gated, delta "
                                      f"or gated_delta", Deep500Error)
        q_heads, kv_heads = a.get("q_num_heads"), a.get("kv_num_heads")
        if not q_heads or not kv_heads or q_heads % kv_heads:
            raise self.node_error(op, f"q_num_heads ({q_heads}) must be a positive multiple "
                                      f"of kv_num_heads ({kv_heads})", Deep500Error)
        q_heads, kv_heads = int(q_heads), int(kv_heads)
        gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
        given = {name: bool(n) for name, n in zip(("decay", "beta"), list(op.inputs[4:6]) +
                                                  [""] * 2)}
        for name, needed in (("decay", gating), ("beta", delta)):
            if given[name] != needed:
                raise self.node_error(op, f"update_rule={rule!r} "
                                          f"{'requires' if needed else 'forbids'} the input "
                                          f"{name}", Deep500Error)
        scale_attr = a.get("scale")
        n_out = len(op.outputs)

        def heads(x, count):   # (B, T, H·D) -> (B, H, T, D)
            b, t, hd = x.shape
            if hd % count:
                raise self.node_error(op, f"the last axis {hd} of shape {list(x.shape)} is "
                                          f"not a multiple of {count} heads", ShapeError)
            return tf.transpose(tf.reshape(x, [b, t, count, hd // count]), [0, 2, 1, 3])

        def linear_attention(q, k, v, past=None, decay=None, beta=None):
            for name, x in (("query", q), ("key", k), ("value", v)):
                if len(x.shape) != 3:
                    raise self.node_error(op, f"{name} must be 3-D (B, T, H·D), got shape "
                                              f"{list(x.shape)}", ShapeError)
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
                    raise self.node_error(op, f"decay's last axis {decay.shape[-1]} must be "
                                              f"kv_num_heads ({kv_heads}) or kv_num_heads·d_k "
                                              f"({kv_heads * d_k})", ShapeError)
                decay4 = tf.cast(decay4, work)
            if beta is not None:
                if beta.shape[-1] not in (kv_heads, 1):
                    raise self.node_error(op, f"beta's last axis {beta.shape[-1]} must be "
                                              f"kv_num_heads ({kv_heads}) or 1", ShapeError)
                beta4 = tf.cast(tf.transpose(beta, [0, 2, 1])[..., tf.newaxis], work)
            if past is not None:
                if tuple(past.shape) != (b, kv_heads, d_k, d_v):
                    raise self.node_error(op, f"past_state has shape {list(past.shape)}, "
                                              f"not {[b, kv_heads, d_k, d_v]}", ShapeError)
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
