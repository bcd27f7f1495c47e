"""Decoder-only transformer language model (GPT; Radford et al., "Language Models are
Unsupervised Multitask Learners", 2019: pre-LN blocks and a final LayerNorm, see
:mod:`deep500.networks._attention`).

Input ``input``: **int64 token ids** of shape [batch, T] (T = ``input_shape[0]``), ids in
[0, ``vocab``). Output ``output``: per-position next-token logits of shape
**[batch, classes, T]** — ``output[n, :, t]`` scores the token at position t + 1 given
tokens 0..t. The class axis is axis 1 as ONNX ``SoftmaxCrossEntropyLoss`` (and
``torch.nn.functional.cross_entropy``) take (N, C, d1), so ``loss="softmax_cross_entropy"``
with labels [batch, T] (the input shifted by one) averages the loss over every position.

Graph: token embedding (``Gather``) + learned position embedding (``Add``) → ``depth``
pre-LN blocks whose self-attention has a causal mask (a constant bool [T, T] that is True
above the diagonal, ``Where`` of −1e9 into the scores: position t sees positions ≤ t) →
final ``LayerNormalization`` → ``MatMul`` + ``Add`` to ``classes`` → ``Transpose``
[0, 2, 1]. The output head is not tied to the embedding.

``classes`` is the output vocabulary, by default also the input one (``vocab=None``).
Parameters: V·D + T·D + depth·(4·(D² + D) + 2·D·F + F + D + 4·D) + 2·D + D·C + C with
V = ``vocab``, D = ``hidden``, F = ``ffn``, C = ``classes``.
"""
from __future__ import annotations

import numpy as np
import onnx

from deep500.networks._attention import (check_heads, check_sizes, check_vocab,
                                         sequence_length, transformer_block)
from deep500.networks._builder import GraphBuilder


def gpt(input_shape=(32,), classes: int = 16, vocab: int | None = None, hidden: int = 32,
        heads: int = 4, depth: int = 2, ffn: int | None = None, *, batch_size="N",
        dtype: str = "float32", seed: int = 0, name: str = "gpt") -> onnx.ModelProto:
    """Causal language model of int64 token ids [batch, T] with per-position logits
    [batch, classes, T] (see the module); ``ffn`` defaults to 4·``hidden``."""
    steps = sequence_length(name, input_shape)
    vocab = classes if vocab is None else int(vocab)
    check_vocab(name, vocab)
    check_heads(name, hidden, heads)
    ffn = check_sizes(name, hidden, ffn, depth, classes)
    b = GraphBuilder(name, (steps,), batch_size, dtype, seed)
    tokens = b.token_input()
    x = b.positional_embedding(b.embedding(tokens, vocab, hidden, name="embed"))
    future = b.constant(np.triu(np.ones((steps, steps), bool), k=1), "causal_mask")
    for index in range(depth):
        x = transformer_block(b, x, heads, ffn, future, f"layer{index}")
    logits = b.linear(b.layernorm(x, name="norm"), classes, name="lm_head")
    logits = b.node("Transpose", [logits], (classes, steps), "logits", perm=[0, 2, 1])
    return b.build(logits, doc=f"GPT language model: T={steps}, vocab={vocab}, "
                               f"hidden={hidden}, heads={heads}, depth={depth}, ffn={ffn}, "
                               f"{classes} output classes; input: int64 token ids; output: "
                               f"[batch, classes, T] next-token logits")
