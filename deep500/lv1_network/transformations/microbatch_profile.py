"""Measuring each convolution of a network at each micro-batch size: the table that
``microbatch_choice.choose_microbatches`` chooses from (µ-cuDNN benchmarks every
convolution's options before it solves, Oyama et al., IEEE CLUSTER 2018, §IV).

Each convolution is cut out of the network into a model of its own (its input at the
network's batch size, its weights, its output), micro-batched by
``microbatch_convolutions`` at each candidate size, and run by the executor the
network will run on: the median of ``reruns`` timed runs (after one warm-up) is its
time, and the peak memory of one more run (``PeakMemory("auto")``: the framework's own
allocator, tracemalloc for the reference executor) less the bytes of its output is its
workspace. The workspace so counts what the convolution allocates beyond its output:
im2col or scratch buffers, and, when micro-batched, the micro-batches' outputs before
they are concatenated.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from deep500.lv1_network.metrics import PeakMemory
from deep500.lv1_network.transformations.microbatch import microbatch_convolutions, node_key
from deep500.lv1_network.transformations.microbatch_choice import MicrobatchOption
from deep500.lv1_network.validation import test_executor_inference
from deep500.utils.errors import Deep500Error
from deep500.utils.onnx_interop.parser import load_model_proto
from deep500.utils.wallclock import WallclockTime


def candidate_sizes(batch_size: int) -> list[int]:
    """The batch and every power of two below it, largest first."""
    sizes = {batch_size}
    size = 1
    while size < batch_size:
        sizes.add(size)
        size *= 2
    return sorted(sizes, reverse=True)


def convolution_models(model, batch_size: int, op_types=("Conv",)) -> dict:
    """Each convolution of ``model`` as a model of its own: ``{node_key: (model, input
    name, input shape, numpy dtype)}``, the batch dimension set to ``batch_size``."""
    proto, source = load_model_proto(model)
    inferred = onnx.shape_inference.infer_shapes(proto)
    values = {v.name: v.type.tensor_type for v in
              list(inferred.graph.value_info) + list(inferred.graph.input)}
    initializers = {i.name: i for i in proto.graph.initializer}
    models = {}
    for index, node in enumerate(proto.graph.node):
        if node.op_type not in op_types:
            continue
        key = node_key(node, index)
        tensor = values.get(node.input[0])
        dims = [d.dim_value if d.HasField("dim_value") else None
                for d in tensor.shape.dim] if tensor is not None else []
        if not dims or None in dims[1:]:
            raise Deep500Error(f"{source}: the input of '{key}' has no static shape "
                               f"({node.input[0]}); micro-batch sizes can be chosen only "
                               f"for convolutions whose input shape is known")
        shape = [batch_size] + dims[1:]
        weights = [initializers[name] for name in node.input[1:] if name]
        if len(weights) != len([name for name in node.input[1:] if name]):
            raise Deep500Error(f"{source}: the weights of '{key}' are computed, not "
                               f"stored; it cannot be measured on its own")
        single = helper.make_node(node.op_type, [node.input[0], *node.input[1:]],
                                  ["output"], name=key)
        single.attribute.extend(node.attribute)
        graph = helper.make_graph(
            [single], f"{proto.graph.name}_{key}",
            [helper.make_tensor_value_info(node.input[0], tensor.elem_type, shape)],
            [helper.make_tensor_value_info("output", tensor.elem_type,
                                           [None] * len(shape))],
            initializer=weights)
        cut = helper.make_model(graph, opset_imports=list(proto.opset_import),
                                ir_version=proto.ir_version)
        models[key] = (cut, node.input[0], shape,
                       helper.tensor_dtype_to_np_dtype(tensor.elem_type))
    return models


def profile_convolutions(model, batch_size: int, make_executor, sizes=None,
                         reruns: int = 5, seed: int = 0) -> dict:
    """``{convolution: [MicrobatchOption per size]}`` for every convolution of
    ``model``, measured on executors from ``make_executor(onnx model)``.

    Args:
        sizes: the micro-batch sizes to try (default: ``candidate_sizes``).
    Raises:
        Deep500Error: the executor reports no peak memory.
    """
    sizes = sorted(set(sizes or candidate_sizes(batch_size)), reverse=True)
    table = {}
    for key, (cut, input_name, shape, dtype) in convolution_models(model,
                                                                   batch_size).items():
        x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
        options = []
        for size in sizes:
            measured = microbatch_convolutions(cut, size) if size < batch_size else cut
            executor = make_executor(measured)
            result = test_executor_inference(
                executor, {input_name: x},
                metrics=[WallclockTime(reruns=reruns, warmup=1), PeakMemory("auto")])
            peak = result["PeakMemory"].summary["peak_bytes"]
            if peak is None:
                raise Deep500Error(f"the {executor.framework} executor reports no peak "
                                   f"memory, so micro-batch sizes cannot be chosen for a "
                                   f"memory budget on it")
            output = int(np.asarray(result.outputs["output"]).nbytes)
            options.append(MicrobatchOption(
                size, float(result["WallclockTime"].summary["median"]),
                max(int(peak) - output, 0)))
        table[key] = options
    return table
