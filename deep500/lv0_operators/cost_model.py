"""Analytic cost of an ONNX operator: FLOPs and bytes moved, forward and backward,
and its roofline time on a machine.

FLOPs count a multiply-add as two operations (``deep500.utils.flops``). Bytes
moved are the tensors an operator must read and write at least once (inputs,
outputs and weights), at ``itemsize`` bytes per element; caches are not
modelled. The rules per operator type, forward / backward:

* Conv, Gemm, MatMul: forward FLOPs from ``flop_count``; backward = 2 x forward
  (the data gradient dX and the weight gradient dW are each a product of the
  forward's size), as in the per-layer models of Catalán's thesis and PyDTNN's
  layers (``backward`` computes ``dx`` and ``dw``). Forward bytes = inputs +
  outputs; backward bytes = dY + every input read, dX + dW written
  (= outputs + 2 x inputs).
* Relu, Add, Sum, Sub, Mul, Div, Max, Sigmoid, Tanh, Erf, Identity, Dropout, Where,
  Equal, Cast: 1 FLOP per output element forward and backward; bytes forward =
  inputs + outputs, backward = dY + inputs read + one gradient per input written.
* Transpose, Concat: copies, no FLOPs; bytes forward = inputs + output, backward = dY
  read and dX written (Concat's dX are the slices of dY, one per input).
* Gather (an embedding lookup): no FLOPs forward, bytes = indices + the rows gathered
  read + output written (not the whole table); backward scatter-adds dY into a zeroed
  table: 1 FLOP per output element, bytes = table written + dY + indices read.
* ReduceSum: 1 FLOP per input element forward; backward broadcasts dY (no FLOPs).
* LayerNormalization: 7 FLOPs per element forward (mean, centre, variance: square and
  sum, normalise, scale, shift) and 10 backward (dgamma, dbeta, dx̂, and dX with its
  two row reductions), bytes as for an elementwise operator plus the parameters.
* MaxPool, AveragePool: one operation per window element per output, forward
  and backward; GlobalAveragePool: one per input element.
* BatchNormalization: 4 FLOPs per element forward (subtract, scale, multiply,
  add) and 8 backward (the two reductions for dgamma/dbeta plus dX), bytes as
  for an elementwise operator plus the per-channel parameters.
* Softmax, LogSoftmax, SoftmaxCrossEntropyLoss: 5 FLOPs per input element
  forward (max, subtract, exp, sum, divide), 2 backward (softmax - one-hot).
* Flatten, Reshape, Squeeze, Unsqueeze, Constant, Shape: views, zero cost.

Conv, Gemm and MatMul also record the (m, n, k) of the matrix product they lower to
(``OperatorCost.gemm``; Conv as im2col), and ``OperatorCost.gemms(direction)`` the
products of a pass (backward: dX and dW), so that a measured, size-dependent GEMM rate
(``deep500.lv0_operators.gemm_rate``) can replace the single peak.

The roofline (Williams, Waterman & Patterson, CACM 2009) time of a pass is
``max(FLOPs / peak_flops(threads, kind), bytes / memory_bandwidth)`` plus an
optional fixed per-node overhead (the time of the smallest operators, which
neither term explains: framework dispatch). ``machine`` is any object with
``memory_bandwidth`` (bytes/s) and ``peak_flops(threads, kind)`` (FLOP/s), such
as ``deep500.utils.machine.MachineModel``; a machine file's path is loaded
with ``deep500.utils.machine.load_machine``.

A node whose operator type has no rule raises a ``Deep500Error`` naming the
node and type: profile it instead (``OperatorTimes``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from deep500.utils.errors import Deep500Error
from deep500.utils.flops import flop_count

_COMPUTE = {"Conv": "conv", "Gemm": "gemm", "MatMul": "gemm"}
_ELEMENTWISE = {"Relu", "Add", "Sum", "Sub", "Mul", "Div", "Max", "Sigmoid", "Tanh", "Erf",
                "Identity", "Dropout", "Where", "Equal", "Cast"}
_POOL = {"MaxPool", "AveragePool"}
_SOFTMAX = {"Softmax", "LogSoftmax", "SoftmaxCrossEntropyLoss"}
_VIEWS = {"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Constant", "Shape"}
SUPPORTED_OPS = frozenset(set(_COMPUTE) | _ELEMENTWISE | _POOL | _SOFTMAX | _VIEWS
                          | {"GlobalAveragePool", "BatchNormalization", "LayerNormalization",
                             "Transpose", "Concat", "Gather", "ReduceSum"})


@dataclass(frozen=True)
class OperatorCost:
    """FLOPs and bytes moved by one node's forward and backward pass."""
    node: str
    op_type: str
    kind: str                 # peak to use: "gemm", "conv" or "memory" (no FLOP peak)
    forward_flops: int
    backward_flops: int
    forward_bytes: int
    backward_bytes: int
    input_shape: tuple = ()    # the first input's shape (shape features of learned models)
    output_shape: tuple = ()   # the first output's shape
    kernel: tuple = ()         # Conv's weight spatial extent or a pool's window
    gemm: tuple = ()           # (m, n, k) of the forward product of Conv/Gemm/MatMul

    def gemms(self, direction: str) -> list:
        """The (m, n, k) products of a pass: the forward's, or backward's two, dX
        (m×n)·(n×k) and dW (k×m)·(m×n), as (m, k, n) and (k, n, m)."""
        if not self.gemm:
            return []
        m, n, k = self.gemm
        return [(m, n, k)] if direction == "forward" else [(m, k, n), (k, n, m)]


def _elements(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape is not None else 0


def operator_cost(op_type: str, input_shapes, output_shapes, attributes=None,
                  node: str = "", itemsize: int = 4) -> OperatorCost:
    """Forward and backward FLOPs and bytes of one call (see the module's rules).

    Raises:
        Deep500Error: ``op_type`` has no cost rule, or a needed shape is unknown.
    """
    attributes = attributes or {}
    where = f"node {node!r} ({op_type})"
    if op_type not in SUPPORTED_OPS:
        raise Deep500Error(
            f"{where} has no analytic cost rule (supported: {', '.join(sorted(SUPPORTED_OPS))}); "
            "profile it with OperatorTimes instead")
    if op_type not in _VIEWS and (any(s is None for s in input_shapes[:1])
                                  or any(s is None for s in output_shapes)):
        raise Deep500Error(f"{where}: input or output shape unknown; give the model "
                           "static shapes (onnx.shape_inference) or profile the node")
    ins = sum(_elements(s) for s in input_shapes)
    outs = sum(_elements(s) for s in output_shapes)
    out0 = _elements(output_shapes[0]) if output_shapes else 0
    in0 = _elements(input_shapes[0]) if input_shapes else 0
    fwd_bytes = (ins + outs) * itemsize
    bwd_bytes = (outs + 2 * ins) * itemsize
    kind = _COMPUTE.get(op_type, "memory")
    if op_type in _COMPUTE:
        fwd = int(flop_count(op_type, input_shapes, attributes))
        bwd = 2 * fwd
    elif op_type in _ELEMENTWISE:
        fwd = bwd = out0
    elif op_type in _POOL:
        kernel = list(attributes.get("kernel_shape", [1]))
        window = int(np.prod(kernel, dtype=np.int64))
        fwd = bwd = out0 * window
    elif op_type == "GlobalAveragePool":
        fwd = bwd = in0
    elif op_type == "BatchNormalization":
        fwd, bwd = 4 * in0, 8 * in0
    elif op_type == "LayerNormalization":
        fwd, bwd = 7 * in0, 10 * in0
    elif op_type in ("Transpose", "Concat"):
        fwd, bwd, bwd_bytes = 0, 0, 2 * out0 * itemsize
    elif op_type == "Gather":
        indices = _elements(input_shapes[1]) if len(input_shapes) > 1 else 0
        fwd, bwd = 0, out0
        fwd_bytes = (2 * out0 + indices) * itemsize
        bwd_bytes = (in0 + out0 + indices) * itemsize
    elif op_type == "ReduceSum":
        fwd, bwd = in0, 0
    elif op_type in _SOFTMAX:
        fwd, bwd = 5 * in0, 2 * in0
    else:  # views
        return OperatorCost(node, op_type, kind, 0, 0, 0, 0)
    kernel = ()
    if op_type == "Conv":
        kernel = tuple(input_shapes[1][2:])
    elif op_type in _POOL:
        kernel = tuple(attributes.get("kernel_shape", ()))
    return OperatorCost(node, op_type, kind, int(fwd), int(bwd), int(fwd_bytes), int(bwd_bytes),
                        tuple(input_shapes[0]), tuple(output_shapes[0]), kernel,
                        _gemm_size(op_type, input_shapes, output_shapes, attributes))


def _gemm_size(op_type, input_shapes, output_shapes, attributes) -> tuple:
    """(m, n, k) of the product an operator lowers to: Gemm Y[m,n] = X[m,k]·W[k,n];
    MatMul with the leading axes folded into m; Conv as im2col, Y[C_out, N·H·W] =
    W[C_out, C_in/group·kh·kw]·cols (the reference executor's lowering)."""
    out = output_shapes[0]
    if op_type == "Gemm":
        x = input_shapes[0]
        k = x[0] if attributes.get("transA", 0) else x[1]
        return (int(out[0]), int(out[1]), int(k))
    if op_type == "MatMul":
        x = input_shapes[0]
        m = _elements(out[:-1]) if len(out) > 1 else 1
        return (int(m), int(out[-1]), int(x[-1]))
    if op_type == "Conv":
        w = input_shapes[1]
        return (int(w[0]), int(out[0] * _elements(out[2:])), int(_elements(w[1:])))
    return ()


def _shape_map(model) -> dict:
    import onnx
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    for value in (list(inferred.graph.input) + list(inferred.graph.value_info)
                  + list(inferred.graph.output)):
        dims = value.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = tuple(int(d.dim_value) for d in dims)
    for init in inferred.graph.initializer:
        shapes[init.name] = tuple(int(d) for d in init.dims)
    return shapes


def network_costs(model, itemsize: int = 4) -> list[OperatorCost]:
    """The OperatorCost of every node of an ONNX model, in graph order.

    Shapes come from ONNX shape inference; the batch axis must be static.
    """
    import onnx
    shapes = _shape_map(model)
    costs = []
    for i, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{i}"
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        attributes = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attributes.items()}
        costs.append(operator_cost(node.op_type,
                                   [shapes.get(n) for n in node.input if n],
                                   [shapes.get(n) for n in node.output if n],
                                   attributes, node=name, itemsize=itemsize))
    return costs


def _machine(machine):
    if isinstance(machine, str):
        from deep500.utils.machine import load_machine
        return load_machine(machine)
    return machine


def roofline_time(cost: OperatorCost, machine, threads: int = 1, direction: str = "forward",
                  overhead_s: float = 0.0) -> float:
    """Roofline time in seconds: max(FLOPs / peak, bytes / bandwidth) + overhead_s.

    Operators of kind "memory" use the GEMM peak for their (few) FLOPs.
    """
    if direction not in ("forward", "backward"):
        raise Deep500Error(f"direction must be 'forward' or 'backward', not {direction!r}")
    machine = _machine(machine)
    flops = cost.forward_flops if direction == "forward" else cost.backward_flops
    nbytes = cost.forward_bytes if direction == "forward" else cost.backward_bytes
    if flops == 0 and nbytes == 0:
        return 0.0
    kind = "conv" if cost.kind == "conv" else "gemm"
    return max(flops / machine.peak_flops(threads, kind),
               nbytes / machine.memory_bandwidth) + overhead_s
