"""Cutting an ONNX graph into contiguous pipeline stages.

The nodes of an ONNX graph are topologically sorted (ONNX IR spec, "Graphs": "nodes
... MUST be topologically sorted"); a cut list ``[c_1, ..., c_{S-1}]`` of node indices
makes stage ``s`` the nodes ``c_s ≤ i < c_{s+1}`` (GPipe, Huang et al., NeurIPS 2019,
§2: "partition the network into K cells", one cell per accelerator).

Between stage ``s`` and ``s + 1`` travels the **boundary**: every tensor that a node of
stages ``0..s`` computes and a node of a later stage reads, or that is a graph output
(graph outputs all reach the last stage, where the loss is). A tensor that stage
``s + 2`` needs from stage ``s`` passes through stage ``s + 1`` unchanged, since stages
talk only to their neighbours. Graph inputs (the images, the labels) are not
boundary: every rank loads the same minibatch, and each stage reads the inputs its
nodes need (the labels reach the last stage this way).

Each stage is an ONNX model of its own that any Level-1 executor can build:

* the tensors it receives are **parameters** of the stage (float initializers), so
  that backpropagation computes their gradient, which goes back to the previous stage;
  the scheme feeds each microbatch's activations into them before running;
* a stage that is not the last computes the scalar ``pipeline.stage_loss`` =
  Σ_t Σ (t ⊙ ∂L/∂t) over its boundary tensors t, the upstream gradients ``∂L/∂t`` being
  graph inputs named ``<t>.upstream_gradient``: its gradient w.r.t. the stage's
  parameters is then the vector-Jacobian product that backpropagation of the whole
  graph would compute there (chain rule; the product is linear in t).

A boundary tensor must be floating point with a shape that ONNX shape inference knows
up to the batch dimension (the graph inputs' first, symbolic dimension): its exact byte
count per microbatch is then known on both sides before anything is sent.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from deep500.utils.errors import Deep500Error

STAGE_LOSS = "pipeline.stage_loss"
UPSTREAM = ".upstream_gradient"


@dataclass
class BoundaryTensor:
    """A tensor sent from one stage to the next: its name, its shape with ``None`` for
    the batch dimension, and its NumPy dtype."""
    name: str
    shape: tuple
    dtype: np.dtype

    def shape_for(self, batch: int) -> tuple:
        return tuple(batch if d is None else d for d in self.shape)

    def nbytes(self, batch: int) -> int:
        return int(np.prod(self.shape_for(batch), dtype=np.int64)) * self.dtype.itemsize


@dataclass
class Stage:
    """One stage: its ``index``, its ONNX ``model``, the node names it runs, the
    boundary tensors it ``receives`` from the previous stage and ``sends`` to the next,
    the graph inputs it ``feeds`` from the minibatch, its trainable ``parameters`` and
    the scalar it backpropagates from (``loss``)."""
    index: int
    model: object
    nodes: list
    receives: list
    sends: list
    feeds: list
    parameters: list
    loss: str
    cut: tuple = field(default=(0, 0))      # [first node, last node + 1)


def named_nodes(model):
    """A copy of ``model`` (an ``onnx.ModelProto`` or a path) whose every node has a
    unique name (``node_<i>`` where it had none), so that per-node times and stages
    can name them."""
    import onnx
    model = onnx.load(model) if isinstance(model, str) else copy.deepcopy(model)
    taken = {n.name for n in model.graph.node if n.name}
    for index, node in enumerate(model.graph.node):
        if not node.name:
            name = f"node_{index}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)
    return model


def _reads(node) -> list:
    """Tensor names a node reads, its control-flow bodies' outer-scope reads included
    (every name a body reads; those the body computes itself are filtered out by the
    caller, which only looks for names computed outside)."""
    names = [n for n in node.input if n]
    for attribute in node.attribute:
        graphs = list(attribute.graphs) + ([attribute.g] if attribute.HasField("g") else [])
        for graph in graphs:
            for inner in graph.node:
                names.extend(_reads(inner))
    return names


class GraphCuts:
    """What cutting ``model`` between nodes costs and allows: the boundary at every
    possible cut position, which positions are valid, and stage models for a cut
    list."""

    def __init__(self, model, loss: str = "loss"):
        import onnx
        self.model = named_nodes(model)
        self.loss = loss
        graph = self.model.graph
        self.nodes = list(graph.node)
        if len(self.nodes) < 2:
            raise Deep500Error(f"Pipeline: model '{graph.name}' has {len(self.nodes)} "
                               f"node(s); a pipeline needs at least one node per stage")
        if loss not in [o.name for o in graph.output]:
            raise Deep500Error(f"Pipeline: model '{graph.name}' has no output {loss!r} "
                               f"(outputs: {[o.name for o in graph.output]}); build it "
                               f"with a loss or pass loss= the name of its scalar loss "
                               f"output")
        initializers = {i.name for i in graph.initializer}
        self.feed_inputs = [i for i in graph.input if i.name not in initializers]
        self.batch_dims = {i.type.tensor_type.shape.dim[0].dim_param
                           for i in self.feed_inputs
                           if i.type.tensor_type.shape.dim
                           and i.type.tensor_type.shape.dim[0].dim_param}
        if not self.batch_dims:
            raise Deep500Error(f"Pipeline: the inputs of model '{graph.name}' have no "
                               f"symbolic batch dimension, so microbatches cannot be fed; "
                               f"build the model with batch_size='N'")
        inferred = onnx.shape_inference.infer_shapes(self.model)
        self.types = {v.name: v.type for v in list(inferred.graph.value_info) +
                      list(inferred.graph.output) + list(inferred.graph.input)}
        self.producer = {}
        for index, node in enumerate(self.nodes):
            for name in node.output:
                if name:
                    self.producer[name] = index
        self.last_reader = {}
        for index, node in enumerate(self.nodes):
            for name in _reads(node):
                if name in self.producer:
                    self.last_reader[name] = index
        self.outputs = [o.name for o in graph.output]

    # -- boundaries ----------------------------------------------------------------
    def boundary_names(self, position: int) -> list:
        """Tensors crossing a cut before node ``position``: computed before it and read
        at or after it, or graph outputs computed before it (in node order)."""
        names = []
        for index in range(position):
            for name in self.nodes[index].output:
                if name and (self.last_reader.get(name, -1) >= position
                             or name in self.outputs) and name not in names:
                    names.append(name)
        return names

    def boundary(self, position: int) -> list:
        """The boundary before node ``position`` as :class:`BoundaryTensor` objects;
        raises a Deep500Error naming the tensor where it cannot travel."""
        return [self._tensor(name, position) for name in self.boundary_names(position)]

    def why_invalid(self, position: int) -> str | None:
        """Why no cut can be placed before node ``position`` (None: it can)."""
        try:
            self.boundary(position)
        except Deep500Error as exc:
            return str(exc)
        return None

    def valid_positions(self) -> list:
        return [p for p in range(1, len(self.nodes)) if self.why_invalid(p) is None]

    def _tensor(self, name: str, position: int) -> BoundaryTensor:
        import onnx.helper
        where = (f"Pipeline: tensor {name!r}, crossing the cut before node "
                 f"'{self.nodes[position].name}' (index {position})")
        kind = self.types.get(name)
        if kind is None or kind.WhichOneof("value") != "tensor_type":
            raise Deep500Error(f"{where}, has no tensor type from ONNX shape inference; "
                               f"cut elsewhere")
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(kind.tensor_type.elem_type))
        if dtype.kind != "f":
            raise Deep500Error(f"{where}, is {dtype}; only floating-point tensors carry "
                               f"gradients between stages; cut elsewhere")
        if not kind.tensor_type.HasField("shape"):
            raise Deep500Error(f"{where}, has no inferred shape; cut elsewhere")
        shape = []
        for dim in kind.tensor_type.shape.dim:
            if dim.HasField("dim_value"):
                shape.append(int(dim.dim_value))
            elif dim.dim_param in self.batch_dims:
                shape.append(None)
            else:
                raise Deep500Error(f"{where}, has a dimension of unknown size "
                                   f"({dim.dim_param or '?'}); only the batch dimension "
                                   f"may be symbolic; cut elsewhere")
        return BoundaryTensor(name, tuple(shape), dtype)

    # -- stages --------------------------------------------------------------------
    def check_cuts(self, cuts) -> tuple:
        count = len(self.nodes)
        cuts = tuple(int(c) for c in cuts)
        if any(not 0 < c < count for c in cuts) or list(cuts) != sorted(set(cuts)):
            raise Deep500Error(f"Pipeline: cuts {list(cuts)} must be strictly increasing "
                               f"node indices between 1 and {count - 1} (model "
                               f"'{self.model.graph.name}' has {count} nodes)")
        for c in cuts:
            problem = self.why_invalid(c)
            if problem:
                raise Deep500Error(f"{problem} (valid cut positions: "
                                   f"{self.valid_positions()})")
        return cuts

    def stages(self, cuts) -> list:
        """The stages of cut list ``cuts`` (``S - 1`` node indices)."""
        cuts = self.check_cuts(cuts)
        bounds = [0, *cuts, len(self.nodes)]
        boundaries = [[]] + [self.boundary(c) for c in cuts] + [[]]
        return [self._stage(s, bounds[s], bounds[s + 1], boundaries[s], boundaries[s + 1],
                            last=s == len(cuts))
                for s in range(len(cuts) + 1)]

    def _stage(self, index, first, end, receives, sends, last) -> Stage:
        import onnx
        from onnx import helper
        graph = self.model.graph
        nodes = self.nodes[first:end]
        read = {n for node in nodes for n in _reads(node)}
        feeds = [i for i in self.feed_inputs if i.name in read]
        owners = {}
        for s_index, node in enumerate(self.nodes):
            for name in _reads(node):
                owners.setdefault(name, set()).add(s_index)
        initializers, parameters = [], []
        for init in graph.initializer:
            if init.name not in read:
                continue
            initializers.append(init)
            if helper.tensor_dtype_to_np_dtype(init.data_type).kind == "f":
                readers = owners.get(init.name, set())
                if min(readers) < first or max(readers) >= end:
                    raise Deep500Error(
                        f"Pipeline: parameter {init.name!r} is read by nodes of several "
                        f"stages (node indices {sorted(readers)}, this stage "
                        f"{first}..{end - 1}); stages cannot share parameters; choose cuts "
                        f"that keep its readers in one stage")
                parameters.append(init.name)
        placeholders = [onnx.numpy_helper.from_array(
            np.zeros(t.shape_for(1), t.dtype), t.name) for t in receives]
        new_nodes = list(nodes)
        inputs = list(feeds)
        if last:
            outputs = list(graph.output)
            loss = self.loss
        else:
            outputs = [self._value_info(t.name) for t in sends]
            terms = []
            for t in sends:
                upstream = t.name + UPSTREAM
                inputs.append(self._value_info(t.name, upstream))
                product, total = f"{t.name}.pipeline_product", f"{t.name}.pipeline_sum"
                new_nodes.append(helper.make_node("Mul", [t.name, upstream], [product],
                                                  name=product))
                new_nodes.append(helper.make_node("ReduceSum", [product], [total],
                                                  name=total, keepdims=0))
                terms.append(total)
            new_nodes.append(helper.make_node("Sum", terms, [STAGE_LOSS], name=STAGE_LOSS))
            outputs.append(helper.make_tensor_value_info(
                STAGE_LOSS, helper.np_dtype_to_tensor_dtype(sends[0].dtype), []))
            loss = STAGE_LOSS
        stage_graph = helper.make_graph(new_nodes, f"{graph.name}.stage{index}", inputs,
                                        outputs, initializers + placeholders)
        model = helper.make_model(stage_graph, opset_imports=list(self.model.opset_import),
                                  ir_version=self.model.ir_version)
        return Stage(index, model, [n.name for n in nodes], list(receives), list(sends),
                     [f.name for f in feeds], parameters, loss, (first, end))

    def _value_info(self, name: str, as_name: str | None = None):
        import onnx
        info = onnx.ValueInfoProto()
        info.name = as_name or name
        info.type.CopyFrom(self.types[name])
        return info


def balanced_cuts(seconds, stages: int, valid=None) -> list:
    """Cut positions that split nodes with per-node ``seconds`` (graph order) into
    ``stages`` contiguous, non-empty stages minimising the slowest stage's time (the
    linear partition problem, solved exactly by dynamic programming: Skiena, The
    Algorithm Design Manual, §8.5). ``valid``: the positions allowed (default all)."""
    count = len(seconds)
    if not 1 <= stages <= count:
        raise Deep500Error(f"Pipeline: cannot split {count} nodes into {stages} stages; "
                           f"give 1 to {count} stages")
    allowed = set(range(1, count)) if valid is None else set(valid)
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(seconds, float))])
    inf = float("inf")
    # best[k][i]: the smallest slowest-stage time of nodes [0, i) in k stages
    best = [[inf] * (count + 1) for _ in range(stages + 1)]
    choice = [[0] * (count + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for i in range(k, count + 1):
            if i != count and i not in allowed:
                continue
            for j in range(k - 1, i):
                if best[k - 1][j] == inf or (j != 0 and j not in allowed):
                    continue
                value = max(best[k - 1][j], prefix[i] - prefix[j])
                if value < best[k][i]:
                    best[k][i], choice[k][i] = value, j
    if best[stages][count] == inf:
        raise Deep500Error(f"Pipeline: no {stages} stages can be cut at the valid "
                           f"positions {sorted(allowed)} of {count} nodes; use fewer "
                           f"stages")
    cuts, i = [], count
    for k in range(stages, 1, -1):
        i = choice[k][i]
        cuts.append(i)
    return sorted(cuts)
