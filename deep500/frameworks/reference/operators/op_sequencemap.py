"""SequenceMap: the ``body`` graph applied to each position of the input sequence(s).
https://onnx.ai/onnx/operators/onnx__SequenceMap.html

The first input is a sequence and sets the number of positions; an additional input
that is a sequence must have as many tensors and gives the body its tensor at the same
position, a tensor is given whole at every position. Each body output becomes a
sequence of one tensor per position. Gradients do not flow through sequences
(:class:`SequenceOp`)."""
from deep500.frameworks.reference.operators._op_common_body import ControlFlowOp, own
from deep500.frameworks.reference.operators._op_common_sequence import (SequenceOp,
                                                                         is_sequence,
                                                                         sequence)
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import Deep500Error, ShapeError


@register("SequenceMap")
class SequenceMap(ControlFlowOp, SequenceOp):   # SequenceOp: its backward
    defaults = {"body": None}
    graph_attributes = ("body",)

    def forward(self, *args):
        (first, *others), outer = self.split(args)
        first = sequence(first, self.op_type)
        for k, other in enumerate(others):
            if is_sequence(other) and len(other) != len(first):
                raise ShapeError(f"{self.op_type}: additional input {k} is a sequence of "
                                 f"{len(other)} tensors, the input sequence has "
                                 f"{len(first)}")
        body = self.bodies["body"]
        if len(body.inputs) != 1 + len(others):
            raise Deep500Error(f"{self.op_type} ({body.where}): the body takes "
                               f"{len(body.inputs)} inputs, the node passes "
                               f"{1 + len(others)}")
        results = [[] for _ in body.outputs]
        for i, element in enumerate(first):
            values = [element] + [v[i] if is_sequence(v) else v for v in others]
            outputs = own(body.run(values, outer), values + list(outer.values()),
                          body.network.persistent_tensors)
            for collected, value in zip(results, outputs):
                collected.append(value)
        return tuple(results)
