"""PyTorch networks behind Deep500's Level-1 ``Network`` interface.

``PyTorchNetwork`` is an ONNX model as an :class:`OnnxModule`: tensors, parameters and
gradients are fetched and fed by their ONNX names, and the graph API (``add_node``,
``remove_node``, ``add_output``) rebuilds the module while the parameters (and their
trained values) stay. ``PyTorchNativeNetwork`` exposes a user's own ``nn.Module`` the
same way, by its ``named_parameters()`` names.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from deep500.frameworks._bridge.inner_network import register_inner_network
from deep500.frameworks.pytorch._torch_common import BRIDGE
from deep500.frameworks.pytorch.extension_dtypes import (CARRIED_NAMES, array_from_tensor,
                                                         tensor_from_array)
from deep500.frameworks.pytorch.onnx_module import OnnxModule
from deep500.frameworks.pytorch.visitor import PyTorchVisitor
from deep500.lv1_network.network import GRADIENT_SUFFIX, Network
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError, require
from deep500.utils.onnx_interop.carried_types import carriers, carry
from deep500.utils.onnx_interop.onnx_objects import OnnxModel
from deep500.utils.onnx_interop.added_nodes import normalize_operations
from deep500.utils.onnx_interop.schemas import OnnxOperation

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


def to_numpy(tensor) -> np.ndarray:
    """A tensor's value as a NumPy array; parameters are copied so that the array does
    not change when they train. bfloat16 and 8-bit floats become ml_dtypes arrays. ONNX
    values that are no tensor come back as the executors take them: a sequence as a
    list of arrays, an empty optional as None, strings as the array they are."""
    if not isinstance(tensor, torch.Tensor):
        if isinstance(tensor, (list, tuple)):
            return [to_numpy(element) for element in tensor]
        return tensor
    array = array_from_tensor(tensor.detach().cpu())
    return array.copy() if isinstance(tensor, torch.nn.Parameter) else array


def _as_array(value, dtype=None) -> np.ndarray:
    array = np.asarray(value, dtype=dtype)
    if not array.flags.c_contiguous or not array.flags.writeable:
        array = np.array(array, order="C")
    return array


class _ParameterStore(Network):
    """Fetching and feeding parameters and gradients, shared by both networks."""
    parameter_values: dict  # ONNX (or module) name -> nn.Parameter
    last_values: dict       # name -> ndarray, the inputs and outputs of the last run

    def get_params(self) -> list[str]:
        return list(self.parameter_values)

    def _fetch_parameter_or_gradient(self, name: str):
        parameter = self.parameter_values.get(name)
        if parameter is not None:
            return to_numpy(parameter)
        if name.endswith(GRADIENT_SUFFIX):
            parameter = self.parameter_values.get(name[:-len(GRADIENT_SUFFIX)])
            if parameter is not None:
                grad = parameter.grad
                return (np.zeros(tuple(parameter.shape), _numpy_dtype(parameter))
                        if grad is None else array_from_tensor(grad.detach().cpu()))
        return None

    def _fetch_held(self, name: str):
        """A parameter's value or gradient, else a value of the last run, else None."""
        value = self._fetch_parameter_or_gradient(name)
        return self.last_values.get(name) if value is None else value

    def _feed_parameter(self, name: str, value) -> None:
        parameter = self.parameter_values[name]
        array = _as_array(value, _numpy_dtype(parameter))
        if array.shape != tuple(parameter.shape):
            raise ShapeError(f"Parameter {name!r} of network '{self.name}' has shape "
                             f"{list(parameter.shape)}; cannot feed a value of shape "
                             f"{list(array.shape)}")
        with torch.no_grad():
            parameter.copy_(tensor_from_array(array, name))


def _numpy_dtype(tensor) -> np.dtype:
    return array_from_tensor(torch.empty((), dtype=tensor.dtype)).dtype


class PyTorchNetwork(_ParameterStore):
    """An ONNX model as a PyTorch module (``self.module``).

    Attributes:
        model: the parsed ONNX model it was built from.
        operations: the current nodes (after any ``add_node``/``remove_node``).
        initializers: ``{name: ndarray}`` as stored in the model, plus fed constants
            (a parameter's current value lives in ``module``, see ``fetch_tensor``).
        last_values: ``{name: ndarray}`` inputs and outputs of the last run.
    """

    def __init__(self, model: OnnxModel):
        super().__init__(model.name)
        self.model = model
        self.operations: list[OnnxOperation] = list(model.operations)
        self.outputs = [o.name for o in model.outputs]
        self.initializers = dict(model.initializers)
        self.last_values: dict = {}
        self.module = OnnxModule(model.name)
        # outputs of types computed in a wider one (int4 in int8, ...): {name: dtype};
        # carry() refuses models where such values do more than being read
        carried = carriers(CARRIED_NAMES)
        self.carried_outputs = {
            **{vi.name: vi.dtype for vi in model.outputs if vi.dtype in carried},
            **carry(model, carried, "The PyTorch executor").outputs}
        self._static_shapes = True
        self.needs_build = False
        self.build()

    @property
    def parameter_values(self) -> dict:
        """``{ONNX name: nn.Parameter}``: the module's trainable tensors."""
        return self.module.onnx_parameters

    # -- building ------------------------------------------------------------------
    def build(self) -> None:
        """(Re)build ``self.module`` from the current nodes, outputs and constants."""
        current = dataclasses.replace(self.model, operations=list(self.operations),
                                      initializers=dict(self.initializers))
        PyTorchVisitor(static_shapes=self._static_shapes).visit_model(current, self)
        self.needs_build = False

    def _tensor_names(self) -> set:
        names = {i.name for i in self.model.inputs} | set(self.initializers)
        for op in self.operations:
            names.update(n for n in op.outputs if n)
        return names

    # -- tensors -------------------------------------------------------------------
    def fetch_tensor(self, name: str) -> np.ndarray:
        value = self._fetch_held(name)
        if value is not None:
            return value
        if name in self.initializers:
            return self.initializers[name]
        if name in self._tensor_names():
            raise Deep500Error(f"Tensor {name!r} of network '{self.name}' is computed but "
                               f"not kept after a run; call network.add_output({name!r}) "
                               f"before running to fetch it")
        raise self._unknown_tensor(name, sorted(self._tensor_names()) + self.get_params())

    def feed_tensor(self, name: str, value, is_param: bool = False) -> None:
        """Set a parameter's value (in place, keeping its dtype and device), a constant
        (the module is rebuilt), or, with ``is_param``, create a new parameter."""
        if name in self.parameter_values:
            self._feed_parameter(name, value)
            return
        array = _as_array(value)
        if is_param:
            if not np.issubdtype(array.dtype, np.floating):
                raise Deep500Error(f"Parameter {name!r}: parameters are floating-point "
                                   f"tensors, got {array.dtype}")
            device = self.module.device or "cpu"
            self.module.add_parameter(name, torch.nn.Parameter(
                tensor_from_array(array, name).clone().to(device)))
            self.initializers[name] = array
            self._rebuild()
        elif name in self.initializers:
            self.initializers[name] = array
            self._rebuild()
        elif name in {i.name for i in self.model.feed_inputs}:
            self.last_values[name] = array
        else:
            raise Deep500Error(f"Network '{self.name}': {name!r} is not a parameter, "
                               f"constant or input; feed_tensor(name, value, "
                               f"is_param=True) creates a new parameter")

    # -- graph ---------------------------------------------------------------------
    def add_node(self, op: OnnxOperation) -> None:
        if not isinstance(op, OnnxOperation):
            raise Deep500Error(f"add_node takes an OnnxOperation (e.g. "
                               f"operators.Relu('relu1', ['x'], ['y'])), got "
                               f"{type(op).__name__}")
        if any(existing.name == op.name for existing in self.operations):
            raise Deep500Error(f"Network '{self.name}' already has a node named {op.name!r}")
        # The node of an older opset in the form every visitor reads (normalize.py).
        nodes, constants = normalize_operations([op], self.name)
        visitor = PyTorchVisitor()
        visitor.model = self.model
        for node in nodes:
            visitor.visitor_for(node)  # an unsupported operator fails here, not at the next run
        self.model.constants.update(constants)
        self._edit(self.operations + nodes)

    def remove_node(self, name: str) -> None:
        remaining = [op for op in self.operations if op.name != name]
        if len(remaining) == len(self.operations):
            raise Deep500Error(f"Network '{self.name}' has no node {name!r} (nodes: "
                               f"{', '.join(op.name for op in self.operations[:10])}"
                               f"{', ...' if len(self.operations) > 10 else ''})")
        self._edit(remaining)

    def _topological(self, operations: list) -> list:
        """The nodes in an order where each runs after the producers of its inputs,
        the outer-scope values its bodies read included (stable: already ordered nodes
        keep their order)."""
        available = ({i.name for i in self.model.inputs} | set(self.initializers)
                     | set(self.model.constants) | {""})
        pending, ordered = list(operations), []
        while pending:
            waiting = []
            for op in pending:
                if all(n in available for n in op.inputs + op.implicit_inputs):
                    ordered.append(op)
                    available.update(op.outputs)
                else:
                    waiting.append(op)
            if len(waiting) == len(pending):
                op = waiting[0]
                missing = [n for n in op.inputs + op.implicit_inputs if n not in available]
                raise Deep500Error(f"Network '{self.name}': node '{op.name}' "
                                   f"({op.op_type}) reads {missing}, which no node, input "
                                   f"or initializer provides (or the nodes form a cycle)")
            pending = waiting
        return ordered

    def _edit(self, operations: list) -> None:
        try:
            operations, complete = self._topological(operations), True
        except Deep500Error:
            complete = False  # e.g. between remove_node and the add_node replacing it
        previous, previous_static = self.operations, self._static_shapes
        # Shapes inferred for the original graph may not hold for the edited one.
        self.operations, self._static_shapes = operations, False
        if not complete:
            self.needs_build = True
            return
        try:
            self.build()
        except Exception:
            self.operations, self._static_shapes = previous, previous_static
            self.build()
            raise

    def _rebuild(self) -> None:
        if not self.needs_build:
            self.build()

    def build_if_needed(self) -> None:
        """Build a graph left incomplete by an edit, or raise what is still missing."""
        self.operations = self._topological(self.operations)
        self.build()

    def add_output(self, name: str) -> None:
        if name not in self._tensor_names():
            raise self._unknown_tensor(name, sorted(self._tensor_names()))
        if name not in self.outputs:
            self.outputs.append(name)
            self._rebuild()


class PyTorchNativeNetwork(_ParameterStore):
    """A user's ``nn.Module`` as a Network: parameters by ``named_parameters()`` name;
    the graph is the module's code, so nodes cannot be added or removed."""

    def __init__(self, module, output_names, name: str | None = None):
        super().__init__(name or type(module).__name__)
        self.module = module
        self.outputs = list(output_names)
        self.parameter_values = dict(module.named_parameters())
        self.last_values: dict = {}

    def fetch_tensor(self, name: str) -> np.ndarray:
        value = self._fetch_held(name)
        if value is None:
            raise self._unknown_tensor(name, list(self.last_values) + self.get_params())
        return value

    def feed_tensor(self, name: str, value, is_param: bool = False) -> None:
        if name not in self.parameter_values:
            raise Deep500Error(f"Module '{self.name}' has no parameter {name!r}; a native "
                               f"module's parameters are its named_parameters()")
        self._feed_parameter(name, value)

    def _fixed_graph(self) -> UnsupportedError:
        return UnsupportedError(f"Module '{self.name}' is a native nn.Module: its graph is "
                                f"its Python code. Edit the module, or load an ONNX model "
                                f"with from_onnx to edit nodes")

    def add_node(self, op) -> None:
        raise self._fixed_graph()

    def remove_node(self, name: str) -> None:
        raise self._fixed_graph()


# Control-flow bodies and FlexAttention's score functions are networks of their own.
register_inner_network(BRIDGE, PyTorchNetwork)
