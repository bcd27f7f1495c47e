"""Shared code of the attention operators: the head layout of 3-D inputs, the additive
attention bias (boolean or float mask, causal and sliding-window masks aligned to the
cache offset, padding from ``nonpad_kv_seqlen``), grouped-query head sharing, soft capping
and the softmax that maps fully masked rows to zero, each with its gradient.
https://onnx.ai/onnx/operators/onnx__Attention.html"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_broadcast import unbroadcast
from deep500.utils.errors import ShapeError


def split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(batch, sequence, heads·size) -> (batch, heads, sequence, size)."""
    batch, sequence, hidden = x.shape
    return x.reshape(batch, sequence, heads, hidden // heads).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(batch, heads, sequence, size) -> (batch, sequence, heads·size)."""
    batch, heads, sequence, size = x.shape
    return x.transpose(0, 2, 1, 3).reshape(batch, sequence, heads * size)


def repeat_heads(x: np.ndarray, repeats: int) -> np.ndarray:
    """Grouped-query attention: query head h reads key/value head h // repeats."""
    return x if repeats == 1 else np.repeat(x, repeats, axis=1)


def repeat_heads_backward(dx: np.ndarray, repeats: int) -> np.ndarray:
    if repeats == 1:
        return dx
    batch, heads, sequence, size = dx.shape
    return dx.reshape(batch, heads // repeats, repeats, sequence, size).sum(axis=2)


def _allowed_to_bias(allowed: np.ndarray, dtype) -> np.ndarray:
    return np.where(allowed, dtype.type(0), dtype.type(-np.inf))


def attention_bias(op_type: str, dtype, scores_shape: tuple, attn_mask, is_causal: bool,
                   offset, left_window: int, right_window: int,
                   nonpad_kv_seqlen) -> np.ndarray:
    """The additive bias (0 where a key may be attended, -inf where not, plus a float mask)
    broadcastable to ``scores_shape`` = (batch, heads, q_len, kv_len). ``offset`` (an int,
    or one per batch) is the number of valid keys before the query block: the causal
    frontier is j <= i + offset, the window |i + offset - j| bounded by the window sizes."""
    dtype = np.dtype(dtype)
    batch, _, q_len, kv_len = scores_shape
    bias = np.zeros((q_len, kv_len), dtype)
    if attn_mask is not None:
        mask = np.asarray(attn_mask)
        valid = 1 <= mask.ndim <= 4 and mask.shape[-1] <= kv_len
        if valid:
            padded = mask.shape[:-1] + (kv_len,)
            try:
                valid = np.broadcast_shapes(padded, scores_shape) == tuple(scores_shape)
            except ValueError:
                valid = False
        if not valid:
            raise ShapeError(f"{op_type}: attn_mask of shape {mask.shape} does not broadcast "
                             f"to (batch, q_num_heads, q_sequence_length, "
                             f"total_sequence_length) = {tuple(scores_shape)} (its last "
                             f"dimension may be shorter: the rest counts as masked)")
        if mask.dtype == np.bool_:
            mask = _allowed_to_bias(mask, dtype)
        else:
            mask = mask.astype(dtype, copy=False)
        if mask.shape[-1] < kv_len:  # the missing keys are padding: never attended
            pad = [(0, 0)] * (mask.ndim - 1) + [(0, kv_len - mask.shape[-1])]
            mask = np.pad(mask, pad, constant_values=-np.inf)
        bias = bias + mask
    positions = None
    if is_causal or left_window >= 0 or right_window >= 0:
        # diff[b?, i, j] = (absolute position of query i) - j
        query = np.arange(q_len).reshape(q_len, 1)
        key = np.arange(kv_len).reshape(1, kv_len)
        if np.ndim(offset):
            positions = np.reshape(offset, (-1, 1, 1, 1)) + query - key
        else:
            positions = int(offset) + query - key
    if positions is not None:
        allowed = np.ones(np.shape(positions), np.bool_)
        if is_causal:
            allowed &= positions >= 0
        if left_window >= 0:
            allowed &= positions <= left_window
        if right_window >= 0:
            allowed &= -positions <= right_window
        bias = bias + _allowed_to_bias(allowed, dtype)
    if nonpad_kv_seqlen is not None:
        lengths = np.asarray(nonpad_kv_seqlen).reshape(-1)
        if lengths.shape != (batch,):
            raise ShapeError(f"{op_type}: nonpad_kv_seqlen must have shape ({batch},), got "
                             f"{np.shape(nonpad_kv_seqlen)}")
        valid = np.arange(kv_len).reshape(1, 1, 1, kv_len) < lengths.reshape(batch, 1, 1, 1)
        bias = bias + _allowed_to_bias(valid, dtype)
    return bias


def mask_gradient(d_bias: np.ndarray, attn_mask: np.ndarray) -> np.ndarray:
    """Gradient w.r.t. a float attn_mask from the gradient of the scores it was added to
    (columns beyond the mask's are the padding it was extended with)."""
    d = d_bias[..., :attn_mask.shape[-1]]
    return unbroadcast(d, attn_mask.shape).astype(attn_mask.dtype, copy=False)


def softcap(x: np.ndarray, cap: float) -> np.ndarray:
    """cap·tanh(x / cap) (no capping when cap <= 0)."""
    if cap <= 0:
        return x
    c = x.dtype.type(cap)
    return c * np.tanh(x / c)


def softcap_backward(dy: np.ndarray, y: np.ndarray, cap: float) -> np.ndarray:
    """Gradient w.r.t. x of y = softcap(x, cap), from y: 1 - (y / cap)²."""
    if cap <= 0:
        return dy
    t = y / y.dtype.type(cap)
    return dy * (y.dtype.type(1) - t * t)


def guarded_softmax(x: np.ndarray, fully_masked: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; rows in ``fully_masked`` (no key allowed) are zero, not
    NaN (the maximum of an all -inf row is replaced by 0 so no -inf - -inf is formed)."""
    high = np.max(x, axis=-1, keepdims=True)
    high = np.where(np.isneginf(high), x.dtype.type(0), high)
    e = np.exp(x - high)
    total = np.sum(e, axis=-1, keepdims=True)
    total = np.where(total == 0, x.dtype.type(1), total)
    return np.where(fully_masked, x.dtype.type(0), e / total)


def softmax_backward(dp: np.ndarray, p: np.ndarray) -> np.ndarray:
    return p * (dp - np.sum(dp * p, axis=-1, keepdims=True))
