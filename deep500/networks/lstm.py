"""LSTM classifier of token sequences (Hochreiter & Schmidhuber, "Long Short-Term
Memory", Neural Computation 1997; the ONNX LSTM without peepholes).

Input ``input``: **int64 token ids** of shape [batch, T] (T = ``input_shape[0]``), ids in
[0, ``vocab``). Output ``output``: [batch, classes] logits.

Graph: token embedding (``Gather``, width ``embedding``) → ``Transpose`` to time-major →
one forward ``LSTM`` (``hidden`` units) → its last hidden state Y_h (``Squeeze``) →
``Gemm`` to ``classes``. Padding tokens are ordinary inputs (no ``sequence_lens``): the
LSTM reads them like any token and learns to carry its state through them.

Parameters: vocab·E + 4H·E + 4H·H + 8H + H·C + C with E = ``embedding``, H = ``hidden``,
C = ``classes`` (``torch.nn.LSTM`` counts the same: its two bias vectors are ONNX's B).
"""
from __future__ import annotations

import onnx

from deep500.networks._attention import check_vocab, sequence_length
from deep500.networks._builder import GraphBuilder
from deep500.utils.errors import Deep500Error


def lstm(input_shape=(32,), classes: int = 2, vocab: int = 16, embedding: int = 32,
         hidden: int = 64, *, batch_size="N", dtype: str = "float32", seed: int = 0,
         name: str = "lstm") -> onnx.ModelProto:
    """LSTM classifier of int64 token ids [batch, T] into ``classes`` logits (see the
    module)."""
    steps = sequence_length(name, input_shape)
    check_vocab(name, vocab)
    if min(embedding, hidden, classes) < 1:
        raise Deep500Error(f"model {name!r}: embedding, hidden and classes must be "
                           f"positive, got {embedding}, {hidden}, {classes}")
    b = GraphBuilder(name, (steps,), batch_size, dtype, seed)
    x = b.embedding(b.token_input(), vocab, embedding, name="embed")
    logits = b.gemm(b.lstm(x, hidden, name="lstm"), classes, name="head")
    return b.build(logits, doc=f"LSTM classifier: T={steps}, vocab={vocab}, "
                               f"embedding={embedding}, hidden={hidden}, {classes} classes; "
                               f"input: int64 token ids")
