"""Deep500's object model of an ONNX file: typed operations, values, parameters."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from deep500.utils.errors import Deep500Error
from deep500.utils.onnx_interop.schemas import OnnxOperation


@dataclass(frozen=True)
class OnnxValueInfo:
    """A named tensor of the graph: element type and shape (symbolic dims as strings,
    unknown dims as None)."""
    name: str
    dtype: np.dtype | None
    shape: tuple | None

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    @classmethod
    def from_proto(cls, proto: onnx.ValueInfoProto) -> "OnnxValueInfo":
        tensor_type = proto.type.tensor_type
        dtype = None
        if tensor_type.elem_type:
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        shape = None
        if tensor_type.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else
                          (d.dim_param or None) for d in tensor_type.shape.dim)
        return cls(proto.name, dtype, shape)


@dataclass
class OnnxModel:
    """A parsed model. ``operations`` are in topological order, in the normalised form
    of ``normalize.py``; ``initializers`` (the parameters and constants stored in the
    file) are NumPy arrays; ``constants`` are the tensors normalisation made from
    attributes of older opsets (never parameters). A node with graph attributes
    (Loop, If, Scan) holds their parsed bodies in ``op.subgraphs`` (attribute name ->
    OnnxModel); a body's ``outer_inputs`` are the names it reads from enclosing
    graphs."""
    name: str
    opset: int
    inputs: list[OnnxValueInfo]
    outputs: list[OnnxValueInfo]
    initializers: dict[str, np.ndarray]
    operations: list[OnnxOperation]
    value_info: dict[str, OnnxValueInfo] = field(default_factory=dict)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    proto: onnx.ModelProto | None = field(default=None, repr=False)
    source: str = "<in memory>"
    # A control-flow body's reads from the enclosing graphs (empty for a main graph).
    outer_inputs: list[str] = field(default_factory=list)
    # Floating initializers kept constant in training (see ``freeze``).
    frozen: set = field(default_factory=set)

    @property
    def feed_inputs(self) -> list[OnnxValueInfo]:
        """Graph inputs a caller must feed (inputs that are not initializers)."""
        return [i for i in self.inputs if i.name not in self.initializers]

    @property
    def parameters(self) -> list[str]:
        """Trainable tensors: floating-point initializers, except batch-norm running
        statistics (BatchNormalization's ``input_mean`` and ``input_var``), which are
        estimated from data rather than learned by gradient descent, and the ones
        ``freeze`` named."""
        statistics = set()
        for op in self.operations:
            if op.op_type == "BatchNormalization":
                statistics.update(op.inputs[3:5])
        return [name for name, value in self.initializers.items()
                if np.issubdtype(value.dtype, np.floating) and name not in statistics
                and name not in self.frozen]

    def freeze(self, *patterns: str) -> list[str]:
        """Keep the floating initializers whose names fully match any of the regular
        expressions ``patterns`` constant in training; returns their names.

        ONNX marks no initializer as a constant, so exporters' folded constants (tf2onnx's
        ``const_fold_opt__12``, a mask's fill value) count as parameters and would train,
        which the source framework's model does not do: ``model.freeze(r"const_fold_.*")``
        and build executors from ``model``. A pattern that matches no floating
        initializer is an error that lists them."""
        import re
        floating = [name for name, value in self.initializers.items()
                    if np.issubdtype(value.dtype, np.floating)]
        chosen = []
        for pattern in patterns:
            try:
                regex = re.compile(pattern)
            except (re.error, TypeError) as exc:
                raise Deep500Error(f"model {self.name!r}: freeze pattern {pattern!r} is not "
                                   f"a regular expression: {exc}") from None
            matched = [name for name in floating if regex.fullmatch(name)]
            if not matched:
                shown = ", ".join(floating[:12]) + (" ..." if len(floating) > 12 else "")
                raise Deep500Error(f"model {self.name!r}: freeze pattern {pattern!r} matches "
                                   f"no floating-point initializer; they are: {shown}")
            chosen += [name for name in matched if name not in chosen]
        self.frozen.update(chosen)
        return chosen

    def operation(self, name: str) -> OnnxOperation:
        for op in self.operations:
            if op.name == name:
                return op
        raise KeyError(f"model {self.name!r} has no node {name!r}")
