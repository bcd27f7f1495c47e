"""Einsum: the Einstein summation of the inputs described by ``equation`` (explicit
``ij,jk->ik`` or implicit ``ij,jk`` form, with ``...`` for broadcast dimensions).
https://onnx.ai/onnx/operators/onnx__Einsum.html

The equation is first rewritten with a letter for every ellipsis dimension and the
inputs broadcast to full size, so that every label has one size. The gradient of input i
is then another einsum: the output gradient contracted with the other inputs onto the
distinct labels of input i, broadcast along labels only input i has, written onto the
diagonal for repeated labels (``ii``), and summed over the broadcast dimensions.
"""
from __future__ import annotations

import string

import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import ShapeError


class _Plan:
    """The equation with explicit labels for ``shapes``: ``terms`` (one label string per
    input), ``output``, ``sizes`` (label -> size) and, per input, the shape with size-1
    axes inserted for missing ellipsis dimensions (``padded``)."""

    def __init__(self, op_type: str, equation: str, shapes: list):
        def fail(why):
            return ShapeError(f"{op_type}: equation {equation!r} does not fit inputs of shapes "
                              f"{[tuple(s) for s in shapes]}: {why}")

        text = equation.replace(" ", "")
        lhs, arrow, rhs = text.partition("->")
        inputs = lhs.split(",")
        if len(inputs) != len(shapes):
            raise fail(f"it names {len(inputs)} inputs")
        used = set(text) - set(".,->")
        if any(c not in string.ascii_letters for c in used):
            raise fail("labels must be letters")
        spare = [c for c in string.ascii_letters if c not in used]
        ranks = []
        for term, shape in zip(inputs, shapes):
            labels = len(term.replace("...", ""))
            if ("..." in term and labels > len(shape)) or ("..." not in term
                                                          and labels != len(shape)):
                raise fail(f"term {term!r} does not match rank {len(shape)}")
            ranks.append(len(shape) - labels if "..." in term else 0)
        ellipsis = "".join(spare[:max(ranks, default=0)])
        self.terms, self.padded, self.sizes = [], [], {}
        for term, shape, rank in zip(inputs, shapes, ranks):
            head, dots, tail = term.partition("...")
            full = head + (ellipsis if dots else "") + tail
            padded = list(shape)
            if dots:
                padded[len(head):len(head)] = [1] * (len(ellipsis) - rank)
            for label, size in zip(full, padded):
                known = self.sizes.get(label, 1)
                if size != known and 1 not in (size, known):
                    raise fail(f"label {label!r} has sizes {known} and {size}")
                self.sizes[label] = max(known, size)
            self.terms.append(full)
            self.padded.append(tuple(padded))
        if arrow:
            self.output = rhs.replace("...", ellipsis)
        else:   # implicit: the ellipsis, then the labels used once, alphabetically
            counts = "".join(inputs)
            self.output = ellipsis + "".join(sorted(c for c in set(counts) - {"."}
                                                    if counts.count(c) == 1))
        if any(c not in "".join(self.terms) for c in self.output) or \
                len(set(self.output)) != len(self.output):
            raise fail(f"output {self.output!r} must name distinct input labels")

    def full_shape(self, term: str) -> tuple:
        return tuple(self.sizes[c] for c in term)

    def expanded(self, i: int, x: np.ndarray) -> np.ndarray:
        """Input i reshaped to its padded shape and broadcast to its labels' sizes."""
        return np.broadcast_to(x.reshape(self.padded[i]), self.full_shape(self.terms[i]))


@register("Einsum")
class Einsum(ReferenceOp):
    defaults = {"equation": None}

    def _plan(self, inputs) -> _Plan:
        equation = self.attr("equation")
        if isinstance(equation, bytes):
            equation = equation.decode()
        if not equation:
            raise ShapeError(f"{self.op_type}: the equation attribute is required")
        return _Plan(self.op_type, equation, [np.shape(x) for x in inputs])

    @staticmethod
    def _einsum(subscripts: str, *operands):
        # np.einsum has no loops for extension types (bfloat16): compute those in float32.
        operands = [o if o.dtype.kind in "biufc" else o.astype(np.float32) for o in operands]
        return np.einsum(subscripts, *operands, optimize=len(operands) > 2)

    def forward(self, *inputs):
        inputs = [np.asarray(x) for x in inputs]
        plan = self._plan(inputs)
        operands = [plan.expanded(i, x) for i, x in enumerate(inputs)]
        result = self._einsum(",".join(plan.terms) + "->" + plan.output, *operands)
        return np.asarray(result).astype(inputs[0].dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        inputs = [np.asarray(x) for x in fwd_inputs]
        if grads[0] is None or not all(np.issubdtype(x.dtype, np.floating) for x in inputs):
            return [np.zeros_like(x) if np.issubdtype(x.dtype, np.floating) else None
                    for x in inputs]
        plan = self._plan(inputs)
        operands = [plan.expanded(i, x) for i, x in enumerate(inputs)]
        dY = np.asarray(grads[0])
        result = []
        for i, (x, term) in enumerate(zip(inputs, plan.terms)):
            distinct = "".join(dict.fromkeys(term))
            others = [t for j, t in enumerate(plan.terms) if j != i]
            available = set(plan.output).union(*others)
            reached = "".join(c for c in distinct if c in available)
            G = self._einsum(",".join([plan.output] + others) + "->" + reached, dY,
                             *[o for j, o in enumerate(operands) if j != i])
            # Labels only input i has were summed in the forward: broadcast along them.
            missing = [k for k, c in enumerate(distinct) if c not in available]
            G = np.broadcast_to(np.expand_dims(G, missing) if missing else G,
                                plan.full_shape(distinct))
            if distinct == term:
                dX = np.array(G, dtype=x.dtype)
            else:   # repeated labels: the gradient lives on the diagonal
                dX = np.zeros(plan.full_shape(term), G.dtype)
                np.einsum(term + "->" + distinct, dX)[...] = G
            # Sum over the dimensions that were broadcast from size 1, then drop the
            # inserted ellipsis axes.
            broadcast = tuple(k for k, (p, f) in enumerate(zip(plan.padded[i], dX.shape))
                              if p == 1 and f != 1)
            if broadcast:
                dX = dX.sum(axis=broadcast, keepdims=True)
            result.append(dX.reshape(x.shape).astype(x.dtype, copy=False))
        return result
