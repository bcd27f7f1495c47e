"""LinearAttention (opset 27): causal linear attention as a recurrence over a per-head
state S (d_k × d_v), with grouped-query heads.
https://onnx.ai/onnx/operators/onnx__LinearAttention.html (Katharopoulos et al.,
Transformers are RNNs, 2020; Yang et al., Gated Delta Networks, 2024)

query (B, T, H_q·d_k), key (B, T, H_kv·d_k), value (B, T, H_kv·d_v) hold heads packed in
the last axis; query head h reads the state of key/value head h // (H_q / H_kv). Per step,
with A = exp(g_t)·S_{t-1} for the gated rules ("gated", "gated_delta"; decay g of
(B, T, H_kv) or (B, T, H_kv·d_k), scaling the state's rows) and A = S_{t-1} otherwise:

* "linear", "gated": S_t = A + k_t ⊗ v_t;
* "delta", "gated_delta": S_t = A + k_t ⊗ β_t(v_t - Aᵀk_t) (beta (B, T, H_kv) or
  (B, T, 1));

and o_t = scale·q_tᵀS_t (scale 0: 1/√d_k). past_state (default zeros) is S_0 and
present_state S_T, both (B, H_kv, d_k, d_v). ``chunk_size`` is a speed hint of chunked
implementations and changes nothing here. Computed in float64 step by step; backward
runs the recurrence in reverse for the gradients of every input.
"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError

RULES = ("linear", "gated", "delta", "gated_delta")


def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(B, T, H·D) as float64 (B, T, H, D)."""
    return np.asarray(x, np.float64).reshape(x.shape[0], x.shape[1], heads, -1)


@register("LinearAttention")
class LinearAttention(ReferenceOp):
    defaults = {"chunk_size": 64, "kv_num_heads": None, "q_num_heads": None, "scale": 0.0,
                "update_rule": "gated_delta"}

    def _setup(self, query, key, value, past_state, decay, beta):
        """Checked inputs as float64 per-head arrays and the recurrence's constants."""
        rule = self.attr("update_rule")
        rule = rule.decode() if isinstance(rule, bytes) else rule
        if rule not in RULES:
            raise ShapeError(f"{self.op_type}: update_rule must be one of {RULES}, got "
                             f"{rule!r}")
        hq, hkv = self.attr("q_num_heads"), self.attr("kv_num_heads")
        if hq is None or hkv is None or hq <= 0 or hkv <= 0 or hq % hkv:
            raise ShapeError(f"{self.op_type}: q_num_heads ({hq}) and kv_num_heads ({hkv}) "
                             f"are required, and q_num_heads must be a positive multiple "
                             f"of kv_num_heads")
        gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
        for name, x, needed in (("decay", decay, gated), ("beta", beta, delta)):
            if needed != (x is not None):
                raise ShapeError(f"{self.op_type}: update_rule {rule!r} "
                                 f"{'requires' if needed else 'takes no'} input {name}")
        for name, x in (("query", query), ("key", key), ("value", value)):
            if np.ndim(x) != 3 or np.shape(x)[:2] != np.shape(query)[:2]:
                raise ShapeError(f"{self.op_type}: {name} must be (B, T, heads·dim) with "
                                 f"query's (B, T), got shape {np.shape(x)}")
        batch, steps, width = query.shape
        if width % hq or value.shape[2] % hkv or key.shape[2] != hkv * (width // hq):
            raise ShapeError(f"{self.op_type}: query {query.shape}, key {key.shape} and "
                             f"value {value.shape} do not split into {hq} query heads and "
                             f"{hkv} key/value heads of one key dimension")
        d_k, d_v = width // hq, value.shape[2] // hkv
        q, k, v = _heads(query, hq), _heads(key, hkv), _heads(value, hkv)
        state_shape = (batch, hkv, d_k, d_v)
        if past_state is not None and np.shape(past_state) != state_shape:
            raise ShapeError(f"{self.op_type}: past_state must be {state_shape} (B, H_kv, "
                             f"d_k, d_v), got shape {np.shape(past_state)}")
        S = (np.zeros(state_shape) if past_state is None
             else np.asarray(past_state, np.float64))
        if decay is not None:
            if np.shape(decay) not in ((batch, steps, hkv), (batch, steps, hkv * d_k)):
                raise ShapeError(f"{self.op_type}: decay must be ({batch}, {steps}, {hkv}) "
                                 f"or ({batch}, {steps}, {hkv * d_k}), got {np.shape(decay)}")
            decay = _heads(decay, hkv)                       # (B, T, H_kv, 1 or d_k)
        if beta is not None:
            if np.shape(beta) not in ((batch, steps, hkv), (batch, steps, 1)):
                raise ShapeError(f"{self.op_type}: beta must be ({batch}, {steps}, {hkv}) or "
                                 f"({batch}, {steps}, 1), got {np.shape(beta)}")
            beta = np.asarray(beta, np.float64)[..., None]   # (B, T, H_kv or 1, 1)
        scale = float(self.attr("scale")) or 1.0 / np.sqrt(d_k)
        return q, k, v, S, decay, beta, scale, hq // hkv

    @staticmethod
    def _step(S, k, v, g, b):
        """One update: (A, u, S_t) with A the decayed state and u what is added along k."""
        A = S if g is None else S * np.exp(g)[..., None]
        u = v if b is None else b * (v - np.einsum("bhdm,bhd->bhm", A, k))
        return A, u, A + k[..., :, None] * u[..., None, :]

    def forward(self, query, key, value, past_state=None, decay=None, beta=None):
        query = np.asarray(query)
        q, k, v, S, decay, beta, scale, group = self._setup(
            query, np.asarray(key), np.asarray(value), past_state, decay, beta)
        outputs = np.zeros(q.shape[:3] + (v.shape[3],))
        for t in range(q.shape[1]):
            _, _, S = self._step(S, k[:, t], v[:, t], None if decay is None else decay[:, t],
                                 None if beta is None else beta[:, t])
            outputs[:, t] = scale * np.einsum("bhd,bhdm->bhm", q[:, t],
                                              np.repeat(S, group, axis=1))
        state_dtype = query.dtype if past_state is None else np.asarray(past_state).dtype
        return (outputs.reshape(query.shape[:2] + (-1,)).astype(query.dtype),
                S.astype(state_dtype))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        inputs = list(fwd_inputs) + [None] * (6 - len(fwd_inputs))
        query, key, value, past_state, decay_in, beta_in = inputs
        query = np.asarray(query)
        q, k, v, S, decay, beta, scale, group = self._setup(
            query, np.asarray(key), np.asarray(value), past_state, decay_in, beta_in)
        batch, steps, hq = q.shape[:3]
        hkv = k.shape[2]
        states = [S]
        for t in range(steps):
            states.append(self._step(states[-1], k[:, t], v[:, t],
                                     None if decay is None else decay[:, t],
                                     None if beta is None else beta[:, t])[2])
        d_out = (np.zeros(q.shape[:3] + (v.shape[3],)) if grads[0] is None
                 else np.asarray(grads[0], np.float64).reshape(q.shape[:3] + (-1,)))
        dS = (np.zeros(S.shape) if len(grads) < 2 or grads[1] is None
              else np.asarray(grads[1], np.float64).copy())
        dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
        d_decay = None if decay is None else np.zeros(decay.shape)
        d_beta = None if beta is None else np.zeros(beta.shape)
        for t in reversed(range(steps)):
            g = None if decay is None else decay[:, t]
            b = None if beta is None else beta[:, t]
            A, u, S_t = self._step(states[t], k[:, t], v[:, t], g, b)
            dq[:, t] = scale * np.einsum("bhdm,bhm->bhd", np.repeat(S_t, group, axis=1),
                                         d_out[:, t])
            reads = scale * q[:, t, :, :, None] * d_out[:, t, :, None, :]   # per query head
            dS = dS + reads.reshape(batch, hkv, group, *S.shape[2:]).sum(axis=2)
            dA = dS
            dk[:, t] = np.einsum("bhdm,bhm->bhd", dS, u)
            du = np.einsum("bhdm,bhd->bhm", dS, k[:, t])
            if b is None:
                dv[:, t] = du
            else:
                residual = v[:, t] - np.einsum("bhdm,bhd->bhm", A, k[:, t])
                d_beta[:, t] = (du * residual).sum(axis=-1, keepdims=True).sum(
                    axis=1, keepdims=True) if b.shape[1] == 1 else (
                    (du * residual).sum(axis=-1, keepdims=True))
                dv[:, t] = b * du
                dr = -b * du
                dA = dA + k[:, t, :, :, None] * dr[:, :, None, :]
                dk[:, t] += np.einsum("bhdm,bhm->bhd", A, dr)
            if g is None:
                dS = dA
            else:
                e = np.exp(g)
                d_e = (dA * states[t]).sum(axis=-1)                        # (B, H, d_k)
                d_decay[:, t] = (d_e * e if g.shape[-1] > 1
                                 else (d_e * e).sum(axis=-1, keepdims=True))
                dS = dA * e[..., None]
        result = [dq.reshape(query.shape).astype(query.dtype),
                  dk.reshape(np.shape(key)).astype(np.asarray(key).dtype),
                  dv.reshape(np.shape(value)).astype(np.asarray(value).dtype),
                  None if past_state is None else dS.astype(np.asarray(past_state).dtype),
                  None if decay_in is None else d_decay.reshape(np.shape(decay_in)).astype(
                      np.asarray(decay_in).dtype),
                  None if beta_in is None else d_beta.reshape(np.shape(beta_in)).astype(
                      np.asarray(beta_in).dtype)]
        return result[:len(fwd_inputs)]
