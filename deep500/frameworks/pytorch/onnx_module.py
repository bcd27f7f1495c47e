"""An ONNX graph as a ``torch.nn.Module``.

``OnnxModule`` holds the model's floating-point initializers as ``nn.Parameter``s and its
other constants as buffers, so ``module.to(device)``, ``named_parameters()`` and
``torch.compile`` treat it like any hand-written module. ``forward(**inputs)`` runs the
graph as a flat list of steps: each step is a closure that the PyTorch visitor built once
from a node's attributes, reading and writing numbered slots of a list of tensors. The
per-node cost is one Python call and a few list indexings; nothing is parsed or looked up
by name while the graph runs.

Values that the graph no longer needs are dropped as soon as their last consumer has run,
as Python frees the locals of a hand-written ``forward``, so memory (and the allocator's
cache) behaves the same.
"""
from __future__ import annotations

import re
from time import perf_counter_ns

from deep500.utils.errors import Deep500Error, require
from deep500.utils.framework_errors import tag_node

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
nn = torch.nn

_OMITTED = 0  # slot 0 always holds None: the value of an omitted optional input


class OnnxModule(nn.Module):
    """The computation of an ONNX graph. Build it with :class:`PyTorchVisitor`.

    Attributes:
        model_name: the ONNX graph's name, for messages.
        parameter_attributes: ``{ONNX name: attribute name}`` of the parameters (ONNX
            names may contain characters a module attribute cannot).
        input_names, output_names: the graph's fed inputs and its outputs.
    """

    def __init__(self, model_name: str):
        super().__init__()
        self.model_name = model_name
        self.parameter_attributes: dict[str, str] = {}
        self.onnx_names: dict[str, str] = {}  # attribute name -> ONNX name
        self.onnx_parameters: dict = {}       # ONNX name -> nn.Parameter
        self.constant_attributes: dict[str, str] = {}
        self.input_names: list[str] = []
        self.output_names: list[str] = []
        self.device = None  # where new constants go; set by place()
        self.reset_graph()

    # -- building ------------------------------------------------------------------
    def reset_graph(self) -> None:
        """Forget the nodes, inputs, outputs, constants and bodies (parameters stay)."""
        for attribute in self.constant_attributes.values():
            delattr(self, attribute)
        for child in [n for n, m in self._modules.items() if isinstance(m, OnnxModule)]:
            delattr(self, child)  # control-flow bodies and subgraphs: rebuilt with nodes
        self.constant_attributes = {}
        self.plain_constants: dict = {}   # name -> a sequence (list), None or strings
        self.input_names, self.output_names = [], []
        self._slots: dict[str, int] = {"": _OMITTED}
        self._nodes: list[tuple] = []      # (op, fn, input slots, output slots) or (op,)
        self._timeline: list[tuple] = []   # (op, step or None), every node in order
        self._steps: list = []
        self._template: list = [None]
        self._input_slots: tuple = ()
        self._output_slots: tuple = ()

    def slot(self, name: str) -> int:
        """The slot of tensor ``name``, allocated on first use."""
        index = self._slots.get(name)
        if index is None:
            index = self._slots[name] = len(self._slots)
        return index

    def _attribute_for(self, onnx_name: str) -> str:
        base = re.sub(r"\W", "_", onnx_name) or "tensor"
        if base[0].isdigit():
            base = "t_" + base
        attribute, suffix = base, 1
        while hasattr(self, attribute) or attribute in self._parameters:
            attribute, suffix = f"{base}_{suffix}", suffix + 1
        return attribute

    def add_parameter(self, onnx_name: str, parameter: "nn.Parameter") -> None:
        """Register a trainable tensor under a sanitized attribute name."""
        attribute = self.parameter_attributes.get(onnx_name)
        if attribute is None:
            attribute = self._attribute_for(onnx_name)
            self.parameter_attributes[onnx_name] = attribute
            self.onnx_names[attribute] = onnx_name
        self.register_parameter(attribute, parameter)
        self.onnx_parameters[onnx_name] = parameter
        self.slot(onnx_name)

    def add_constant(self, onnx_name: str, value) -> None:
        """Register a non-trainable tensor (moves with the module, never trained). A
        value that is no tensor (a sequence: a list of tensors; an empty optional: None;
        a string array) is kept as it is, its tensors moved with the module."""
        if onnx_name in self.constant_attributes or onnx_name in self.plain_constants:
            return
        if not isinstance(value, torch.Tensor):
            self.plain_constants[onnx_name] = _tensors_mapped(
                value, lambda t: t if self.device is None else t.to(self.device))
            self.slot(onnx_name)
            return
        attribute = self._attribute_for(onnx_name)
        self.register_buffer(attribute, value if self.device is None else
                             value.to(self.device))
        self.constant_attributes[onnx_name] = attribute
        self.slot(onnx_name)

    def add_body(self, label: str, body: "OnnxModule") -> None:
        """Register ``body`` (a control-flow node's body, built as a module of its own)
        as a child, so that it moves with this module and shows in ``state_dict``."""
        self.add_module(self._attribute_for("body_" + label), body)

    def add_input(self, name: str) -> None:
        self.input_names.append(name)
        self.slot(name)

    def add_step(self, op, fn, inputs, outputs) -> None:
        """Run ``fn(*values of inputs)`` for node ``op``; it returns the value of the one
        output, or a tuple with one value per output."""
        self._nodes.append((op, fn, tuple(self.slot(n) if n else _OMITTED for n in inputs),
                            tuple(self.slot(n) if n else None for n in outputs)))

    def add_folded(self, op) -> None:
        """Node ``op`` was computed while building; it only appears to events."""
        self._nodes.append((op,))

    def set_outputs(self, names) -> None:
        self.output_names = list(names)

    def finalize(self) -> None:
        """Build the step list: after all nodes and outputs are known, each step learns
        which values die with it."""
        missing = [n for n in self.output_names if n not in self._slots]
        if missing:
            raise Deep500Error(f"Model '{self.model_name}': outputs {missing} are neither "
                               f"computed by a node nor inputs or initializers")
        kept = {self._slots[n] for n in self.output_names}
        last_use: dict[int, int] = {}
        for position, node in enumerate(self._nodes):
            if len(node) > 1:
                for slot in node[2]:
                    last_use[slot] = position
        produced = {s for node in self._nodes if len(node) > 1 for s in node[3]
                    if s is not None}
        trash = len(self._slots)  # where outputs nobody named are written
        self._timeline, self._steps = [], []
        self._outputs_of: dict[int, tuple] = {}   # id(op) -> its output slots
        for position, node in enumerate(self._nodes):
            if len(node) == 1:
                self._timeline.append((node[0], None))
                continue
            op, fn, ins, outs = node
            outs = tuple(trash if s is None else s for s in outs)
            dead = tuple(sorted({s for s in ins if s in produced and s not in kept
                                 and last_use.get(s) == position}
                                | {s for s in outs if s not in kept and s not in last_use}))
            step = _make_step(fn, ins, outs, dead)
            self._timeline.append((op, step))
            self._outputs_of[id(op)] = outs
            self._steps.append(step)
        self._input_slots = tuple((n, self._slots[n]) for n in self.input_names)
        self._output_slots = tuple((n, self._slots[n]) for n in self.output_names)
        self._template = [None] * (trash + 1)
        self._refresh_template()

    def _refresh_template(self) -> None:
        for name, attribute in self.parameter_attributes.items():
            self.onnx_parameters[name] = self._parameters[attribute]
            if name in self._slots and self._slots[name] < len(self._template):
                self._template[self._slots[name]] = self._parameters[attribute]
        for name, attribute in self.constant_attributes.items():
            self._template[self._slots[name]] = self._buffers[attribute]
        for name, value in self.plain_constants.items():
            self._template[self._slots[name]] = value

    def place(self, device) -> "OnnxModule":
        """Move to ``device`` (a torch.device); constants added later go there too."""
        self.device = torch.device(device)
        return self.to(self.device)

    def _apply(self, fn, *args, **kwargs):
        # .to()/.cuda()/.double() replace buffers (and, if PyTorch is told to overwrite
        # parameters on conversion, parameters): refresh the slots.
        result = super()._apply(fn, *args, **kwargs)
        self.plain_constants = {name: _tensors_mapped(value, fn)
                                for name, value in self.plain_constants.items()}
        self._refresh_template()
        return result

    # -- running -------------------------------------------------------------------
    @property
    def nodes(self) -> list:
        """The ONNX operations, in execution order (folded ones included)."""
        return [op for op, _ in self._timeline]

    def forward(self, **inputs) -> dict:
        """``{output name: tensor}`` for ``{input name: tensor}``."""
        env = self._template[:]
        for name, slot in self._input_slots:
            env[slot] = inputs[name]
        step = None
        try:
            for step in self._steps:
                step(env)
        except Exception as exc:
            self._tag_failing(exc, step)
            raise
        return {name: env[slot] for name, slot in self._output_slots}

    def _tag_failing(self, exc: Exception, step) -> None:
        """Name on ``exc`` the ONNX node whose ``step`` raised it (found only on failure,
        so the loop stays as it is)."""
        for op, candidate in self._timeline:
            if candidate is step and step is not None:
                tag_node(exc, op)
                return

    def forward_with_events(self, inputs: dict, events, synchronize=None,
                            backward_marks: list | None = None) -> dict:
        """``forward``, calling ``before_operator``/``after_operator`` of each event
        around every node, after ``synchronize()`` (if given) so device work is done.

        With a list ``backward_marks``, a hook goes on each node output that requires a
        gradient: when autograd later computes that gradient, just before it runs the
        node's backward functions, the hook appends ``(op, perf_counter_ns())`` to the
        list (after ``synchronize()``). Autograd's CPU engine runs one function at a time
        in reverse creation order, so the time from one node's mark to the next mark is
        that node's backward (its data and weight gradients, AccumulateGrad included).
        A tensor hook is one Python call per output, far cheaper than torch.profiler,
        and names the ONNX node directly."""
        env = self._template[:]
        for name, slot in self._input_slots:
            env[slot] = inputs[name]
        for op, step in self._timeline:
            if synchronize is not None:
                synchronize()
            for event in events:
                event.before_operator(op)
            if step is not None:
                try:
                    step(env)
                except Exception as exc:
                    tag_node(exc, op)
                    raise
                if synchronize is not None:
                    synchronize()
            for event in events:
                event.after_operator(op)
            if backward_marks is not None and step is not None:
                for slot in self._outputs_of.get(id(op), ()):
                    value = env[slot]
                    if isinstance(value, torch.Tensor) and value.requires_grad:
                        value.register_hook(_marker(op, backward_marks, synchronize))
        return {name: env[slot] for name, slot in self._output_slots}


def _tensors_mapped(value, fn):
    """``value`` with ``fn`` applied to each tensor in it (a tensor, or a list of them)."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list):
        return [_tensors_mapped(v, fn) for v in value]
    return value


def _marker(op, marks: list, synchronize):
    """A tensor hook that stamps the start of ``op``'s backward (returns None: the
    gradient is left as it is)."""
    def mark(grad):
        if synchronize is not None:
            synchronize()
        marks.append((op, perf_counter_ns()))
    return mark


def _make_step(fn, ins, outs, dead):
    """A closure that runs ``fn`` on slots ``ins``, stores its result(s) in ``outs`` and
    clears the slots in ``dead``. Specialised by arity: this is the interpreter's inner
    loop."""
    if len(outs) > 1:
        def step(env):
            for slot, value in zip(outs, fn(*[env[i] for i in ins])):
                env[slot] = value
            for slot in dead:
                env[slot] = None
        return step
    o = outs[0]
    if len(ins) == 1:
        a, = ins
        if not dead:
            def step(env):
                env[o] = fn(env[a])
        else:
            def step(env):
                env[o] = fn(env[a])
                for slot in dead:
                    env[slot] = None
    elif len(ins) == 2:
        a, b = ins
        if not dead:
            def step(env):
                env[o] = fn(env[a], env[b])
        else:
            def step(env):
                env[o] = fn(env[a], env[b])
                for slot in dead:
                    env[slot] = None
    elif len(ins) == 3:
        a, b, c = ins
        if not dead:
            def step(env):
                env[o] = fn(env[a], env[b], env[c])
        else:
            def step(env):
                env[o] = fn(env[a], env[b], env[c])
                for slot in dead:
                    env[slot] = None
    else:
        def step(env):
            env[o] = fn(*[env[i] for i in ins])
            for slot in dead:
                env[slot] = None
    return step
