"""Feeding a foreign ONNX model from a dataset: its graph inputs renamed to the fields
the dataset fills (a training loop feeds ``dataset.input_node``, ``"input"`` for
Deep500's datasets, while exporters name inputs as they please: ``x``,
``input.1``, ``pixel_values``), and its only output to the name the training loop's
accuracy reads (``"output"``).

The rename is done in the graph, wherever the name is written or read: the graph
input or output, the node that produces it, every node input, ``value_info``, and node
inputs inside subgraphs (``If``/``Loop``/``Scan`` bodies read outer names; ONNX IR
spec, "Names Within a Graph"). A valid model never declares an outer name again inside
(single static assignment); a subgraph that does is left to its own name.
"""
from __future__ import annotations

import onnx

from deep500.utils.errors import Deep500Error


def fed_inputs(model: onnx.ModelProto) -> list[str]:
    """The graph inputs a caller must feed: those that are not initializers (IR < 4
    lists initializers among the inputs too)."""
    initializers = {t.name for t in model.graph.initializer}
    return [value.name for value in model.graph.input if value.name not in initializers]


def rename_graph_inputs(model: onnx.ModelProto, mapping: dict) -> onnx.ModelProto:
    """A copy of ``model`` whose graph inputs ``mapping``'s keys are named its values
    (module docstring). A key that is not a fed input, or a value another tensor of the
    graph already has, is a ``Deep500Error`` saying which."""
    graph_name = model.graph.name or "<unnamed>"
    fed = fed_inputs(model)
    unknown = sorted(k for k in mapping if k not in fed)
    if unknown:
        raise Deep500Error(f"model '{graph_name}' has no input {unknown}; its inputs are "
                           f"{fed}")
    mapping = {old: new for old, new in mapping.items() if old != new}
    if not mapping:
        return model
    taken = _names(model.graph) - set(mapping)
    clashes = sorted(new for new in mapping.values() if new in taken)
    if clashes or len(set(mapping.values())) < len(mapping):
        raise Deep500Error(f"model '{graph_name}': cannot rename inputs {mapping}: "
                           f"{clashes or 'two inputs to one name'} already name "
                           f"tensors of the graph; map them to other fields")
    return _renamed(model, mapping)


def rename_only_output(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """A copy of ``model`` whose only graph output is called ``name`` (unchanged when
    it has another number of outputs, already has that name, or another tensor has
    it)."""
    outputs = [value.name for value in model.graph.output]
    if len(outputs) != 1 or outputs[0] == name or name in _names(model.graph) or \
            outputs[0] in fed_inputs(model):
        return model
    return _renamed(model, {outputs[0]: name})


def _renamed(model, mapping: dict):
    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    for value in list(renamed.graph.input) + list(renamed.graph.output) + \
            list(renamed.graph.value_info):
        value.name = mapping.get(value.name, value.name)
    for node in renamed.graph.node:
        node.output[:] = [mapping.get(name, name) for name in node.output]
    _rename_reads(renamed.graph, mapping)
    return renamed


def _names(graph) -> set:
    names = {v.name for v in list(graph.input) + list(graph.output) + list(graph.value_info)}
    names.update(t.name for t in graph.initializer)
    for node in graph.node:
        names.update(node.output)
    return names


def _rename_reads(graph, mapping: dict) -> None:
    for node in graph.node:
        node.input[:] = [mapping.get(name, name) for name in node.input]
        for attribute in node.attribute:
            for subgraph in list(attribute.graphs) + (
                    [attribute.g] if attribute.HasField("g") else []):
                own = {v.name for v in subgraph.input} | {t.name for t in
                                                          subgraph.initializer}
                for node_ in subgraph.node:
                    own.update(node_.output)
                inner = {k: v for k, v in mapping.items() if k not in own}
                if inner:
                    for value in subgraph.output:
                        value.name = inner.get(value.name, value.name)
                    _rename_reads(subgraph, inner)
