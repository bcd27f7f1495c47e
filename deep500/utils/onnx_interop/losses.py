"""Loss functions appended to an ONNX model as standard ONNX operators.

A loss written in the default ONNX domain runs on every executor that runs the model,
so training any model needs no framework-specific loss. :func:`add_loss` returns a new
model with one more graph input (the labels or targets) and one more graph output (the
scalar loss); the model's own outputs stay. Losses, by name in :data:`LOSSES`:

* ``softmax_cross_entropy``: ``SoftmaxCrossEntropyLoss(output, labels)``, reduction
  mean; ``output`` holds logits of shape (N, C, d1, ...), labels are int64 class indices
  of shape (N, d1, ...).
  https://onnx.ai/onnx/operators/onnx__SoftmaxCrossEntropyLoss.html
* ``cross_entropy``: ``NegativeLogLikelihoodLoss(Log(output), labels)``, reduction mean;
  ``output`` already holds probabilities.
  https://onnx.ai/onnx/operators/onnx__NegativeLogLikelihoodLoss.html
* ``mean_squared_error``: ``ReduceMean(Mul(d, d))`` over all axes with
  ``d = Sub(output, target)`` and keepdims=0; the target has the output's dtype and shape.
"""
from __future__ import annotations

from dataclasses import dataclass

import onnx
import onnx.shape_inference
from onnx import TensorProto, helper

from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError

MIN_OPSET = 13  # SoftmaxCrossEntropyLoss-13 and NegativeLogLikelihoodLoss-13

_FLOATS = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)


@dataclass
class _LossContext:
    """What a loss builder needs: the scored tensor, its type, and names to create."""
    output: str
    elem_type: int
    dims: list | None          # TensorShapeProto.Dimension list; None = unknown rank
    label: str
    loss: str
    names: "_Names"
    model_name: str


class _Names:
    """Fresh tensor and node names that collide with nothing in the graph."""

    def __init__(self, taken: set[str], prefix: str):
        self.taken, self.prefix = taken, prefix

    def __call__(self, base: str) -> str:
        name, index = f"{self.prefix}/{base}", 0
        while name in self.taken:
            index += 1
            name = f"{self.prefix}/{base}_{index}"
        self.taken.add(name)
        return name


def _dim_value(dim):
    if dim.HasField("dim_value"):
        return dim.dim_value
    return dim.dim_param or None


def _class_labels(ctx: _LossContext, loss_name: str) -> onnx.ValueInfoProto:
    """int64 labels of the output's shape without the class axis 1."""
    if ctx.dims is None:
        return helper.make_tensor_value_info(ctx.label, TensorProto.INT64, None)
    if len(ctx.dims) < 2:
        raise ShapeError(f"{loss_name} needs scores of shape (N, C, ...) but output "
                         f"'{ctx.output}' of model '{ctx.model_name}' has rank "
                         f"{len(ctx.dims)}; name a tensor with a class axis as output=")
    shape = [_dim_value(ctx.dims[0])] + [_dim_value(d) for d in ctx.dims[2:]]
    return helper.make_tensor_value_info(ctx.label, TensorProto.INT64, shape)


def softmax_cross_entropy(ctx: _LossContext):
    """mean over samples of −log softmax(output)[label]."""
    node = helper.make_node("SoftmaxCrossEntropyLoss", [ctx.output, ctx.label], [ctx.loss],
                            name=ctx.names("softmax_cross_entropy"), reduction="mean")
    return [node], _class_labels(ctx, "softmax_cross_entropy")


def cross_entropy(ctx: _LossContext):
    """mean over samples of −log(output[label]); ``output`` holds probabilities."""
    log_name = ctx.names("log")
    nodes = [helper.make_node("Log", [ctx.output], [log_name], name=log_name),
             helper.make_node("NegativeLogLikelihoodLoss", [log_name, ctx.label], [ctx.loss],
                              name=ctx.names("nll"), reduction="mean")]
    return nodes, _class_labels(ctx, "cross_entropy")


def mean_squared_error(ctx: _LossContext):
    """mean over all elements of (output − target)²."""
    diff, square = ctx.names("diff"), ctx.names("square")
    nodes = [helper.make_node("Sub", [ctx.output, ctx.label], [diff], name=diff),
             helper.make_node("Mul", [diff, diff], [square], name=square),
             helper.make_node("ReduceMean", [square], [ctx.loss], name=ctx.names("mean"),
                              keepdims=0)]
    shape = None if ctx.dims is None else [_dim_value(d) for d in ctx.dims]
    return nodes, helper.make_tensor_value_info(ctx.label, ctx.elem_type, shape)


LOSSES = {
    "softmax_cross_entropy": softmax_cross_entropy,
    "cross_entropy": cross_entropy,
    "mean_squared_error": mean_squared_error,
}


def _tensor_type(model: onnx.ModelProto, name: str) -> onnx.TypeProto | None:
    """The type of tensor ``name``: from the graph's outputs, else from shape inference."""
    for value in list(model.graph.output) + list(model.graph.input):
        if value.name == name:
            return value.type
    inferred = onnx.shape_inference.infer_shapes(model)
    for value in list(inferred.graph.value_info) + list(inferred.graph.output):
        if value.name == name:
            return value.type
    return None


def _default_opset(model: onnx.ModelProto) -> int | None:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return opset.version
    return None


def add_loss(model: onnx.ModelProto, loss: str, output: str | None = None,
             label: str = "labels", loss_name: str = "loss") -> onnx.ModelProto:
    """A copy of ``model`` with loss ``loss`` (a name in :data:`LOSSES`) of tensor
    ``output`` (default: the model's only output) appended: a new graph input ``label``
    (int64 class indices, or a float target for ``mean_squared_error``) whose batch
    dimension is copied from ``output``, and a new scalar graph output ``loss_name``."""
    graph_name = model.graph.name or "<unnamed>"
    if loss not in LOSSES:
        raise Deep500Error(f"unknown loss {loss!r}; the losses are {sorted(LOSSES)}")
    opset = _default_opset(model)
    if opset is None or opset < MIN_OPSET:
        raise UnsupportedError(
            f"model '{graph_name}' imports ONNX opset {opset}; losses need opset "
            f"{MIN_OPSET} or later. Convert it with onnx.version_converter.convert_version")
    outputs = [value.name for value in model.graph.output]
    if output is None:
        if len(outputs) != 1:
            raise Deep500Error(f"model '{graph_name}' has outputs {outputs}; say which one "
                               f"the loss applies to with output=")
        output = outputs[0]

    taken = {value.name for value in list(model.graph.input) + list(model.graph.output)}
    taken.update(t.name for t in model.graph.initializer)
    for node in model.graph.node:
        taken.update(node.output)
        taken.add(node.name)
    if output not in taken or output in {t.name for t in model.graph.initializer}:
        raise Deep500Error(f"model '{graph_name}' has no tensor {output!r} to attach loss "
                           f"{loss!r} to; its outputs are {outputs}")
    for role, name in (("label", label), ("loss_name", loss_name)):
        if name in taken:
            raise Deep500Error(f"{role}={name!r} is already a tensor or node of model "
                               f"'{graph_name}'; choose another name")
    if label == loss_name:
        raise Deep500Error(f"label and loss_name must differ (both are {label!r})")

    tensor_type = _tensor_type(model, output)
    if tensor_type is None or not tensor_type.HasField("tensor_type"):
        raise ShapeError(f"the type of tensor {output!r} of model '{graph_name}' is not "
                         f"known (ONNX shape inference could not find it)")
    elem_type = tensor_type.tensor_type.elem_type
    if elem_type not in _FLOATS:
        raise ShapeError(f"loss {loss!r} needs a floating-point output, but {output!r} of "
                         f"model '{graph_name}' is "
                         f"{helper.tensor_dtype_to_np_dtype(elem_type)}")
    dims = (list(tensor_type.tensor_type.shape.dim)
            if tensor_type.tensor_type.HasField("shape") else None)
    taken.update((label, loss_name))
    ctx = _LossContext(output, elem_type, dims, label, loss_name, _Names(taken, loss_name),
                       graph_name)
    nodes, label_info = LOSSES[loss](ctx)

    result = onnx.ModelProto()
    result.CopyFrom(model)
    result.graph.node.extend(nodes)
    result.graph.input.append(label_info)
    result.graph.output.append(helper.make_tensor_value_info(loss_name, elem_type, []))
    return result
