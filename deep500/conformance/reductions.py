"""How many terms each output element of an operator sums: the ``n`` of the rounding error
bound ``gamma_n`` that :mod:`deep500.conformance.precision` grants low-precision results
(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., 2002, Lemma 3.1).

One rule per operator that reduces, read from its inputs' shapes and attributes as the
ONNX operator specifications define them; every other operator sums nothing (``0``).
Chained reductions add up (attention sums the head dimension in ``Q K^T`` and the key
positions in ``softmax(.) V``), since the relative errors of a product add.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import onnx
from onnx import helper

Shape = Sequence[int] | None
_Rule = Callable[[list, dict], int]


def _matmul(shapes: list, attributes: dict) -> int:
    """MatMul: A's last dimension (the inner dimension of the product)."""
    return _dim(shapes, 0, -1)


def _gemm(shapes: list, attributes: dict) -> int:
    """Gemm: the inner dimension K of A (M, K), or of A^T when transA."""
    return _dim(shapes, 0, 0 if attributes.get("transA", 0) else 1)


def _filter(shapes: list, attributes: dict) -> int:
    """Conv, CausalConvWithState: one output sums the weight's (C/group, k1, k2, ...)."""
    weight = _shape(shapes, 1)
    return math.prod(weight[1:]) if weight else 0


def _attention(shapes: list, attributes: dict) -> int:
    """Attention, FlexAttention: the head size (``Q K^T``) plus the key positions, past and
    present (``softmax(.) V``). 3D inputs (B, S, heads * head size) pack the heads into the
    last dimension; 4D ones are (B, heads, S, head size), past_key (input 4) too."""
    query, key, past_key = _shape(shapes, 0), _shape(shapes, 1), _shape(shapes, 4)
    if not query or not key or len(query) != len(key) or len(query) not in (3, 4):
        return 0
    if len(query) == 3:
        head = query[-1] // max(1, attributes.get("q_num_heads", 1))
        positions = key[1]
    else:
        head, positions = query[-1], key[-2]
    past = past_key[-2] if past_key and len(past_key) == 4 else 0
    return head + positions + past


def _linear_attention(shapes: list, attributes: dict) -> int:
    """LinearAttention: the recurrent state sums a key-value product per position (T), and
    each output reads it through a key-sized dot product (d_k); inputs are (B, T, H d)."""
    query, key = _shape(shapes, 0), _shape(shapes, 1)
    if not query or not key or len(query) != 3 or len(key) != 3:
        return 0
    return query[1] + key[-1] // max(1, attributes.get("kv_num_heads", 1))


def _einsum(shapes: list, attributes: dict) -> int:
    """Einsum: the product of the sizes of the labels that the output does not keep."""
    equation = attributes.get("equation", b"")
    equation = equation.decode() if isinstance(equation, bytes) else str(equation)
    inputs, _, output = equation.replace(" ", "").partition("->")
    terms = inputs.split(",")
    if "->" not in equation:
        letters = "".join(terms).replace(".", "")
        output = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    sizes = {}
    for index, term in enumerate(terms):
        shape = _shape(shapes, index)
        if shape is None:
            return 0
        sizes.update(_label_sizes(term, shape))
    return math.prod(size for label, size in sizes.items() if label not in output)


def _label_sizes(term: str, shape: Sequence[int]) -> dict[str, int]:
    """Each label of one Einsum operand and its dimension (``...`` covers the middle)."""
    head, ellipsis, tail = term.partition("...")
    if not ellipsis:
        return dict(zip(head, shape))
    labels = dict(zip(head, shape[:len(head)]))
    labels.update(zip(tail, shape[len(shape) - len(tail):]))
    return labels


RULES: dict[str, _Rule] = {
    "MatMul": _matmul, "Gemm": _gemm, "Conv": _filter, "CausalConvWithState": _filter,
    "Attention": _attention, "FlexAttention": _attention,
    "LinearAttention": _linear_attention, "Einsum": _einsum}


def reduction_length(op_type: str, model: onnx.ModelProto, values: dict) -> int:
    """How many terms each output element of the case's operator ``op_type`` sums, from
    ``values`` (``{graph input name: array}``, initializers included). The operator's
    inputs are its node's when the graph holds one; an expanded function body has none, so
    its graph inputs stand in, in order (a twin's node is better: see
    :func:`deep500.conformance.cases.load_cases`)."""
    rule = RULES.get(op_type)
    if rule is None:
        return 0
    node = next((n for n in model.graph.node if n.op_type == op_type), None)
    if node is not None:
        names = list(node.input)
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    else:
        stored = {t.name for t in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in stored]
        attributes = {}
    shapes = [tuple(values[name].shape) if name in values and hasattr(values[name], "shape")
              else None for name in names]
    return int(rule(shapes, attributes))


def _shape(shapes: list, index: int) -> Shape:
    return shapes[index] if index < len(shapes) else None


def _dim(shapes: list, index: int, axis: int) -> int:
    shape = _shape(shapes, index)
    return int(shape[axis]) if shape and -len(shape) <= axis < len(shape) else 0
