"""The floor of an im2col executor: a model's matrix products alone, timed in NumPy.

An executor that lowers Conv to im2col and one BLAS product (as Deep500's reference
executor and onnx's ``ReferenceEvaluator`` both do) and runs Gemm/MatMul through BLAS
cannot run a model faster than the sum of those products. For every Conv (per group:
(C_out/g) x (C_in/g * kernel) times (C_in/g * kernel) x (N * output pixels)), Gemm and
MatMul of the model, at the shapes of its shape-inferred graph, the product of random
float32 matrices of those shapes is timed (best of ``repeats`` after one warm-up call),
without im2col, padding, bias, normalisation or activations. Dividing an interpreter's
time by this floor gives the largest speedup any im2col + BLAS executor can have over it
on this machine.
"""
from __future__ import annotations

import time

import numpy as np


def _shapes(model) -> tuple[dict, dict]:
    from onnx import shape_inference
    inferred = shape_inference.infer_shapes(model)
    graph = inferred.graph
    values = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(graph.value_info) + list(graph.input) + list(graph.output)}
    initializers = {i.name: list(i.dims) for i in graph.initializer}
    return {**values, **initializers}, initializers


def _attribute(node, name: str, default):
    for attribute in node.attribute:
        if attribute.name == name:
            return attribute.i
    return default


def matrix_products(model) -> list[tuple[int, int, int, int]]:
    """(count, M, K, N) per Conv, Gemm and MatMul node: ``count`` products of an M x K by
    a K x N matrix (count = groups for a Conv, the batch for a batched MatMul)."""
    shapes, _ = _shapes(model)
    products = []
    for node in model.graph.node:
        if node.op_type == "Conv":
            weight, output = shapes[node.input[1]], shapes[node.output[0]]
            groups = _attribute(node, "group", 1)
            products.append((groups, weight[0] // groups, int(np.prod(weight[1:])),
                             output[0] * int(np.prod(output[2:]))))
        elif node.op_type == "Gemm":
            a, b = shapes[node.input[0]], shapes[node.input[1]]
            m, k = (a[1], a[0]) if _attribute(node, "transA", 0) else (a[0], a[1])
            n = b[0] if _attribute(node, "transB", 0) else b[1]
            products.append((1, m, k, n))
        elif node.op_type == "MatMul":
            a, b = shapes[node.input[0]], shapes[node.input[1]]
            if len(a) >= 2 and len(b) >= 2:
                batch = int(np.prod(a[:-2])) if len(a) > 2 else 1
                products.append((batch, a[-2], a[-1], b[-1]))
    if any(0 in product for product in products):
        raise ValueError("the model has symbolic dimensions; give it a fixed batch size")
    return products


def gemm_floor_seconds(model, repeats: int = 5, seed: int = 0) -> tuple[float, float]:
    """(seconds, GFLOP) of all the model's matrix products, each the best of
    ``repeats`` calls of ``numpy.matmul`` on random float32 matrices of its shape."""
    rng = np.random.default_rng(seed)
    total, flops = 0.0, 0
    for count, m, k, n in matrix_products(model):
        a = rng.standard_normal((count, m, k), dtype=np.float32)
        b = rng.standard_normal((count, k, n), dtype=np.float32)
        out = np.empty((count, m, n), np.float32)
        np.matmul(a, b, out=out)
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            np.matmul(a, b, out=out)
            best = min(best, time.perf_counter() - started)
        total += best
        flops += 2 * count * m * k * n
    return total, flops / 1e9
