"""Micro-batching of convolutions (Oyama et al., "Accelerating Deep Learning Frameworks
with Micro-batches", IEEE CLUSTER 2018).

Each Conv node's input batch is split into micro-batches, convolved one at a time with
the same weights, and concatenated back. Samples are independent in a convolution, so
outputs and gradients are unchanged, while per-convolution workspace (e.g. im2col
buffers) shrinks with the micro-batch. The rewrite is on the ONNX graph, so every
executor runs it.
"""
from __future__ import annotations

import onnx
from onnx import helper, numpy_helper

import numpy as np

from deep500.utils.errors import Deep500Error
from deep500.utils.onnx_interop.parser import load_model_proto


def _batch_size(model: onnx.ModelProto, tensor: str) -> int | None:
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    for value in list(graph.value_info) + list(graph.input) + list(graph.output):
        if value.name == tensor:
            dims = value.type.tensor_type.shape.dim
            if dims and dims[0].HasField("dim_value"):
                return dims[0].dim_value
    return None


def node_key(node: onnx.NodeProto, index: int) -> str:
    """How a node is named in per-node micro-batch sizes: its name, or its operator
    type and position in the graph when it has none."""
    return node.name or f"{node.op_type}{index}"


def microbatch_convolutions(model, micro_batch, batch_size: int | None = None,
                            op_types=("Conv",)) -> onnx.ModelProto:
    """A copy of ``model`` whose convolutions run in micro-batches of ``micro_batch``.

    Args:
        model: an ``onnx.ModelProto`` or a path.
        micro_batch: samples per micro-batch (the last one may be smaller), one for
            every convolution, or a mapping from convolutions (``node_key``) to their
            own (convolutions it does not name keep the whole batch).
        batch_size: the batch size, if the model's batch dimension is symbolic.
    """
    proto, source = load_model_proto(model)
    per_node = dict(micro_batch) if isinstance(micro_batch, dict) else None
    for size in (per_node.values() if per_node is not None else [micro_batch]):
        if size < 1:
            raise Deep500Error(f"micro_batch must be at least 1, got {size}")
    _require_opset(proto, 13)  # Split with sizes as an input
    result = onnx.ModelProto()
    result.CopyFrom(proto)
    graph = result.graph
    if per_node is not None:
        known = {node_key(n, i) for i, n in enumerate(graph.node) if n.op_type in op_types}
        unknown = sorted(set(per_node) - known)
        if unknown:
            raise Deep500Error(f"{source}: no {'/'.join(op_types)} nodes named {unknown} "
                               f"to micro-batch; the model has {sorted(known)}")
    nodes = []
    for index, node in enumerate(graph.node):
        if node.op_type not in op_types:
            nodes.append(node)
            continue
        if per_node is not None:
            if node_key(node, index) not in per_node:
                nodes.append(node)
                continue
            micro_batch = per_node[node_key(node, index)]
        batch = _batch_size(proto, node.input[0]) or batch_size
        if batch is None:
            raise Deep500Error(f"{source}: node '{node.name or index}' has a symbolic batch "
                               f"size; pass batch_size= to micro-batch it")
        sizes = [micro_batch] * (batch // micro_batch)
        if batch % micro_batch:
            sizes.append(batch % micro_batch)
        if len(sizes) == 1:
            nodes.append(node)
            continue
        prefix = f"{node.name or node.op_type + str(index)}_microbatch"
        split_sizes = f"{prefix}_sizes"
        graph.initializer.append(numpy_helper.from_array(np.array(sizes, np.int64),
                                                         split_sizes))
        parts = [f"{prefix}_in{i}" for i in range(len(sizes))]
        outs = [f"{prefix}_out{i}" for i in range(len(sizes))]
        nodes.append(helper.make_node("Split", [node.input[0], split_sizes], parts,
                                      name=f"{prefix}_split", axis=0))
        for i, (part, out) in enumerate(zip(parts, outs)):
            micro = onnx.NodeProto()
            micro.CopyFrom(node)
            micro.name = f"{prefix}{i}"
            micro.input[0] = part
            del micro.output[:]
            micro.output.append(out)
            nodes.append(micro)
        nodes.append(helper.make_node("Concat", outs, [node.output[0]],
                                      name=f"{prefix}_concat", axis=0))
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(result)
    return result


def _require_opset(model: onnx.ModelProto, minimum: int) -> None:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version < minimum:
            raise Deep500Error(f"Micro-batching needs opset {minimum} or newer (Split with "
                               f"a sizes input); the model uses opset {opset.version}")
