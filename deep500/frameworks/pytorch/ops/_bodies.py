"""Nested graphs of the control family (Loop, If, Scan) and the sequence family
(SequenceMap), built into modules of their own.

Each body (``op.subgraphs``, parsed like the main graph) is built once by a visitor of
the same class into an :class:`OnnxModule` of its own, a child of the network's module
(so it moves with ``.to(device)``). The body module's inputs are its formal inputs
followed by the values it reads from the enclosing graphs (ONNX's outer scope): the node
passes those as extra inputs, so an outer value lives until the node has run and an outer
parameter (an RNN's weights read by a Loop body) gets its gradient through autograd like
any input. Outer values known while building (constants) become constants of the body,
where they fold. A body's own initializers are constants of the body, never parameters:
ONNX has no way to train them apart from the node. Values of a body may be tensors,
sequences (lists of tensors) and optionals (None when empty); map-typed ones are refused.
"""
from __future__ import annotations

import dataclasses

import onnx

from deep500.frameworks.pytorch.extension_dtypes import array_from_tensor
from deep500.frameworks.pytorch.onnx_module import OnnxModule
from deep500.utils.errors import ModelError, require
from deep500.utils.onnx_interop.onnx_objects import OnnxValueInfo

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


@dataclasses.dataclass
class _BodyNetwork:
    """What a body's visitor builds into (the parts of a ``PyTorchNetwork`` that the
    visitor reads): the module, the body's outputs, and the outer parameters it reads
    (so that their shapes are known inside)."""
    module: OnnxModule
    outputs: list
    parameter_values: dict


class Body:
    """A built body: ``run(formal values, outer values)`` returns its outputs in the
    body's order (a name may repeat)."""

    def __init__(self, module: OnnxModule, formals: list, outer: list, outputs: list,
                 output_info: list):
        self.module, self.formals, self.outer = module, formals, outer
        self.outputs, self.output_info = outputs, output_info

    def run(self, formal_values, outer_values) -> list:
        feeds = dict(zip(self.formals, formal_values))
        feeds.update(zip(self.outer, outer_values))
        result = self.module(**feeds)
        return [result[name] for name in self.outputs]


class NestedGraphs:
    """What the visitors of nodes with graph attributes share: building a body, and
    emitting a node that loops in Python."""

    def _emit_control(self, op, fn, inputs) -> None:
        """``_emit`` for a control-flow node. Under ``torch.compile`` the node runs
        eagerly between compiled regions: tracing its Python loop would specialise (and
        recompile) on every trip count and iteration number."""
        self._emit(op, torch.compiler.disable(fn, recursive=True), inputs)

    def _body(self, op, key: str) -> Body:
        """Build body ``key`` of ``op`` into a child module of the network's module."""
        body = op.subgraphs.get(key)
        if body is None:
            if isinstance(op.attributes.get(key), onnx.GraphProto):
                raise self.node_error(op, f"its {key!r} body was not parsed; build the node "
                                      f"from an ONNX model (deep500.utils.onnx_interop."
                                      f"parser), which parses bodies and their outer-scope "
                                      f"reads")
            raise self.node_error(op, f"has no {key!r} graph attribute", ModelError)
        _refuse_maps(self, op, key, op.attributes.get(key))
        reads = body.outer_inputs
        known = {n: _as_constant(self.known[n]) for n in reads if n in self.known}
        fed = [n for n in reads if n not in known]
        formals = [OnnxValueInfo(v.name, v.dtype, _rank_only(v.shape))
                   for v in body.inputs]
        inputs = formals + [self._outer_info(n) for n in fed]
        model = dataclasses.replace(
            body, name=f"{self.model.name}/{op.name}/{key}", inputs=inputs,
            value_info={**body.value_info, **{v.name: v for v in inputs}},
            initializers={}, constants={**body.constants, **body.initializers, **known})
        module = OnnxModule(model.name)
        module.device = self.module.device
        outputs = [o.name for o in body.outputs]
        parameters = {n: self.parameters[n] for n in fed if n in self.parameters}
        type(self)(static_shapes=self.static_shapes).visit_model(
            model, _BodyNetwork(module, outputs, parameters))
        self.module.add_body(f"{op.name}_{key}", module)
        output_info = [body.value_info.get(name) for name in outputs]
        return Body(module, [v.name for v in body.inputs], fed, outputs, output_info)

    def _outer_info(self, name: str) -> OnnxValueInfo:
        """What the enclosing graph knows of outer value ``name``: its element type, its
        shape where the enclosing graph fixes it, else its rank."""
        info = self.info.get(name)
        shape = self._shape(name)
        if shape is None and info is not None:
            shape = _rank_only(info.shape)
        return OnnxValueInfo(name, info.dtype if info is not None else None, shape)


def _rank_only(shape):
    """A declared shape with its dims forgotten: a body's inputs take whatever values
    the node passes, so only the rank is relied on."""
    return None if shape is None else (None,) * len(shape)


def _as_constant(value):
    """A value known while building as a body's constant: a tensor as an array (as the
    parser stores constants), a sequence or an empty optional as it is."""
    return array_from_tensor(value) if isinstance(value, torch.Tensor) else value


def _refuse_maps(visitor, op, key: str, graph) -> None:
    """Bodies whose inputs or outputs are maps have no PyTorch representation in this
    executor (tensors, sequences and optionals do)."""
    if not isinstance(graph, onnx.GraphProto):
        return
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for value in values:
            if value.type.WhichOneof("value") == "map_type":
                raise visitor.node_error(
                    op, f"body {key!r} has the map-typed {kind} {value.name!r}; the "
                        f"PyTorch executor runs control flow over tensors, sequences and "
                        f"optionals (not maps)")


__all__ = ["Body", "NestedGraphs"]
