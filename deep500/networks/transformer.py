"""Transformer encoder classifier of token sequences (Vaswani et al., "Attention Is All
You Need", NeurIPS 2017; pre-LN blocks as in :mod:`deep500.networks._attention`).

Input ``input``: **int64 token ids** of shape [batch, T] (T = ``input_shape[0]``), ids in
[0, ``vocab``); ``pad_token`` marks padding. Output ``output``: [batch, classes] logits.

Graph: token embedding (``Gather``) + learned position embedding (``Add``) → ``depth``
pre-LN encoder blocks (multi-head self-attention whose keys at padding positions are
masked: ``Equal(input, pad_token)`` → ``Where`` of −1e9 into the scores; GELU
feed-forward of width ``ffn``) → final ``LayerNormalization`` → mean over the non-padding
positions (weights keep/count, one ``MatMul``) → ``Gemm`` to ``classes``.

Parameters: vocab·D + T·D + depth·(4·(D² + D) + 2·D·F + F + D + 4·D) + 2·D + D·C + C
with D = ``hidden``, F = ``ffn``, C = ``classes``.
"""
from __future__ import annotations

import numpy as np
import onnx

from deep500.networks._attention import (check_heads, check_sizes, check_vocab,
                                         sequence_length, transformer_block)
from deep500.networks._builder import GraphBuilder


def masked_mean(b: GraphBuilder, x: str, is_pad: str, name: str = "pool") -> str:
    """Mean of x (per sample (T, D)) over the positions where ``is_pad`` (bool, (T,))
    is False; a sequence of padding only gives 0."""
    steps, width = b.shapes[x]
    pad = b.node("Cast", [is_pad], (steps,), f"{name}.pad_float", to=b.onnx_dtype)
    keep = b.node("Sub", [b.constant(1.0, f"{name}.one"), pad], (steps,), f"{name}.keep")
    count = b.node("ReduceSum", [keep, b.constant(np.array([1], np.int64), f"{name}.axes")],
                   (1,), f"{name}.count", keepdims=1)
    count = b.node("Max", [count, b.constant(1.0, f"{name}.at_least_one")], (1,),
                   f"{name}.count_min1")
    weights = b.node("Div", [keep, count], (steps,), f"{name}.weights")
    weights = b.node("Unsqueeze", [weights, b.constant(np.array([1], np.int64),
                                                       f"{name}.row_axis")],
                     (1, steps), f"{name}.weights_row")
    pooled = b.node("MatMul", [weights, x], (1, width), f"{name}.sum")
    return b.node("Flatten", [pooled], (width,), name, axis=1)


def transformer(input_shape=(32,), classes: int = 2, vocab: int = 16, hidden: int = 32,
                heads: int = 4, depth: int = 2, ffn: int | None = None, pad_token: int = 0,
                *, batch_size="N", dtype: str = "float32", seed: int = 0,
                name: str = "transformer") -> onnx.ModelProto:
    """Encoder classifier of int64 token ids [batch, T] into ``classes`` logits (see the
    module); ``ffn`` defaults to 4·``hidden``."""
    steps = sequence_length(name, input_shape)
    check_vocab(name, vocab, pad_token=pad_token)
    check_heads(name, hidden, heads)
    ffn = check_sizes(name, hidden, ffn, depth, classes)
    b = GraphBuilder(name, (steps,), batch_size, dtype, seed)
    tokens = b.token_input()
    x = b.positional_embedding(b.embedding(tokens, vocab, hidden, name="embed"))
    is_pad = b.node("Equal", [tokens, b.constant(np.int64(pad_token), "pad_token")],
                    (steps,), "is_pad")
    key_mask = b.node("Unsqueeze", [is_pad, b.constant(np.array([1, 2], np.int64),
                                                       "mask_axes")],
                      (1, 1, steps), "key_mask")                      # [N, 1, 1, T]
    for index in range(depth):
        x = transformer_block(b, x, heads, ffn, key_mask, f"layer{index}")
    x = masked_mean(b, b.layernorm(x, name="norm"), is_pad)
    logits = b.gemm(x, classes, name="head")
    return b.build(logits, doc=f"Transformer encoder classifier: T={steps}, vocab={vocab}, "
                               f"hidden={hidden}, heads={heads}, depth={depth}, ffn={ffn}, "
                               f"{classes} classes; input: int64 token ids, padding "
                               f"token {pad_token}")
