"""The reference network: a graph of ONNX operations and the tensors between them, with the
NumPy operators that compute them and a store of parameters, constants and results."""
from __future__ import annotations

import numpy as np

from deep500.frameworks.reference.visitor import ReferenceVisitor
from deep500.lv1_network.network import Network, gradient_name
from deep500.utils.errors import Deep500Error


def op_key(name: str) -> tuple:
    """Graph key of the operation node ``name`` (operations and tensors may share names)."""
    return ("op", name)


def tensor_key(name: str) -> tuple:
    """Graph key of the tensor node ``name``."""
    return ("tensor", name)


class ReferenceNetwork(Network):
    """A ``networkx.DiGraph`` whose nodes are operations (key ``("op", name)``, data
    ``op``: the OnnxOperation, ``operator``: its ReferenceOp, ``inputs``: the tensor names
    it reads, None for an omitted optional input) and tensors (key ``("tensor", name)``);
    edges run from each input tensor to its operation and from an operation to each of
    its outputs.

    Parameters (trainable floating-point initializers) and constants (other initializers,
    ``Constant`` nodes) live in the network; intermediate tensors live only during a run,
    except graph outputs and gradients, which are kept from the latest run.
    """

    def __init__(self, name: str):
        super().__init__(name)
        import networkx as nx  # here: an operator-only run never pays its 0.2-0.9 s import
        self.graph = nx.DiGraph()
        self.inputs: list[str] = []            # tensors a caller feeds
        self._persistent: dict[str, np.ndarray] = {}   # parameters and constants
        self._params: list[str] = []
        self._results: dict[str, np.ndarray] = {}      # latest outputs and gradients
        self._order: dict[str, int] = {}       # operation name -> insertion index
        self._added = 0
        # Changes with every change to the graph, so that executors rebuild their plans.
        self.version = 0

    # -- tensors -----------------------------------------------------------------
    def feed_tensor(self, name: str, value, is_param: bool = False) -> None:
        """Set parameter or constant ``name`` (``is_param`` makes it a trainable
        parameter). The value is used as given, without a copy."""
        value = np.asarray(value)
        if is_param and not np.issubdtype(value.dtype, np.floating):
            raise Deep500Error(f"Network '{self.name}': parameter {name!r} must be a "
                               f"floating-point tensor, got {value.dtype}")
        producer = self.producer(name)
        if producer is not None:
            raise Deep500Error(f"Network '{self.name}': tensor {name!r} is computed by node "
                               f"'{producer}' and cannot be fed; remove the node first")
        known = name in self._persistent and (not is_param or name in self._params)
        self._persistent[name] = value
        if known:
            # A new value of an existing tensor (an optimizer step): plans depend only on
            # names, so they stay valid.
            return
        if is_param and name not in self._params:
            self._params.append(name)
        self.graph.add_node(tensor_key(name))
        self.version += 1

    def add_constant(self, name: str, value) -> None:
        """A tensor with a fixed, non-trainable value."""
        self.feed_tensor(name, value, is_param=False)

    def add_input(self, name: str) -> None:
        """Declare ``name`` a tensor that callers feed on every run."""
        if name not in self.inputs:
            self.inputs.append(name)
            self.graph.add_node(tensor_key(name))
            self.version += 1

    def fetch_tensor(self, name: str) -> np.ndarray:
        if name in self._persistent:
            return self._persistent[name]
        if name in self._results:
            return self._results[name]
        if self.graph.has_node(tensor_key(name)):
            raise Deep500Error(f"Network '{self.name}': tensor {name!r} is not kept (the "
                               f"reference executor frees intermediate tensors during a run). "
                               f"Call network.add_output({name!r}) before running to keep it")
        if name.endswith(gradient_name("")) and name[:-len(gradient_name(""))] in self._params:
            raise Deep500Error(f"Network '{self.name}': gradient {name!r} does not exist "
                               f"yet; run executor.inference_and_backprop first")
        raise self._unknown_tensor(name, [k[1] for k in self.graph if k[0] == "tensor"])

    def get_params(self) -> list[str]:
        return list(self._params)

    @property
    def persistent_tensors(self) -> dict:
        """Parameters and constants by name (the live dict; do not modify)."""
        return self._persistent

    def store_results(self, values: dict) -> None:
        """Keep ``values`` (outputs, gradients) of the latest run for fetch_tensor."""
        self._results = dict(values)

    # -- graph ---------------------------------------------------------------------
    def add_node(self, op, operator=None, inputs=None) -> None:
        """Add ONNX operation ``op``, computed by reference operator ``operator`` (by
        default the one the ReferenceVisitor chooses) from tensors ``inputs`` (by default
        ``op.inputs`` and then ``op.implicit_inputs``)."""
        if operator is None:
            ReferenceVisitor(self.name).add_operation(op, self)
            return
        key = op_key(op.name)
        if self.graph.has_node(key):
            raise Deep500Error(f"Network '{self.name}' already has a node named '{op.name}'")
        if inputs is None:
            # A control-flow node's outer-scope reads (its bodies') are inputs too.
            inputs = list(op.inputs) + list(getattr(op, "implicit_inputs", ()))
        inputs = [name or None for name in inputs]
        while inputs and inputs[-1] is None:
            inputs.pop()
        for output in op.outputs:
            if not output:
                continue
            producer = self.producer(output)
            if producer is not None or output in self._persistent or output in self.inputs:
                where = f"node '{producer}'" if producer else "a parameter, constant or input"
                raise Deep500Error(f"Network '{self.name}': node '{op.name}' writes tensor "
                                   f"{output!r}, which is already {where}")
        self.graph.add_node(key, op=op, operator=operator, inputs=inputs)
        for name in inputs:
            if name is not None:
                self.graph.add_edge(tensor_key(name), key)
        for name in op.outputs:
            if name:
                self.graph.add_edge(key, tensor_key(name))
        self._order[op.name] = self._added
        self._added += 1
        self.version += 1

    def remove_node(self, name: str) -> None:
        """Remove operation ``name``. Its output tensors stop being graph outputs and, if
        no other node reads them, leave the graph (nodes still reading them must then be
        removed too, or the tensors fed)."""
        key = op_key(name)
        if not self.graph.has_node(key):
            raise Deep500Error(f"Network '{self.name}' has no operation '{name}' (some "
                               f"operations: {', '.join(self.operation_names()[:10])})")
        outputs = list(self.graph.successors(key))
        self.graph.remove_node(key)
        for tensor in outputs:
            if tensor[1] in self.outputs:
                self.outputs.remove(tensor[1])
            if self.graph.out_degree(tensor) == 0:
                self.graph.remove_node(tensor)
        del self._order[name]
        self.version += 1

    def add_output(self, name: str) -> None:
        super().add_output(name)
        self.version += 1

    def producer(self, tensor: str) -> str | None:
        """The name of the operation that computes ``tensor``, or None."""
        key = tensor_key(tensor)
        if not self.graph.has_node(key):
            return None
        for op in self.graph.predecessors(key):
            return op[1]
        return None

    def operation(self, name: str) -> dict:
        """The graph data of operation ``name``: ``op``, ``operator``, ``inputs``."""
        return self.graph.nodes[op_key(name)]

    def operation_names(self) -> list[str]:
        """Operation names in a topological order; among the orders possible, the one
        closest to the order in which they were added (the model's, when built from
        ONNX)."""
        import networkx as nx
        order = self._order

        def key(node):
            return order[node[1]] if node[0] == "op" else -1
        try:
            nodes = nx.lexicographical_topological_sort(self.graph, key=key)
            return [node[1] for node in nodes if node[0] == "op"]
        except nx.NetworkXUnfeasible:
            cycle = nx.find_cycle(self.graph)
            names = [u[1] for u, _ in cycle if u[0] == "op"]
            raise Deep500Error(f"Network '{self.name}' has a cycle through nodes "
                               f"{names}; a graph executor needs an acyclic graph") from None
