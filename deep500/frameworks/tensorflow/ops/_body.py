"""The graph attribute of a control-flow node (Loop, Scan, If's branches, SequenceMap's
body) as a nested TensorFlow network, built once by a visitor of the same kind. The
network comes from the factory ``deep500.frameworks.tensorflow.network`` registers in
``deep500.frameworks._bridge.inner_network``, so that the operators need not import the
network module (which imports the visitor, which mixes the operators in).

Its inputs are the body's formal inputs and its outer-scope names
(``OnnxModel.outer_inputs``, the names ONNX lets a body read from the enclosing graphs:
https://onnx.ai/onnx/repo-docs/IR.html#graphs). Values may be tensors, sequences or
optionals (``deep500/frameworks/tensorflow/_value_kinds.py``).
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks._bridge.inner_network import inner_network_factory


class Body:
    """A graph attribute of a node, as a nested network built once: ``body(formal,
    scope)`` runs it on its formal inputs and the enclosing values ``scope``
    (``{outer name: value}``) and returns its outputs."""

    def __init__(self, visitor, op, attribute: str):
        outer = visitor.network
        model = op.subgraphs.get(attribute)
        graph = op.attributes.get(attribute)
        where = f"body {attribute!r} of node '{op.name}' ({op.op_type})"
        if model is None:
            raise visitor.node_error(op, f"its {where} was not parsed (a node built by hand "
                                         f"has no op.subgraphs); load the model with "
                                         f"deep500's ONNX parser")
        for value in (list(graph.input) + list(graph.output)) if graph is not None else ():
            if value.type.WhichOneof("value") is not None:
                visitor._check_value_type(value.type, value.name, f"{outer.name}: {where}")
        self.inputs = [v.name for v in model.inputs]
        self.outer = list(model.outer_inputs)
        self.outputs = list(model.outputs)
        network = inner_network_factory("tensorflow")(
            f"{outer.name}: {where}", outer.device,
            type(visitor)(propagate_layout=visitor.propagate_layout))
        network.operations = list(model.operations)
        for name in self.outer:
            network.shapes[name] = outer.shapes.get(name)
            network.dtypes[name] = outer.dtypes.get(name)
        network.shapes.update((n, v.shape) for n, v in model.value_info.items())
        network.dtypes.update((n, v.dtype) for n, v in model.value_info.items())
        # A body's initializers are its constants, never trainable parameters.
        network.constants.update(model.initializers)
        network.constants.update(model.constants)
        network.inputs = self.inputs + [n for n in self.outer if n not in self.inputs]
        network.outputs = [v.name for v in model.outputs]
        network.set_plan(network.builder.build(network, network.operations))
        self.network = network

    def __call__(self, formal, scope: dict) -> list:
        feeds = {name: scope[name] for name in self.outer}
        feeds.update(zip(self.inputs, formal))
        env = self.network.run(feeds)
        return [env[key] for key in self.network.plan.outputs]

    def empty(self, index: int, dtype=None):
        """A scan output with no rows: shape (0, *element shape) where the body
        declares a static element shape, else (0,)."""
        info = self.outputs[index]
        shape = info.shape if info.is_static else ()
        return np.zeros((0, *shape), dtype or info.dtype or np.float32)
