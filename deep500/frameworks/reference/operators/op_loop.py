"""Loop: run the ``body`` graph while ``i < M`` and ``cond`` hold, threading N
loop-carried values and stacking K scan outputs (one slice per iteration, along a new
first axis). https://onnx.ai/onnx/operators/onnx__Loop.html

The body takes (iteration number, condition, N carried values) and returns (condition,
N carried values, K scan outputs). M and cond are optional: with M only, the body's
condition output is ignored; with cond only, the loop runs while it holds. Backward
(backpropagation through time) differentiates the carried values, the scan outputs and
the outer-scope tensors the body reads; M, cond and integer or boolean values get no
gradient.
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_body import (IteratingOp, add,
                                                                     is_float, own,
                                                                     read_tapes, scalar)
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import Deep500Error


@register("Loop")
class Loop(IteratingOp):
    defaults = {"body": None}
    graph_attributes = ("body",)

    def _iterate(self, args, tapes=None):
        """(final carried values, scan slices per output, iterations run); with
        ``tapes`` (a list), each iteration's body tape is appended to it."""
        (M, cond, *carried), outer = self.split(args)
        body = self.bodies["body"]
        where = f"{self.op_type} ({body.where})"
        if len(body.inputs) != 2 + len(carried) or len(body.outputs) < 1 + len(carried):
            raise Deep500Error(f"{where}: the body takes {len(body.inputs)} inputs and returns "
                               f"{len(body.outputs)} outputs; a Loop with {len(carried)} "
                               f"carried values needs {2 + len(carried)} inputs and at least "
                               f"{1 + len(carried)} outputs")
        if M is None and cond is None:
            raise Deep500Error(f"{where}: neither the trip count M nor cond is given, so the "
                               f"loop would never end; give the node one of them")
        trip = None if M is None else int(scalar(M, f"{where}: M"))
        running = True if cond is None else bool(scalar(cond, f"{where}: cond"))
        condition = np.array(running)
        scans = [[] for _ in range(len(body.outputs) - 1 - len(carried))]
        i = 0
        while running and (trip is None or i < trip):
            values = [np.array(i, np.int64), condition] + carried
            if tapes is None:
                outputs = body.run(values, outer)
            else:
                outputs, tape = body.run_taped(values, outer)
                tapes.append(tape)
            condition = outputs[0]
            carried = outputs[1:1 + len(carried)]
            for slices, value in zip(scans, outputs[1 + len(carried):]):
                slices.append(value)
            if cond is not None:
                running = bool(scalar(condition, f"{where}: the body's condition output"))
            i += 1
        return carried, scans, i

    def _outputs(self, args, tapes=None) -> tuple:
        carried, scans, _ = self._iterate(args, tapes)
        body = self.bodies["body"]
        stacked = [np.stack(s) if s else body.empty_output(1 + len(carried) + k)
                   for k, s in enumerate(scans)]
        return own(carried + stacked, args, body.network.persistent_tensors)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        body = self.bodies["body"]
        count = len(body.outputs) - 1
        tapes = read_tapes(fwd_outputs, count)
        if tapes is None:
            tapes = []
            self._iterate(fwd_inputs, tapes)
        carried = fwd_outputs[:len(body.inputs) - 2]
        n = len(carried)
        grads = list(grads[:count]) + [None] * (count - len(grads[:count]))
        g_carried, g_scans = grads[:n], grads[n:]
        outer = {}
        for i in reversed(range(len(tapes))):
            output_grads = ([None] + [g if is_float(v) else None
                                      for g, v in zip(g_carried, carried)] +
                            [None if g is None else g[i] for g in g_scans])
            if all(g is None for g in output_grads):
                g_carried = [None] * n
                continue
            body_grads = body.backward(tapes[i], output_grads)
            g_carried = [body_grads.get(name) for name in body.inputs[2:]]
            add(outer, body_grads, self.implicit)
        return self.input_grads(fwd_inputs, [None, None] + g_carried, outer)
