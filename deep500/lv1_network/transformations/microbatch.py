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


def microbatch_convolutions(model, micro_batch: int, batch_size: int | None = None,
                            op_types=("Conv",)) -> onnx.ModelProto:
    """A copy of ``model`` whose convolutions run in micro-batches of ``micro_batch``.

    Args:
        model: an ``onnx.ModelProto`` or a path.
        micro_batch: samples per micro-batch (the last one may be smaller).
        batch_size: the batch size, if the model's batch dimension is symbolic.
    """
    proto, source = load_model_proto(model)
    if micro_batch < 1:
        raise Deep500Error(f"micro_batch must be at least 1, got {micro_batch}")
    _require_opset(proto, 13)  # Split with sizes as an input
    result = onnx.ModelProto()
    result.CopyFrom(proto)
    graph = result.graph
    nodes = []
    for index, node in enumerate(graph.node):
        if node.op_type not in op_types:
            nodes.append(node)
            continue
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
