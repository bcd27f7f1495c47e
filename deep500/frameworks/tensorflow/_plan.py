"""The plan a TensorFlow network runs: one prebuilt closure of TensorFlow operations per
step, built by the visitor (``deep500.frameworks.tensorflow.visitor``)."""
from __future__ import annotations

from deep500.frameworks.tensorflow._layout import ParameterLayout


class Plan:
    """What a network runs: ``steps``, a flat list of ``(fn, input keys, output key)``
    (a tuple of keys when ``fn`` returns several tensors), and per step the ONNX
    operation it belongs to (``None`` for the final layout conversions of outputs)."""

    def __init__(self):
        self.steps: list[tuple] = []
        self.step_ops: list = []
        self.constants: dict = {}      # build-time values: converted constants, '' → None
        self.layouts: dict[str, str] = {}
        # ONNX name → (key, function) of tensors held in another layout
        self.converters: dict[str, tuple] = {}
        self.parameter_layouts: dict[str, ParameterLayout] = {}
        self.outputs: list[str] = []
        # Graph inputs whose values decide shapes (axes, pads, slice bounds, ...): a
        # traced function takes them as constants, retracing when they change.
        self.static_inputs: set[str] = set()
        self.node_steps: list[tuple] = []   # (op, [steps]) in order, for operator events

    def add(self, op, fn, inputs, output) -> None:
        self.steps.append((fn, tuple(inputs), output))
        self.step_ops.append(op)

    def finish(self) -> None:
        groups: list[tuple] = []
        for op, step in zip(self.step_ops, self.steps):
            if groups and groups[-1][0] is op:
                groups[-1][1].append(step)
            else:
                groups.append((op, [step]))
        self.node_steps = groups
