"""Scan: run ``body`` once per slice of M scan inputs (along ``scan_input_axes``, forward
or reversed by ``scan_input_directions``), threading N state values, and stack the body's
K scan outputs along ``scan_output_axes`` (``scan_output_directions`` 1 prepends, so the
last iteration comes first). https://onnx.ai/onnx/operators/onnx__Scan.html

Opset 8's form has a leading batch axis on every input and output, scans axis 1, takes
``directions`` for its inputs and an optional ``sequence_lens`` input: it is the opset-9
scan run once per batch element (with every sequence of full length). Backward
differentiates the initial states, the scan inputs and the outer-scope tensors the body
reads.
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_body import (IteratingOp, add,
                                                                     is_float, own,
                                                                     read_tapes)
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError


def _axis(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"Scan: {what} {axis} is outside [{-rank}, {rank - 1}]")
    return axis % rank


def _element(values: list, b: int) -> list:
    """Batch element ``b`` of each tensor (None stays None)."""
    return [None if v is None else v[b] for v in values]


@register("Scan")
class Scan(IteratingOp):
    defaults = {"body": None, "num_scan_inputs": None, "scan_input_axes": None,
                "scan_input_directions": None, "scan_output_axes": None,
                "scan_output_directions": None, "directions": None}
    graph_attributes = ("body",)
    batched = False   # opset 8's form

    def bind_node(self, op) -> None:
        super().bind_node(op)
        self.batched = op.since_version < 9

    def _flags(self, name: str, count: int) -> list:
        values = self.attr(name)
        values = [0] * count if values is None else [int(v) for v in values]
        if len(values) != count:
            raise Deep500Error(f"{self.op_type}: attribute {name} has {len(values)} "
                               f"entries; {count} expected, one per scanned tensor")
        return values

    def _inputs(self, args):
        """(sequence_lens or None, states, scan inputs, outer values)."""
        explicit, outer = self.split(args)
        lengths = None
        if self.batched:
            lengths, explicit = explicit[0], explicit[1:]
        m = self.attr("num_scan_inputs")
        if m is None or not 0 < m <= len(explicit):
            raise Deep500Error(f"{self.op_type}: num_scan_inputs={m} must be in [1, "
                               f"{len(explicit)}], the number of states and scan inputs")
        body = self.bodies["body"]
        if len(body.inputs) != len(explicit) or len(body.outputs) < len(explicit) - m:
            raise Deep500Error(f"{self.op_type} ({body.where}): the body takes "
                               f"{len(body.inputs)} inputs and returns {len(body.outputs)}; "
                               f"the node passes {len(explicit)} states and scan inputs")
        return lengths, explicit[:len(explicit) - m], explicit[len(explicit) - m:], outer

    def _layout(self, xs):
        """Per scan input (axis, reversed) and per scan output (axis or None, reversed),
        the number of iterations."""
        body = self.bodies["body"]
        k = len(body.outputs) - (len(body.inputs) - len(xs))
        if self.batched:
            ins = list(zip([0] * len(xs), self._flags("directions", len(xs))))
            outs = [(0, 0)] * k
        else:
            ins = list(zip(self._flags("scan_input_axes", len(xs)),
                           self._flags("scan_input_directions", len(xs))))
            outs = list(zip(self._flags("scan_output_axes", k),
                            self._flags("scan_output_directions", k)))
        ins = [(_axis(a, np.ndim(x), "scan input axis"), d) for (a, d), x in zip(ins, xs)]
        lengths = {np.shape(x)[a] for (a, _), x in zip(ins, xs)}
        if len(lengths) != 1:
            raise ShapeError(f"{self.op_type}: the scan inputs have different lengths "
                             f"{sorted(lengths)} along their scan axes")
        return ins, outs, lengths.pop()

    def _scan(self, states, xs, outer, tapes=None):
        """One scan (no batch axis): (final states, stacked scan outputs)."""
        body = self.bodies["body"]
        ins, outs, length = self._layout(xs)
        views = [np.moveaxis(np.asarray(x), a, 0) for (a, _), x in zip(ins, xs)]
        slices = [[] for _ in outs]
        for t in range(length):
            values = states + [v[length - 1 - t if d else t] for v, (_, d) in zip(views, ins)]
            if tapes is None:
                outputs = body.run(values, outer)
            else:
                outputs, tape = body.run_taped(values, outer)
                tapes.append(tape)
            states = outputs[:len(states)]
            for collected, value in zip(slices, outputs[len(states):]):
                collected.append(value)
        stacked = []
        for k, ((axis, d), collected) in enumerate(zip(outs, slices)):
            if not collected:
                stacked.append(body.empty_output(len(states) + k, axis))
                continue
            axis = _axis(axis, np.ndim(collected[0]) + 1, "scan output axis")
            stacked.append(np.stack(collected[::-1] if d else collected, axis=axis))
        return states, stacked

    def _scan_backward(self, states, xs, outer, g_states, g_outs, tapes):
        """Gradients (states, scan inputs, outer names) of one scan, from its body
        tapes (recomputed where None)."""
        body = self.bodies["body"]
        if tapes is None:
            tapes = []
            self._scan(states, xs, outer, tapes)
        ins, outs, length = self._layout(xs)
        n = len(states)
        g_xs = [np.zeros_like(x) if is_float(x) else None for x in xs]
        g_views = [None if g is None else np.moveaxis(g, a, 0) for g, (a, _) in zip(g_xs, ins)]
        g_outs = [None if g is None else np.moveaxis(g, _axis(a, g.ndim, "scan output axis"), 0)
                  for g, (a, _) in zip(g_outs, outs)]
        outer_grads = {}
        for t in reversed(range(length)):
            output_grads = ([g if is_float(v) else None for g, v in zip(g_states, states)] +
                            [None if g is None else g[length - 1 - t if d else t]
                             for g, (_, d) in zip(g_outs, outs)])
            if all(g is None for g in output_grads):
                g_states = [None] * n
                continue
            body_grads = body.backward(tapes[t], output_grads)
            g_states = [body_grads.get(name) for name in body.inputs[:n]]
            for g_view, name, (_, d) in zip(g_views, body.inputs[n:], ins):
                g = body_grads.get(name)
                if g is not None and g_view is not None:
                    g_view[length - 1 - t if d else t] += g
            add(outer_grads, body_grads, self.implicit)
        return g_states, g_xs, outer_grads

    def _full_lengths(self, lengths, xs) -> None:
        if lengths is None or not xs:
            return
        full = np.shape(xs[0])[1]
        if np.any(np.asarray(lengths) != full):
            raise UnsupportedError(f"{self.op_type} (opset 8): sequence_lens "
                                   f"{np.asarray(lengths).tolist()} shorter than the scanned "
                                   f"axis ({full}) are not supported by the reference operator")

    def _outputs(self, args, tapes=None) -> tuple:
        """The outputs; with ``tapes`` (a list), the body tapes of the scan (of each batch
        element in opset 8's form) are appended to it."""
        lengths, states, xs, outer = self._inputs(args)
        body = self.bodies["body"]
        if not self.batched:
            states, stacked = self._scan(states, xs, outer, tapes)
        else:
            self._full_lengths(lengths, xs)
            runs = []
            for b in range(np.shape((states + xs)[0])[0]):
                element = None if tapes is None else []
                runs.append(self._scan(_element(states, b), _element(xs, b), outer, element))
                if tapes is not None:
                    tapes.append(element)
            if not runs:
                raise ShapeError(f"{self.op_type} (opset 8): the batch is empty")
            states = [np.stack([r[0][i] for r in runs]) for i in range(len(states))]
            stacked = [np.stack([r[1][k] for r in runs]) for k in range(len(runs[0][1]))]
        return own(states + stacked, args, body.network.persistent_tensors)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        lengths, states, xs, outer = self._inputs(fwd_inputs)
        body = self.bodies["body"]
        n = len(states)
        count = len(body.outputs)
        tapes = read_tapes(fwd_outputs, count)
        grads = list(grads[:count]) + [None] * (count - len(grads[:count]))
        g_states, g_outs = grads[:n], grads[n:]
        if not self.batched:
            g_states, g_xs, outer_grads = self._scan_backward(states, xs, outer, g_states,
                                                              g_outs, tapes)
            return self.input_grads(fwd_inputs, g_states + g_xs, outer_grads)
        batch = np.shape((states + xs)[0])[0]
        g_all = [np.zeros_like(v) if is_float(v) else None for v in states + xs]
        outer_grads = {}
        for b in range(batch):
            gs, gx, go = self._scan_backward(_element(states, b), _element(xs, b), outer,
                                             _element(g_states, b), _element(g_outs, b),
                                             None if tapes is None else tapes[b])
            for total, g in zip(g_all, gs + gx):
                if total is not None and g is not None:
                    total[b] += g
            add(outer_grads, go, self.implicit)
        return self.input_grads(fwd_inputs, [None] + g_all, outer_grads)
