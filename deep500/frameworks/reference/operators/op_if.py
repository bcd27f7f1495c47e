"""If: the outputs of ``then_branch`` where the one-element boolean ``cond`` holds, of
``else_branch`` otherwise. https://onnx.ai/onnx/operators/onnx__If.html

The branches take no inputs; they read the enclosing graphs' tensors (the node's
implicit inputs). Backward runs through the branch taken: the outer-scope tensors it
reads get gradients, the other branch's get none, cond gets none.
"""
from deep500.frameworks.reference.operators._op_common_body import (ControlFlowOp, own,
                                                                     read_tapes, scalar,
                                                                     with_tapes)
from deep500.frameworks.reference.operators.registry import register


@register("If")
class If(ControlFlowOp):
    defaults = {"then_branch": None, "else_branch": None}
    graph_attributes = ("then_branch", "else_branch")

    def _branch(self, args):
        (cond,), outer = self.split(args)
        taken = "then_branch" if scalar(cond, f"{self.op_type}: cond") else "else_branch"
        body = self.bodies[taken]
        return body, {name: outer[name] for name in body.outer}

    def forward(self, *args):
        body, outer = self._branch(args)
        return own(body.run([], outer), args, body.network.persistent_tensors)

    def forward_taped(self, *args):
        body, outer = self._branch(args)
        outputs, tape = body.run_taped([], outer)
        return with_tapes(own(outputs, args, body.network.persistent_tensors), tape)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        body, outer = self._branch(fwd_inputs)
        tape = read_tapes(fwd_outputs, len(body.outputs))
        if tape is None:
            _, tape = body.run_taped([], outer)
        count = len(body.outputs)
        grads = list(grads[:count]) + [None] * (count - len(grads[:count]))
        return self.input_grads(fwd_inputs, [None], body.backward(tape, grads))
