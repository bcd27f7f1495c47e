"""The attention family in PyTorch: Attention, FlexAttention, LinearAttention and
RotaryEmbedding in ``torch`` operations (differentiable by autograd).

Attention (opsets 23 to 25, https://onnx.ai/onnx/operators/onnx__Attention.html): 3-D
inputs are split into heads by ``q_num_heads``/``kv_num_heads``; ``past_key`` and
``past_value`` are prepended to K and V (``present_key``/``present_value``); boolean
masks allow where True, float masks are added, both padded with "masked" up to the total
key length; ``is_causal`` masks bottom-right aligned (offset by the past length, or per
batch by ``nonpad_kv_seqlen`` - q length); ``left_window_size``/``right_window_size``
bound a sliding window; grouped-query attention repeats each KV head over its group of
query heads; ``softcap`` caps the scores by softcap·tanh(scores/softcap) before masks;
a query row whose mask allows no key gives zeros. ``qk_matmul_output_mode`` selects the
fourth output as onnx's reference implementation defines it: 0 and 1 the scores (after
softcap), 2 the scores with the mask added, 3 the softmax.
"""
from __future__ import annotations

import math

import onnx

from deep500.frameworks._bridge.inner_network import inner_network_factory
from deep500.frameworks.pytorch._torch_common import BRIDGE, text, torch_dtype
from deep500.utils.errors import ShapeError, require
from deep500.utils.onnx_interop.parser import load_and_parse_model

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


def _split_heads(x, heads: int, name: str):
    batch, length, hidden = x.shape
    if hidden % heads:
        raise ShapeError(f"Attention: the hidden size {hidden} of 3-D {name} is not a "
                         f"multiple of its number of heads {heads}")
    return x.reshape(batch, length, heads, hidden // heads).transpose(1, 2)


def _additive(mask, dtype, kv_len: int):
    """A boolean (True: attend) or additive float mask as an additive bias, padded with
    -inf up to ``kv_len`` keys."""
    pad = kv_len - mask.shape[-1]
    if mask.dtype == torch.bool:
        if pad > 0:
            mask = torch.nn.functional.pad(mask, (0, pad), value=False)
        zero = torch.zeros((), dtype=dtype, device=mask.device)
        return torch.where(mask, zero, torch.full_like(zero, -math.inf))
    if pad > 0:
        mask = torch.nn.functional.pad(mask, (0, pad), value=-math.inf)
    return mask.to(dtype)


def _softmax(logits):
    """Softmax over the last axis. In float16/bfloat16 step by step, each step rounded
    to the type (as onnx's reference and function body compute it); PyTorch's kernel
    rounds once, which moves a result by one unit in the last place."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        exp = torch.exp(logits - logits.amax(-1, keepdim=True))
        return exp / exp.sum(-1, keepdim=True)
    return torch.softmax(logits, -1)


def attention(Q, K, V, attn_mask=None, past_key=None, past_value=None,
              nonpad_kv_seqlen=None, *, scale=None, is_causal=False, q_num_heads=None,
              kv_num_heads=None, softcap=0.0, qk_matmul_output_mode=0,
              softmax_dtype=None, left_window_size=-1, right_window_size=-1):
    """(Y, present_key, present_value, qk_matmul_output) of ONNX Attention."""
    three_d = Q.dim() == 3
    if three_d:
        if not q_num_heads or not kv_num_heads:
            raise ShapeError("Attention: 3-D Q, K, V need the attributes q_num_heads and "
                             "kv_num_heads")
        batch = Q.shape[0]
        Q = _split_heads(Q, q_num_heads, "Q")
        K = _split_heads(K, kv_num_heads, "K")
        V = _split_heads(V, kv_num_heads, "V")
    if past_key is not None:
        K = torch.cat([past_key, K], 2)
    if past_value is not None:
        V = torch.cat([past_value, V], 2)
    present_key, present_value = K, V
    q_len, kv_len = Q.shape[2], K.shape[2]
    dtype, device = Q.dtype, Q.device
    bias = None if attn_mask is None else _additive(attn_mask, dtype, kv_len)
    windowed = left_window_size >= 0 or right_window_size >= 0
    if nonpad_kv_seqlen is not None:
        lengths = nonpad_kv_seqlen.to(device=device, dtype=torch.int64).reshape(-1, 1, 1, 1)
    if is_causal or windowed:
        if past_key is None and nonpad_kv_seqlen is not None:
            offset = lengths - q_len
        else:
            offset = 0 if past_key is None else past_key.shape[2]
        rows = torch.arange(q_len, device=device).unsqueeze(1)
        cols = torch.arange(kv_len, device=device).unsqueeze(0)
        # a key is allowed when its distance behind the query lies in [nearest, farthest]
        farthest = left_window_size if left_window_size >= 0 else kv_len + q_len
        nearest = -right_window_size if right_window_size >= 0 else -(kv_len + q_len)
        if is_causal:
            nearest = max(nearest, 0)
        distance = rows + offset - cols
        causal = _additive((distance >= nearest) & (distance <= farthest), dtype, kv_len)
        bias = causal if bias is None else bias + causal
    if nonpad_kv_seqlen is not None:
        padding = _additive(torch.arange(kv_len, device=device) < lengths, dtype, kv_len)
        bias = padding if bias is None else bias + padding
    heads, kv_heads = Q.shape[1], K.shape[1]
    if heads != kv_heads and heads % kv_heads == 0:
        K = K.repeat_interleave(heads // kv_heads, 1)
        V = V.repeat_interleave(heads // kv_heads, 1)
    if scale is None:
        scale = 1.0 / math.sqrt(Q.shape[-1])
    # Both sides scaled by √scale rounded to Q's type, as onnx's function body does.
    root = torch.tensor(math.sqrt(scale), dtype=dtype, device=device)
    scores = (Q * root) @ (K * root).transpose(-1, -2)
    if softcap and softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    qk_output = scores
    logits = scores if bias is None else scores + bias
    if qk_matmul_output_mode == 2:
        qk_output = logits
    if softmax_dtype is not None:
        logits = logits.to(softmax_dtype)
    if bias is not None:
        # A row with no allowed key: its softmax is defined as zeros (not NaN).
        blocked = torch.isneginf(bias.amax(-1, keepdim=True))
        logits = torch.where(blocked, torch.zeros_like(logits), logits)
        probabilities = _softmax(logits)
        probabilities = torch.where(blocked, torch.zeros_like(probabilities),
                                    probabilities)
    else:
        probabilities = _softmax(logits)
    if qk_matmul_output_mode == 3:
        qk_output = probabilities
    Y = probabilities.to(dtype) @ V
    if three_d:
        Y = Y.transpose(1, 2).reshape(batch, q_len, -1)
    return Y, present_key, present_value, qk_output.to(dtype)


def rotary_embedding(X, cos_cache, sin_cache, position_ids=None, *, interleaved=0,
                     rotary_embedding_dim=0, num_heads=None):
    """ONNX RotaryEmbedding (https://onnx.ai/onnx/operators/onnx__RotaryEmbedding.html):
    X is (batch, heads, sequence, head_size) or (batch, sequence, hidden) with
    ``num_heads``; the first ``rotary_embedding_dim`` features of each head are rotated
    pairwise (halves, or even/odd with ``interleaved``) by the cached cos/sin of each
    position (``cos_cache[position_ids]``, or per (batch, sequence) without ids)."""
    shape = X.shape
    if X.dim() == 4:
        x = X.transpose(1, 2)                      # (batch, sequence, heads, head_size)
    else:
        if not num_heads:
            raise ShapeError("RotaryEmbedding: a 3-D input needs the attribute num_heads")
        x = X.reshape(shape[0], shape[1], num_heads, shape[2] // num_heads)
    head_size = x.shape[-1]
    dim = rotary_embedding_dim or head_size
    if position_ids is not None:
        cos_cache = cos_cache[position_ids.long()]
        sin_cache = sin_cache[position_ids.long()]
    if cos_cache.shape[-1] != dim // 2 or sin_cache.shape[-1] != dim // 2:
        raise ShapeError(f"RotaryEmbedding: the last axis of cos_cache and sin_cache "
                         f"({cos_cache.shape[-1]}, {sin_cache.shape[-1]}) must be half the "
                         f"rotated dimension {dim}")
    cos, sin = cos_cache.unsqueeze(2), sin_cache.unsqueeze(2)
    rotated, kept = x[..., :dim], x[..., dim:]
    if interleaved:
        x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
    else:
        x1, x2 = rotated[..., :dim // 2], rotated[..., dim // 2:]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if interleaved:
        rotated = torch.stack([real, imag], -1).reshape(rotated.shape)
    else:
        rotated = torch.cat([real, imag], -1)
    y = torch.cat([rotated, kept], -1)
    return y.transpose(1, 2) if X.dim() == 4 else y.reshape(shape)


LINEAR_UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


def linear_attention(query, key, value, past_state=None, decay=None, beta=None, *,
                     q_num_heads, kv_num_heads, scale=0.0, update_rule="gated_delta"):
    """(output, present_state) of ONNX LinearAttention
    (https://onnx.ai/onnx/operators/onnx__LinearAttention.html), the recurrence run
    token by token: the state S (batch, kv heads, d_k, d_v) decays by exp(decay)
    ('gated', 'gated_delta'), takes k ⊗ v, or β·k ⊗ (v − Sᵀk) with the delta rule
    ('delta', 'gated_delta'), and each query head reads scale·qᵀS of its KV head.
    Computed in float32 at least, as the operator's reference."""
    if update_rule not in LINEAR_UPDATE_RULES:
        raise ShapeError(f"LinearAttention: update_rule {update_rule!r} is not one of "
                         f"{LINEAR_UPDATE_RULES}")
    gating, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta",
                                                                            "gated_delta")
    if gating != (decay is not None) or delta != (beta is not None):
        raise ShapeError(f"LinearAttention: update_rule {update_rule!r} "
                         f"{'needs' if gating else 'forbids'} the input decay and "
                         f"{'needs' if delta else 'forbids'} the input beta")
    if not q_num_heads or not kv_num_heads or q_num_heads % kv_num_heads:
        raise ShapeError(f"LinearAttention: q_num_heads ({q_num_heads}) must be a positive "
                         f"multiple of kv_num_heads ({kv_num_heads})")
    dtype = query.dtype
    compute = torch.promote_types(dtype, torch.float32)
    batch, steps = query.shape[0], query.shape[1]
    q = _split_heads(query.to(compute), q_num_heads, "query")
    k = _split_heads(key.to(compute), kv_num_heads, "key")
    v = _split_heads(value.to(compute), kv_num_heads, "value")
    d_k, d_v = q.shape[-1], v.shape[-1]
    if gating:
        per_head = decay.shape[-1] == kv_num_heads
        decay = decay.to(compute).reshape(batch, steps, kv_num_heads,
                                          1 if per_head else d_k)
        decay = decay.transpose(1, 2)                      # (batch, heads, steps, 1 or d_k)
    if delta:
        beta = beta.to(compute).reshape(batch, steps, beta.shape[-1], 1).transpose(1, 2)
    state_dtype = dtype if past_state is None else past_state.dtype
    state = (q.new_zeros((batch, kv_num_heads, d_k, d_v)) if past_state is None
             else past_state.to(compute))
    group = q_num_heads // kv_num_heads
    factor = scale if scale else 1.0 / math.sqrt(d_k)
    outputs = []
    for t in range(steps):
        k_t, v_t = k[:, :, t], v[:, :, t]
        if gating:
            state = state * torch.exp(decay[:, :, t]).unsqueeze(-1)
        if delta:
            retrieved = (state * k_t.unsqueeze(-1)).sum(-2)          # Sᵀk: (b, h, d_v)
            v_t = beta[:, :, t] * (v_t - retrieved)
        state = state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
        read = state.repeat_interleave(group, 1) if group > 1 else state
        outputs.append(factor * (q[:, :, t].unsqueeze(-1) * read).sum(-2))
    output = torch.stack(outputs, 2)                              # (b, h_q, steps, d_v)
    output = output.transpose(1, 2).reshape(batch, steps, q_num_heads * d_v)
    return output.to(dtype), state.to(state_dtype)


def flex_attention(Q, K, V, *, scale=None, score_mod=None, prob_mod=None,
                   softmax_dtype=None):
    """ONNX FlexAttention (ai.onnx.preview, https://onnx.ai/onnx/operators/): softmax
    attention of rank-4 Q, K, V (grouped-query heads as Attention) whose scores and
    probabilities pass through the ``score_mod`` and ``prob_mod`` functions (the
    operator's subgraphs, built as modules), computed in ``softmax_dtype`` (default
    float32, or float64 for float64 inputs)."""
    if Q.dim() != 4 or K.dim() != 4 or V.dim() != 4:
        raise ShapeError(f"FlexAttention: Q, K, V must be rank 4, got shapes "
                         f"{list(Q.shape)}, {list(K.shape)}, {list(V.shape)}")
    heads, kv_heads = Q.shape[1], K.shape[1]
    if heads != kv_heads:
        if heads % kv_heads:
            raise ShapeError(f"FlexAttention: {heads} query heads are not a multiple of "
                             f"{kv_heads} key/value heads")
        K = K.repeat_interleave(heads // kv_heads, 1)
        V = V.repeat_interleave(heads // kv_heads, 1)
    if scale is None:
        scale = 1.0 / math.sqrt(Q.shape[-1])
    # √scale (of the float32 scale) on both sides, in Q's type, as onnx's reference.
    root = torch.tensor(math.sqrt(float(torch.tensor(scale, dtype=torch.float32))),
                        dtype=Q.dtype, device=Q.device)
    compute = softmax_dtype or (torch.float64 if Q.dtype == torch.float64
                                else torch.float32)
    scores = ((Q * root) @ (K * root).transpose(-1, -2)).to(compute)
    if score_mod is not None:
        scores = score_mod(scores).to(compute)
    exp = torch.exp(scores - scores.amax(-1, keepdim=True))
    probabilities = exp / exp.sum(-1, keepdim=True)
    if prob_mod is not None:
        probabilities = prob_mod(probabilities).to(compute)
    return (probabilities @ V.to(compute)).to(V.dtype)


class AttentionOps:
    """``visit_<op>`` of the attention family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def visit_attention(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Attention.html"""
        a = op.attributes
        precision = a.get("softmax_precision")
        options = dict(scale=a.get("scale"), is_causal=bool(a.get("is_causal")),
                       q_num_heads=a.get("q_num_heads"), kv_num_heads=a.get("kv_num_heads"),
                       softcap=a.get("softcap") or 0.0,
                       qk_matmul_output_mode=a.get("qk_matmul_output_mode") or 0,
                       softmax_dtype=None if precision is None
                       else torch_dtype(precision),
                       left_window_size=a.get("left_window_size", -1),
                       right_window_size=a.get("right_window_size", -1))
        rank = self._rank(op.inputs[0])
        if rank is not None and rank == 3 and not (options["q_num_heads"]
                                                   and options["kv_num_heads"]):
            raise self.node_error(op, "3-D Q, K, V need the attributes q_num_heads and "
                                  "kv_num_heads", ShapeError)
        self._emit_outputs(op, lambda *inputs: attention(*inputs, **options))

    def visit_flexattention(self, op, network):
        """FlexAttention (ai.onnx.preview): ``score_mod`` and ``prob_mod`` subgraphs are
        built by this visitor into modules of their own (children of the network's
        module, so they move with it); they run inside the node, differentiably."""
        a = op.attributes
        precision = a.get("softmax_precision")
        options = dict(scale=a.get("scale"),
                       softmax_dtype=None if precision is None else torch_dtype(precision))
        for name in ("score_mod", "prob_mod"):
            graph = a.get(name)
            options[name] = None if graph is None else self._subgraph(op, name, graph)
        self._emit(op, lambda Q, K, V: flex_attention(Q, K, V, **options))

    def _subgraph(self, op, name, graph):
        """A function of one tensor computing the one-input, one-output ``graph``."""
        if len(graph.input) != 1 or len(graph.output) != 1:
            raise self.node_error(op, f"the {name} subgraph must have one input and one "
                                  f"output, it has {len(graph.input)} and "
                                  f"{len(graph.output)}", ShapeError)
        proto = self.model.proto
        imports = (list(proto.opset_import) if proto is not None
                   else [onnx.helper.make_opsetid("", self.model.opset)])
        model = onnx.helper.make_model(graph, opset_imports=imports)
        model.ir_version = proto.ir_version if proto is not None else model.ir_version
        network_of = inner_network_factory(BRIDGE)
        inner = network_of(load_and_parse_model(model, check=False)).module
        # One child per node and attribute: a rebuild replaces it rather than adding one.
        child = "subgraph_" + "".join(c if c.isalnum() else "_"
                                      for c in f"{op.name}_{name}")
        self.module.add_module(child, inner)
        source, target = graph.input[0].name, graph.output[0].name
        return lambda tensor: inner(**{source: tensor})[target]

    def visit_linearattention(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__LinearAttention.html (``chunk_size`` is a
        tuning hint without effect on the result)."""
        a = op.attributes
        options = dict(q_num_heads=a.get("q_num_heads"), kv_num_heads=a.get("kv_num_heads"),
                       scale=a.get("scale") or 0.0,
                       update_rule=text(a.get("update_rule"), "gated_delta"))
        self._emit_outputs(op, lambda *inputs: linear_attention(*inputs, **options))

    def visit_rotaryembedding(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__RotaryEmbedding.html"""
        a = op.attributes
        options = dict(interleaved=a.get("interleaved") or 0,
                       rotary_embedding_dim=a.get("rotary_embedding_dim") or 0,
                       num_heads=a.get("num_heads"))
        self._emit(op, lambda *inputs: rotary_embedding(*inputs, **options))


__all__ = ["AttentionOps"]
