"""Multi-head self-attention and the pre-LN transformer block, shared by the zoo's
``transformer`` (encoder) and ``gpt`` (decoder) models.

Attention (Vaswani et al., "Attention Is All You Need", NeurIPS 2017, Sec. 3.2) is
written with the plain ONNX operators that ``torch.onnx.export`` also emits for it:
per head h, softmax(Q_h K_hᵀ / √d_h + mask) V_h with Q, K, V = x·W + b (MatMul, Add),
heads split by Reshape [0, T, H, d_h] and Transpose, scores by MatMul, Div, Softmax over
the keys, heads merged by Transpose and Reshape [0, T, D], then an output projection.
Masked scores are replaced by :data:`MASKED_SCORE` with ``Where`` (a finite "−∞": a row
whose keys are all masked gives a uniform softmax instead of NaN).

The block is pre-LN (Xiong et al., "On Layer Normalization in the Transformer
Architecture", ICML 2020; as GPT-2): x + Attn(LN(x)), then x + FFN(LN(x)) with
FFN = Linear → GELU (erf form) → Linear.
"""
from __future__ import annotations

import math

import numpy as np

from deep500.networks._builder import GraphBuilder
from deep500.utils.errors import Deep500Error

MASKED_SCORE = -1e9


def check_heads(model: str, width: int, heads: int) -> int:
    """The per-head width; ``width`` must split evenly into ``heads`` heads."""
    if heads < 1 or width < 1 or width % heads:
        raise Deep500Error(f"model {model!r}: hidden={width} must be a positive multiple "
                           f"of heads={heads}")
    return width // heads


def self_attention(b: GraphBuilder, x: str, heads: int, mask: str, name: str) -> str:
    """Multi-head self-attention of x (per sample (T, D)); ``mask`` is a bool tensor
    broadcastable to the scores (per sample (H, T, T)) that is True where a query must
    not attend to a key."""
    name = b._unique(name)
    steps, width = b.shapes[x]
    head = check_heads(b.name, width, heads)
    split = b.constant(np.array([0, steps, heads, head], np.int64), f"{name}.split_shape")
    merge = b.constant(np.array([0, steps, width], np.int64), f"{name}.merge_shape")

    def project(role: str, perm) -> str:
        y = b.linear(x, width, name=f"{name}.{role}")
        y = b.node("Reshape", [y, split], (steps, heads, head), f"{name}.{role}_heads")
        shape = tuple(np.array((steps, heads, head))[np.array(perm[1:]) - 1])
        return b.node("Transpose", [y], shape, f"{name}.{role}_t", perm=list(perm))

    query = project("q", (0, 2, 1, 3))      # [N, H, T, d_h]
    key = project("k", (0, 2, 3, 1))        # [N, H, d_h, T]
    value = project("v", (0, 2, 1, 3))      # [N, H, T, d_h]
    scores = b.node("MatMul", [query, key], (heads, steps, steps), f"{name}.scores")
    scores = b.node("Div", [scores, b.constant(math.sqrt(head), f"{name}.sqrt_dk")],
                    (heads, steps, steps), f"{name}.scaled")
    scores = b.node("Where", [mask, b.constant(MASKED_SCORE, f"{name}.masked_score"),
                              scores], (heads, steps, steps), f"{name}.masked")
    weights = b.node("Softmax", [scores], (heads, steps, steps), f"{name}.softmax", axis=-1)
    context = b.node("MatMul", [weights, value], (heads, steps, head), f"{name}.context")
    context = b.node("Transpose", [context], (steps, heads, head), f"{name}.context_t",
                     perm=[0, 2, 1, 3])
    context = b.node("Reshape", [context, merge], (steps, width), f"{name}.merged")
    return b.linear(context, width, name=f"{name}.out")


def transformer_block(b: GraphBuilder, x: str, heads: int, ffn: int, mask: str,
                      name: str) -> str:
    """x + Attn(LN(x)), then x + Linear(GELU(Linear(LN(x)))) (see the module)."""
    attended = self_attention(b, b.layernorm(x, name=f"{name}.norm1"), heads, mask,
                              f"{name}.attn")
    x = b.add(x, attended, name=f"{name}.residual1")
    hidden = b.gelu(b.linear(b.layernorm(x, name=f"{name}.norm2"), ffn,
                             name=f"{name}.ffn1"), name=f"{name}.gelu")
    return b.add(x, b.linear(hidden, b.shapes[x][-1], name=f"{name}.ffn2"),
                 name=f"{name}.residual2")


def sequence_length(model: str, input_shape) -> int:
    """T of a sequence model's ``input_shape`` (T,)."""
    shape = tuple(input_shape)
    if len(shape) != 1 or int(shape[0]) < 1:
        raise Deep500Error(f"model {model!r}: input_shape is (sequence_length,) for int64 "
                           f"token inputs of shape [batch, sequence_length], got {shape}")
    return int(shape[0])


def check_vocab(model: str, vocab: int, **tokens) -> None:
    """``vocab`` ≥ 2 and each named token id within it."""
    if int(vocab) < 2:
        raise Deep500Error(f"model {model!r}: vocab must be at least 2, got {vocab}")
    for key, token in tokens.items():
        if token is not None and not 0 <= int(token) < vocab:
            raise Deep500Error(f"model {model!r}: {key}={token} is not a token id in "
                               f"[0, vocab={vocab})")


def check_sizes(model: str, hidden: int, ffn, depth: int, classes: int) -> int:
    """The feed-forward width (``ffn``, default 4·``hidden``), after checking that it,
    ``depth`` and ``classes`` are positive."""
    ffn = 4 * hidden if ffn is None else int(ffn)
    if depth < 1 or ffn < 1 or classes < 1:
        raise Deep500Error(f"model {model!r}: depth, ffn and classes must be positive, got "
                           f"{depth}, {ffn}, {classes}")
    return ffn
