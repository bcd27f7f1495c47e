"""Attention (opset 25; covers 23 and 24): scaled dot-product attention (Vaswani et al.,
https://arxiv.org/abs/1706.03762) with multi-, grouped- and multi-query heads, an internal
key/value cache (past_key, past_value -> present_key, present_value), boolean or additive
masks, offset-aligned causal and sliding-window masks, padding by ``nonpad_kv_seqlen``,
soft capping, a softmax precision and the debug output ``qk_matmul_output``:

    Y = softmax(softcap((Q·√scale)(K·√scale)ᵀ) + bias) · V

A query row with no key left to attend gives a zero row. Backward gives exact gradients
for Q, K, V, past_key, past_value and a float attn_mask (boolean masks and
nonpad_kv_seqlen are not differentiable). https://onnx.ai/onnx/operators/onnx__Attention.html
"""
from types import SimpleNamespace

import numpy as np

from deep500.frameworks.reference.operators._op_common_attention import (
    attention_bias, guarded_softmax, mask_gradient, merge_heads, repeat_heads,
    repeat_heads_backward, softcap, softcap_backward, softmax_backward, split_heads)
from deep500.frameworks.reference.operators._op_common_norm import onnx_float_dtype
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error, ShapeError


@register("Attention")
class Attention(ReferenceOp):
    defaults = {"is_causal": 0, "kv_num_heads": None, "q_num_heads": None,
                "qk_matmul_output_mode": 0, "scale": None, "softcap": 0.0,
                "softmax_precision": None, "left_window_size": -1, "right_window_size": -1}

    # -- checks and layout -------------------------------------------------------------
    def _check_attributes(self):
        mode = self.attr("qk_matmul_output_mode")
        if mode not in (0, 1, 2, 3):
            raise Deep500Error(f"{self.op_type}: qk_matmul_output_mode={mode} is not one of "
                               f"0 (raw QK), 1 (after softcap), 2 (after the bias), 3 (after "
                               f"softmax)")
        for name in ("left_window_size", "right_window_size"):
            if self.attr(name) < -1:
                raise Deep500Error(f"{self.op_type}: {name}={self.attr(name)} must be -1 "
                                   f"(unbounded) or nonnegative")

    def _to_4d(self, Q, K, V):
        """Q, K, V as (batch, heads, sequence, size), checked against each other."""
        if not Q.ndim == K.ndim == V.ndim or Q.ndim not in (3, 4):
            raise ShapeError(f"{self.op_type}: Q, K and V must all be 3-D (batch, sequence, "
                             f"hidden) or all 4-D (batch, heads, sequence, head_size), got "
                             f"{Q.shape}, {K.shape} and {V.shape}")
        q_heads, kv_heads = self.attr("q_num_heads"), self.attr("kv_num_heads")
        if Q.ndim == 3:
            if not q_heads or not kv_heads:
                raise Deep500Error(f"{self.op_type}: 3-D inputs need the attributes "
                                   f"q_num_heads and kv_num_heads (got {q_heads} and "
                                   f"{kv_heads})")
            for name, x, heads in (("Q", Q, q_heads), ("K", K, kv_heads), ("V", V, kv_heads)):
                if x.shape[2] % heads:
                    raise ShapeError(f"{self.op_type}: the hidden size {x.shape[2]} of {name} "
                                     f"(shape {x.shape}) is not a multiple of its {heads} "
                                     f"heads")
            Q, K, V = split_heads(Q, q_heads), split_heads(K, kv_heads), split_heads(V, kv_heads)
        elif (q_heads and q_heads != Q.shape[1]) or (kv_heads and kv_heads != K.shape[1]):
            raise ShapeError(f"{self.op_type}: q_num_heads={q_heads}, kv_num_heads={kv_heads} "
                             f"contradict the 4-D shapes Q {Q.shape} and K {K.shape} (leave "
                             f"them out for 4-D inputs)")
        if not (Q.shape[0] == K.shape[0] == V.shape[0] and K.shape[1:3] == V.shape[1:3]
                and Q.shape[3] == K.shape[3] and Q.shape[1] % K.shape[1] == 0):
            raise ShapeError(f"{self.op_type}: incompatible (batch, heads, sequence, size) "
                             f"shapes Q {Q.shape}, K {K.shape}, V {V.shape}: the batch must "
                             f"agree, K and V need the same heads and sequence, Q and K the "
                             f"same head size, and Q's heads must be a multiple of K's")
        return Q, K, V

    def _cache(self, K, V, past_key, past_value, nonpad_kv_seqlen):
        if (past_key is None) != (past_value is None):
            raise Deep500Error(f"{self.op_type}: past_key and past_value must be given "
                               f"together")
        if past_key is None:
            return K, V, 0
        if nonpad_kv_seqlen is not None:
            raise Deep500Error(f"{self.op_type}: nonpad_kv_seqlen (an external cache) cannot "
                               f"be combined with past_key/past_value (an internal cache)")
        if (past_key.ndim != 4 or past_key.shape[:2] != K.shape[:2]
                or past_key.shape[3] != K.shape[3] or past_value.shape[:3] != past_key.shape[:3]
                or past_value.shape[3] != V.shape[3]):
            raise ShapeError(f"{self.op_type}: past_key {past_key.shape} and past_value "
                             f"{past_value.shape} must be (batch, kv_num_heads, past_length, "
                             f"size) matching K {K.shape} and V {V.shape} (as 4-D)")
        return (np.concatenate((past_key.astype(K.dtype, copy=False), K), axis=2),
                np.concatenate((past_value.astype(V.dtype, copy=False), V), axis=2),
                past_key.shape[2])

    # -- the computation, shared by forward and backward ---------------------------------
    def _compute(self, Q, K, V, attn_mask=None, past_key=None, past_value=None,
                 nonpad_kv_seqlen=None):
        self._check_attributes()
        t1 = Q.dtype
        q4, k4, v4 = self._to_4d(Q, K, V)
        present_key, present_value, past = self._cache(k4, v4, past_key, past_value,
                                                       nonpad_kv_seqlen)
        repeats = q4.shape[1] // k4.shape[1]
        scale = self.attr("scale")
        scale = 1 / np.sqrt(q4.shape[3]) if scale is None else scale
        # √scale on both Q and K (the spec's guard against overflow in low precision).
        root = t1.type(np.sqrt(scale))
        q = q4 * root
        k = repeat_heads(present_key, repeats) * root.astype(present_key.dtype)
        v = repeat_heads(present_value, repeats)
        raw = np.matmul(q, np.swapaxes(k, -1, -2)).astype(t1, copy=False)
        capped = softcap(raw, self.attr("softcap"))
        if nonpad_kv_seqlen is not None and past == 0:
            offset = np.asarray(nonpad_kv_seqlen).reshape(-1) - q4.shape[2]
        else:
            offset = past
        bias = attention_bias(self.op_type, t1, raw.shape, attn_mask,
                              bool(self.attr("is_causal")), offset,
                              self.attr("left_window_size"), self.attr("right_window_size"),
                              nonpad_kv_seqlen)
        biased = capped + bias
        # Decided on the bias, not on the scores, which may be NaN or inf where masked.
        fully_masked = np.isneginf(np.max(bias, axis=-1, keepdims=True))
        precision = self.attr("softmax_precision")
        wide = (t1 if precision is None
                else onnx_float_dtype(self.op_type, "softmax_precision", precision))
        probs = guarded_softmax(biased.astype(wide, copy=False), fully_masked).astype(t1)
        return SimpleNamespace(three_d=Q.ndim == 3, q=q, k=k, v=v, root=root, repeats=repeats,
                               past=past, present_key=present_key, present_value=present_value,
                               raw=raw, capped=capped, biased=biased, probs=probs)

    def _qk_output(self, c):
        return (c.raw, c.capped, c.biased, c.probs)[self.attr("qk_matmul_output_mode")]

    # -- operator ----------------------------------------------------------------------
    def forward(self, Q, K, V, attn_mask=None, past_key=None, past_value=None,
                nonpad_kv_seqlen=None):
        c = self._compute(Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen)
        Y = np.matmul(c.probs, c.v).astype(Q.dtype, copy=False)
        if c.three_d:
            Y = merge_heads(Y)
        present_key = c.present_key if c.past else np.array(c.present_key)
        present_value = c.present_value if c.past else np.array(c.present_value)
        return Y, present_key, present_value, np.array(self._qk_output(c), Q.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        inputs = list(fwd_inputs) + [None] * (7 - len(fwd_inputs))
        Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen = inputs
        c = self._compute(*inputs)
        grads = list(grads) + [None] * (4 - len(grads))
        dY, d_present_key, d_present_value, d_qk = grads
        mode = self.attr("qk_matmul_output_mode")

        def extra(stage):  # the debug output's gradient enters at the stage it shows
            return d_qk if d_qk is not None and mode == stage else 0

        if dY is None:
            dY = np.zeros(c.probs.shape[:3] + (c.v.shape[3],), Q.dtype)
        elif c.three_d:
            dY = split_heads(dY, c.probs.shape[1])
        d_probs = np.matmul(dY, np.swapaxes(c.v, -1, -2)) + extra(3)
        d_v = np.matmul(np.swapaxes(c.probs, -1, -2), dY)
        d_biased = softmax_backward(d_probs, c.probs) + extra(2)
        d_raw = softcap_backward(d_biased + extra(1), c.capped, self.attr("softcap")) + extra(0)
        d_q = np.matmul(d_raw, c.k) * c.root
        d_k = np.matmul(np.swapaxes(d_raw, -1, -2), c.q) * c.root
        d_key = repeat_heads_backward(d_k, c.repeats)
        d_value = repeat_heads_backward(d_v, c.repeats)
        if d_present_key is not None:
            d_key = d_key + d_present_key
        if d_present_value is not None:
            d_value = d_value + d_present_value
        dK, dV = d_key[:, :, c.past:], d_value[:, :, c.past:]
        if c.three_d:
            d_q, dK, dV = merge_heads(d_q), merge_heads(dK), merge_heads(dV)
        d_mask = None
        if attn_mask is not None and np.issubdtype(np.asarray(attn_mask).dtype, np.floating):
            d_mask = mask_gradient(d_biased, attn_mask)
        d_past_key = d_past_value = None
        if past_key is not None:
            d_past_key = d_key[:, :, :c.past].astype(past_key.dtype)
            d_past_value = d_value[:, :, :c.past].astype(past_value.dtype)
        return [d_q.astype(Q.dtype), dK.astype(K.dtype), dV.astype(V.dtype), d_mask,
                d_past_key, d_past_value, None]
