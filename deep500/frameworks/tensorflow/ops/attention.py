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


def _heads(x, heads: int):
    """(batch, sequence, heads·size) as (batch, heads, sequence, size)."""
    b, s, hidden = x.shape
    return tf.transpose(tf.reshape(x, [b, s, heads, hidden // heads]), [0, 2, 1, 3])


def _merged_heads(y):
    """(batch, heads, sequence, size) as (batch, sequence, heads·size), the inverse of
    :func:`_heads`."""
    b, h, s, size = y.shape
    return tf.reshape(tf.transpose(y, [0, 2, 1, 3]), [b, s, h * size])


def _blocking_bias(allowed, dtype):
    """An additive bias in ``dtype``: 0 where ``allowed``, -inf where not."""
    return tf.where(allowed, tf.constant(0, dtype), tf.constant(-np.inf, dtype))


def _mask_bias(mask, scores):
    """attn_mask as a bias added to ``scores`` (batch, heads, q_len, kv_len): a boolean
    mask allows where True, a float mask is added as it is; keys beyond the mask's last
    axis are padding, blocked."""
    kv_len = scores.shape[3]
    if mask.dtype == tf.bool:
        bias = _blocking_bias(mask, scores.dtype)
    else:
        bias = _like(mask, scores)
    if bias.shape[-1] < kv_len:
        pads = [[0, 0]] * (len(bias.shape) - 1) + [[0, kv_len - bias.shape[-1]]]
        bias = tf.pad(bias, pads, constant_values=-np.inf)
    return bias


def _allowed_keys(q_len: int, kv_len: int, past: int, nonpad, causal: bool, left: int,
                  right: int):
    """Which keys each query may attend, booleans broadcasting to (batch, heads, q_len,
    kv_len), or None when all. Query i stands at position offset + i, the offset being
    the cache length ``past`` (without a cache and with ``nonpad``, nonpad_kv_seqlen -
    q_len per batch entry): ``causal`` allows keys up to that position, a sliding window
    those at most ``left`` before and ``right`` after it (-1: unbounded); keys from
    nonpad_kv_seqlen on are padding."""
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
    return allowed


def _guarded_softmax(scores, bias, wide, dtype):
    """Softmax of ``scores`` over the keys, computed in ``wide`` and returned in
    ``dtype``. Rows whose ``bias`` allows no key give zeros: their scores are replaced
    before the softmax, so that neither it nor its gradient sees -inf - -inf."""
    if bias is None:
        return tf.cast(tf.nn.softmax(tf.cast(scores, wide), -1), dtype)
    empty = tf.reduce_max(bias, -1, keepdims=True) == -np.inf
    guarded = tf.where(empty, tf.zeros_like(scores), scores)
    probs = tf.cast(tf.nn.softmax(tf.cast(guarded, wide), -1), dtype)
    return tf.where(empty, tf.zeros_like(probs), probs)


def _linear_recurrence(q, k, v, state, decay, beta, scale: float):
    """LinearAttention's recurrence over time, (Y, last state) from per-head Q (B, Hq, T,
    d_k), K (B, H, T, d_k), V (B, H, T, d_v) and the state S (B, H, d_k, d_v): each step
    decays S by exp(decay) when given, replaces v by β(v - kS) when ``beta`` is given
    (the delta rule), adds kᵀv, and reads scale·qS, query heads sharing key/value heads
    in groups. Y is (B, T, Hq·d_v)."""
    b, q_heads, t, _ = q.shape
    group = q_heads // k.shape[1]
    outputs = []
    for i in range(t):
        k_t, v_t = k[:, :, i], v[:, :, i]
        if decay is not None:
            state = state * tf.exp(decay[:, :, i])[..., tf.newaxis]
        if beta is not None:
            retrieved = tf.einsum("bhdm,bhd->bhm", state, k_t)
            v_t = beta[:, :, i] * (v_t - retrieved)
        state = state + k_t[..., :, tf.newaxis] * v_t[..., tf.newaxis, :]
        read = state if group == 1 else tf.repeat(state, group, axis=1)
        outputs.append(scale * tf.einsum("bhd,bhdm->bhm", q[:, :, i], read))
    y = tf.reshape(tf.stack(outputs, 1), [b, t, q_heads * v.shape[3]])   # (B, T, H, d_v)
    return y, state


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
        left = int(a["left_window_size"]) if a.get("left_window_size") is not None else -1
        right = int(a["right_window_size"]) if a.get("right_window_size") is not None else -1
        if mode not in (0, 1, 2, 3):
            raise self.node_error(op, f"qk_matmul_output_mode={mode} is not 0, 1, 2 or 3",
                                  Deep500Error)
        precision = self._softmax_precision(op)
        n_out = len(op.outputs)

        def attention(q, k, v, mask=None, past_k=None, past_v=None, nonpad=None):
            three_d = len(q.shape) == 3
            q, k, v, past = self._attention_heads(op, q, k, v, past_k, past_v, q_heads,
                                                  kv_heads)
            present_k, present_v = k, v
            k, v = self._shared_kv_heads(op, q, k, v)
            dtype = q.dtype
            scale = 1 / math.sqrt(q.shape[3]) if scale_attr is None else float(scale_attr)
            root = tf.constant(math.sqrt(scale), dtype)
            raw = tf.linalg.matmul(q * root, k * root, transpose_b=True)
            capped = raw if cap <= 0 else cap * tf.tanh(raw / cap)
            q_len, kv_len = raw.shape[2], raw.shape[3]
            bias = None if mask is None else _mask_bias(mask, raw)
            allowed = _allowed_keys(q_len, kv_len, past, nonpad, causal, left, right)
            if allowed is not None:
                extra = _blocking_bias(allowed, dtype)
                bias = extra if bias is None else bias + extra
            biased = capped if bias is None else capped + bias
            wide = dtype if precision is None else FLOAT_TYPES[int(precision)]
            probs = _guarded_softmax(biased, bias, wide, dtype)
            y = tf.linalg.matmul(probs, _like(v, probs))
            if three_d:
                y = _merged_heads(y)
            if n_out == 1:
                return y
            qk = (raw, capped, biased, probs)[mode]
            return (y, present_k, present_v, qk)[:n_out]
        self._emit_node(op, attention)

    def _softmax_precision(self, op):
        """The attribute softmax_precision (None when absent), checked to name a float
        type."""
        precision = op.attributes.get("softmax_precision")
        if precision is not None and int(precision) not in FLOAT_TYPES:
            raise self.node_error(op, f"softmax_precision={precision} is not a float type "
                                      f"(1, 10, 11 or 16)", Deep500Error)
        return precision

    def _attention_heads(self, op, q, k, v, past_k, past_v, q_heads, kv_heads):
        """(Q, K, V, cache length): Q, K and V 4-D (batch, heads, sequence, head size),
        3-D ones split by q_num_heads and kv_num_heads; K and V after past_key and
        past_value (what present_key and present_value return)."""
        if not len(q.shape) == len(k.shape) == len(v.shape) or len(q.shape) not in (3, 4):
            raise self.node_error(op, f"Q, K and V must all be 3-D or all 4-D, got shapes "
                                  f"{q.shape}, {k.shape} and {v.shape}", ShapeError)
        if len(q.shape) == 3:
            q = self._split_heads(op, q, q_heads, "Q")
            k = self._split_heads(op, k, kv_heads, "K")
            v = self._split_heads(op, v, kv_heads, "V")
        if (past_k is None) != (past_v is None):
            raise self.node_error(op, "past_key and past_value must be given together",
                                  Deep500Error)
        if past_k is None:
            return q, k, v, 0
        return (q, tf.concat([_like(past_k, k), k], 2), tf.concat([_like(past_v, v), v], 2),
                past_k.shape[2])

    def _split_heads(self, op, x, heads, name: str):
        """3-D ``x`` (batch, sequence, hidden) split into ``heads`` heads."""
        hidden = x.shape[2]
        if not heads:
            raise self.node_error(op, "3-D Q, K and V need the attributes q_num_heads and "
                                  "kv_num_heads", Deep500Error)
        if hidden % heads:
            raise self.node_error(op, f"the hidden size {hidden} of {name} is not a "
                                  f"multiple of its {heads} heads", ShapeError)
        return _heads(x, heads)

    def _shared_kv_heads(self, op, q, k, v):
        """(K, V) with each key/value head repeated for its group of query heads
        (grouped-query attention, Ainslie et al., https://arxiv.org/abs/2305.13245)."""
        if q.shape[1] % k.shape[1] or q.shape[3] != k.shape[3]:
            raise self.node_error(op, f"Q (as 4-D {q.shape}) and K ({k.shape}) disagree: "
                                  f"Q's heads must be a multiple of K's and the head "
                                  f"sizes must match", ShapeError)
        repeats = q.shape[1] // k.shape[1]
        if repeats > 1:
            return tf.repeat(k, repeats, axis=1), tf.repeat(v, repeats, axis=1)
        return k, v

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
        precision = self._softmax_precision(op)
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

        def linear_attention(q, k, v, past=None, decay=None, beta=None):
            for name, x in (("query", q), ("key", k), ("value", v)):
                if len(x.shape) != 3:
                    raise self.node_error(op, f"{name} must be 3-D (B, T, H·D), got shape "
                                              f"{list(x.shape)}", ShapeError)
            work = tf.float64 if q.dtype == tf.float64 else tf.float32
            b, t = q.shape[0], q.shape[1]
            q4, k4, v4 = (tf.cast(self._linear_heads(op, x, n), work) for x, n in
                          ((q, q_heads), (k, kv_heads), (v, kv_heads)))
            d_k, d_v = q4.shape[3], v4.shape[3]
            decay4 = None if decay is None else self._step_decay(op, decay, (b, kv_heads, t,
                                                                             d_k), work)
            beta4 = None if beta is None else self._step_beta(op, beta, kv_heads, work)
            state = self._initial_state(op, past, (b, kv_heads, d_k, d_v), work)
            scale = 1 / math.sqrt(d_k) if not scale_attr else float(scale_attr)
            y, state = _linear_recurrence(q4, k4, v4, state, decay4, beta4, scale)
            y = tf.cast(y, q.dtype)
            if n_out == 1:
                return y
            return y, tf.cast(state, q.dtype if past is None else past.dtype)
        self._emit_node(op, linear_attention)

    def _linear_heads(self, op, x, count: int):
        """(B, T, H·D) as (B, H, T, D) for ``count`` heads H."""
        hd = x.shape[2]
        if hd % count:
            raise self.node_error(op, f"the last axis {hd} of shape {list(x.shape)} is "
                                      f"not a multiple of {count} heads", ShapeError)
        return _heads(x, count)

    def _step_decay(self, op, decay, shape: tuple, work):
        """LinearAttention's decay (B, T, H) or (B, T, H·d_k) as (B, H, T, 1 or d_k) in
        ``work``; ``shape`` is (B, H, T, d_k)."""
        b, kv_heads, t, d_k = shape
        if decay.shape[-1] == kv_heads:
            decay4 = tf.reshape(tf.transpose(decay, [0, 2, 1]), [b, kv_heads, t, 1])
        elif decay.shape[-1] == kv_heads * d_k:
            decay4 = self._linear_heads(op, decay, kv_heads)
        else:
            raise self.node_error(op, f"decay's last axis {decay.shape[-1]} must be "
                                      f"kv_num_heads ({kv_heads}) or kv_num_heads·d_k "
                                      f"({kv_heads * d_k})", ShapeError)
        return tf.cast(decay4, work)

    def _step_beta(self, op, beta, kv_heads: int, work):
        """LinearAttention's beta (B, T, H or 1) as (B, H or 1, T, 1) in ``work``."""
        if beta.shape[-1] not in (kv_heads, 1):
            raise self.node_error(op, f"beta's last axis {beta.shape[-1]} must be "
                                      f"kv_num_heads ({kv_heads}) or 1", ShapeError)
        return tf.cast(tf.transpose(beta, [0, 2, 1])[..., tf.newaxis], work)

    def _initial_state(self, op, past, shape: tuple, work):
        """LinearAttention's state before the first step, (B, H, d_k, d_v) in ``work``:
        past_state, or zeros."""
        if past is None:
            return tf.zeros(list(shape), work)
        if tuple(past.shape) != shape:
            raise self.node_error(op, f"past_state has shape {list(past.shape)}, "
                                      f"not {list(shape)}", ShapeError)
        return tf.cast(past, work)
