"""Seeded mutations of small ONNX models, for the fuzzer in ``test_fuzz_onnx.py``.

Byte mutations change the serialized file (flips, truncations, insertions, deletions,
garbage); structure mutations change one thing of the ``ModelProto`` the way a broken
exporter or a hand edit would (an operator's type, a node's inputs or outputs, an
attribute's type or value, a tensor's dims or element type, the opset, the order of
nodes). Every mutation is a function ``(rng, proto) -> proto | bytes`` of a copy, so a
case is reproduced from its seed alone.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from deep500.networks import create_model

BATCH = 2


def hand_built() -> onnx.ModelProto:
    """x[2, 3] → MatMul(w) → Add(b) → Relu → Reshape([2, 2, 2]) → Transpose → Softmax."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("Add", ["h", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["s"], name="reshape"),
        helper.make_node("Transpose", ["s"], ["t"], name="transpose", perm=[0, 2, 1]),
        helper.make_node("Softmax", ["t"], ["y"], name="softmax", axis=-1),
    ]
    initializers = [
        numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([BATCH, 2, 2], np.int64), "shape"),
    ]
    graph = helper.make_graph(
        nodes, "hand", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, 2, 2])],
        initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8)


def base_models() -> dict[str, onnx.ModelProto]:
    """The models mutated: two of the zoo (small) and the hand-built one."""
    return {
        "mlp": create_model("mlp", batch_size=BATCH, input_shape=(1, 4, 4), hidden=(8,)),
        "lenet": create_model("lenet", batch_size=BATCH),
        "hand": hand_built(),
    }


# -- byte mutations -----------------------------------------------------------------------
def flip_bytes(rng, data: bytes) -> bytes:
    out = bytearray(data)
    for position in rng.integers(0, len(out), size=int(rng.integers(1, 9))):
        out[position] ^= 1 << int(rng.integers(0, 8))
    return bytes(out)


def truncate(rng, data: bytes) -> bytes:
    return data[:int(rng.integers(0, len(data)))]


def insert_bytes(rng, data: bytes) -> bytes:
    position = int(rng.integers(0, len(data) + 1))
    noise = rng.integers(0, 256, size=int(rng.integers(1, 33)), dtype=np.uint8).tobytes()
    return data[:position] + noise + data[position:]


def delete_bytes(rng, data: bytes) -> bytes:
    start = int(rng.integers(0, len(data)))
    return data[:start] + data[start + int(rng.integers(1, 65)):]


def overwrite_bytes(rng, data: bytes) -> bytes:
    start = int(rng.integers(0, len(data)))
    noise = rng.integers(0, 256, size=int(rng.integers(1, 17)), dtype=np.uint8).tobytes()
    return (data[:start] + noise + data[start + len(noise):])[:len(data)]


def not_onnx(rng, data: bytes) -> bytes:
    return [b"", b"hello, world\n", b'{"graph": []}', b"\x00" * 64,
            rng.integers(0, 256, size=256, dtype=np.uint8).tobytes(),
            b"\x89PNG\r\n\x1a\n" + data[:40]][int(rng.integers(0, 6))]


BYTE_MUTATIONS = [flip_bytes, truncate, insert_bytes, delete_bytes, overwrite_bytes,
                  not_onnx]


# -- structure mutations ------------------------------------------------------------------
OP_TYPES = ["Relu", "Add", "Conv", "Gemm", "Softmax", "MaxPool", "Reshape", "Flatten",
            "Identity", "Sigmoid", "Concat", "MatMul", "Transpose", "BatchNormalization",
            "NoSuchOp", "Split", "Gather", "ReduceMean"]
ELEMENT_TYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32,
                 TensorProto.FLOAT16, TensorProto.BOOL, TensorProto.STRING,
                 TensorProto.UINT8, TensorProto.BFLOAT16, 0, 99]
VALUES = [-3, -1, 0, 1, 2, 7, 100]


def _node(rng, proto):
    return proto.graph.node[int(rng.integers(0, len(proto.graph.node)))]


def change_op_type(rng, proto):
    _node(rng, proto).op_type = OP_TYPES[int(rng.integers(0, len(OP_TYPES)))]
    return proto


def drop_input(rng, proto):
    node = _node(rng, proto)
    if node.input:
        del node.input[int(rng.integers(0, len(node.input)))]
    return proto


def rename_input(rng, proto):
    node = _node(rng, proto)
    if node.input:
        node.input[int(rng.integers(0, len(node.input)))] = ["nowhere", ""][
            int(rng.integers(0, 2))]
    return proto


def extra_input(rng, proto):
    _node(rng, proto).input.append(proto.graph.input[0].name)
    return proto


def change_attribute(rng, proto):
    node = _node(rng, proto)
    if not node.attribute or rng.random() < 0.2:
        node.attribute.append(helper.make_attribute(
            ["axis", "perm", "kernel_shape", "bogus"][int(rng.integers(0, 4))],
            VALUES[int(rng.integers(0, len(VALUES)))]))
        return proto
    attribute = node.attribute[int(rng.integers(0, len(node.attribute)))]
    choice = int(rng.integers(0, 6))
    name = attribute.name
    if choice == 0:      # another type, same name
        replacement = [helper.make_attribute(name, 1.5), helper.make_attribute(name, "x"),
                       helper.make_attribute(name, [1, 2, 3]),
                       helper.make_attribute(name, 3)][int(rng.integers(0, 4))]
        attribute.CopyFrom(replacement)
    elif choice == 1:    # another value
        value = VALUES[int(rng.integers(0, len(VALUES)))]
        if attribute.ints:
            attribute.ints[int(rng.integers(0, len(attribute.ints)))] = value
        else:
            attribute.i = value
            attribute.f = float(value)
    elif choice == 2:    # removed
        node.attribute.remove(attribute)
    elif choice == 3:    # a list of another length
        attribute.ints.extend([1] * int(rng.integers(1, 3)))
    elif choice == 4:    # type field says one thing, value another
        attribute.type = [onnx.AttributeProto.INTS, onnx.AttributeProto.FLOAT,
                          onnx.AttributeProto.STRING, onnx.AttributeProto.TENSOR,
                          onnx.AttributeProto.UNDEFINED][int(rng.integers(0, 5))]
    else:                # duplicated
        node.attribute.append(attribute)
    return proto


def _initializer(rng, proto):
    inits = proto.graph.initializer
    return inits[int(rng.integers(0, len(inits)))] if inits else None


def change_initializer_dims(rng, proto):
    tensor = _initializer(rng, proto)
    if tensor is not None:
        choice = int(rng.integers(0, 3))
        if choice == 0 and tensor.dims:
            tensor.dims[int(rng.integers(0, len(tensor.dims)))] += int(rng.integers(-2, 3))
        elif choice == 1 and tensor.dims:
            del tensor.dims[-1]
        else:
            tensor.dims.append(int(rng.integers(1, 3)))
    return proto


def change_initializer_dtype(rng, proto):
    tensor = _initializer(rng, proto)
    if tensor is not None:
        tensor.data_type = ELEMENT_TYPES[int(rng.integers(0, len(ELEMENT_TYPES)))]
    return proto


def truncate_initializer_data(rng, proto):
    tensor = _initializer(rng, proto)
    if tensor is not None and tensor.raw_data:
        tensor.raw_data = tensor.raw_data[:int(rng.integers(0, len(tensor.raw_data)))]
    return proto


def remove_initializer(rng, proto):
    inits = proto.graph.initializer
    if inits:
        del inits[int(rng.integers(0, len(inits)))]
    return proto


def change_input_type(rng, proto):
    value = proto.graph.input[0].type.tensor_type
    if rng.random() < 0.5:
        value.elem_type = ELEMENT_TYPES[int(rng.integers(0, len(ELEMENT_TYPES)))]
    elif value.shape.dim and rng.random() < 0.5:
        dim = value.shape.dim[int(rng.integers(0, len(value.shape.dim)))]
        dim.dim_value = VALUES[int(rng.integers(0, len(VALUES)))]
    elif value.shape.dim:
        del value.shape.dim[-1]
    return proto


def duplicate_output(rng, proto):
    nodes = proto.graph.node
    a, b = rng.choice(len(nodes), size=2, replace=len(nodes) < 2)
    nodes[int(a)].output[0] = nodes[int(b)].output[0]
    return proto


def make_cycle(rng, proto):
    nodes = proto.graph.node
    first = int(rng.integers(0, len(nodes)))
    later = int(rng.integers(first, len(nodes)))
    if nodes[first].input:
        nodes[first].input[0] = nodes[later].output[0]
    return proto


def remove_node(rng, proto):
    del proto.graph.node[int(rng.integers(0, len(proto.graph.node)))]
    return proto


def shuffle_nodes(rng, proto):
    nodes = list(proto.graph.node)
    order = rng.permutation(len(nodes))
    del proto.graph.node[:]
    proto.graph.node.extend(nodes[i] for i in order)
    return proto


def change_opset(rng, proto):
    for opset in proto.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = [1, 5, 9, 13, 0, 1000][int(rng.integers(0, 6))]
    return proto


def change_ir_version(rng, proto):
    proto.ir_version = [0, 1, 3, 99][int(rng.integers(0, 4))]
    return proto


def change_graph_outputs(rng, proto):
    outputs = proto.graph.output
    choice = int(rng.integers(0, 3))
    if choice == 0:
        outputs[0].name = "nothing_computes_this"
    elif choice == 1:
        del outputs[:]
    else:
        outputs.append(outputs[0])
    return proto


def remove_graph_input(rng, proto):
    del proto.graph.input[0]
    return proto


def change_domain(rng, proto):
    _node(rng, proto).domain = ["com.microsoft", "no.such.domain", "ai.onnx.ml"][
        int(rng.integers(0, 3))]
    return proto


def empty_output(rng, proto):
    _node(rng, proto).output[0] = ""
    return proto


STRUCTURE_MUTATIONS = [
    change_op_type, drop_input, rename_input, extra_input, change_attribute,
    change_initializer_dims, change_initializer_dtype, truncate_initializer_data,
    remove_initializer, change_input_type, duplicate_output, make_cycle, remove_node,
    shuffle_nodes, change_opset, change_ir_version, change_graph_outputs,
    remove_graph_input, change_domain, empty_output]


@dataclasses.dataclass(frozen=True)
class Case:
    """One fuzz case: base model, mutation, seed (``kind`` is 'bytes' or 'structure')."""
    kind: str
    base: str
    mutation: str
    seed: int

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.base}:{self.mutation}:{self.seed}"

    def build(self, bases: dict) -> bytes | onnx.ModelProto:
        """The mutated model: bytes for byte mutations, a ModelProto otherwise."""
        rng = np.random.default_rng([self.seed, len(self.mutation)])
        if self.kind == "bytes":
            function = {f.__name__: f for f in BYTE_MUTATIONS}[self.mutation]
            return function(rng, bases[self.base].SerializeToString())
        function = {f.__name__: f for f in STRUCTURE_MUTATIONS}[self.mutation]
        proto = onnx.ModelProto()
        proto.CopyFrom(bases[self.base])
        return function(rng, proto)


def cases(seed: int, count: int, kind: str, bases=("mlp", "lenet", "hand")) -> list[Case]:
    """``count`` cases of ``kind``: every mutation in turn, bases and seeds drawn from
    ``seed``."""
    mutations = BYTE_MUTATIONS if kind == "bytes" else STRUCTURE_MUTATIONS
    rng = np.random.default_rng(seed)
    return [Case(kind, bases[int(rng.integers(0, len(bases)))],
                 mutations[index % len(mutations)].__name__, int(rng.integers(0, 2**31)))
            for index in range(count)]


def feeds_for(model, max_dim: int = 64) -> dict:
    """Valid-looking inputs of a parsed model: its declared shapes (free or nonpositive
    dims are ``BATCH``, dims over ``max_dim`` are cut to it) and element types (float32
    where none is declared)."""
    rng = np.random.default_rng(0)
    feeds = {}
    for value in model.feed_inputs:
        shape = [d if isinstance(d, int) and 0 < d <= max_dim else
                 (max_dim if isinstance(d, int) and d > max_dim else BATCH)
                 for d in (value.shape or (BATCH,))]
        dtype = value.dtype if value.dtype is not None else np.dtype(np.float32)
        if dtype.kind in "fc":
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iub":
            feeds[value.name] = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            feeds[value.name] = np.zeros(shape, dtype)
    return feeds
