"""TensorFlowVisitor: the control family (``deep500/frameworks/families.py``), Loop, If
and Scan: https://onnx.ai/onnx/operators/onnx__Loop.html, .../onnx__If.html,
.../onnx__Scan.html.

A body (a graph attribute) is built once, by a visitor of the same kind, into a nested
TensorFlow network (made by the factory ``deep500.frameworks.tensorflow.network``
registers in ``deep500.frameworks._bridge.inner_network``) whose inputs are the body's
formal inputs and its outer-scope names (``OnnxModel.outer_inputs``, the names ONNX lets
a body read from the enclosing graphs: https://onnx.ai/onnx/repo-docs/IR.html#graphs).
The node reads those names as its ``implicit_inputs``, after its explicit ones, so that
they are scheduled and differentiated like any input: an outer parameter (a recurrent
weight) reaches the body as the ``tf.Variable`` itself and GradientTape records its
reads.

Iterations run as a Python loop over the body's plan while the loop's bounds and
condition are known when the closure runs: always in eager mode, and in a traced
function when they are constants or computed from shapes (Loop's trip count is read
like any shape-deciding input; Scan's length is a static dimension). The iteration
counter is then a NumPy value, so that shape arithmetic on it (slice bounds) stays
static. A traced Loop whose condition or trip count is only known at run time, or that
exceeds :data:`UNROLL_LIMIT` iterations, continues as a ``tf.while_loop`` (its gradient
is TensorFlow's); an If with a run-time condition is a ``tf.cond``. Sequence- and
optional-typed values flow as Python lists and None (``_value_kinds.py``); a
``tf.while_loop`` cannot carry them, so a Loop that carries one needs its bounds when the
function is traced (or mode='eager').
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow._value_kinds import is_sequence, to_tensors
from deep500.frameworks.tensorflow.ops._body import Body
from deep500.frameworks.tensorflow.ops._values import _dims, _known_value, _tensor
from deep500.utils.errors import ShapeError, UnsupportedError


#: Iterations of a Loop a traced function unrolls before a ``tf.while_loop`` runs the
#: rest (each unrolled iteration adds the body's operations to the traced graph).
UNROLL_LIMIT = 1024


def _scalar(value, what: str, visitor, op):
    """The Python value of a one-element operand, or None when only known at run time."""
    known = _known_value(value)
    if known is None:
        return None
    known = np.asarray(known)
    if known.size != 1:
        raise visitor.node_error(op, f"{what} must hold one element, got shape "
                                     f"{list(known.shape)}", ShapeError)
    return known.reshape(-1)[0].item()


def _as_bool(value):
    return tf.reshape(tf.cast(_tensor(value), tf.bool), [])


def _stack(values: list, axis: int):
    if all(isinstance(v, np.ndarray) for v in values):
        return np.stack(values, axis)
    return tf.stack([_tensor(v) for v in values], axis)


def _take(x, index: int, axis: int):
    """Slice ``index`` of axis ``axis`` (the axis removed)."""
    return x[(slice(None),) * axis + (index,)]


class ControlOps:
    """``visit_<op>`` of the control family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def _outer_keys(self, op) -> list[str]:
        return [self.key(name) for name in op.implicit_inputs]

    def visit_if(self, op, network) -> None:
        """If: run ``then_branch`` or ``else_branch``; a condition known only at run
        time (inside a traced function) becomes a ``tf.cond``. Where the branches return
        sequences or optionals, whose structure the condition decides, a traced function
        reads the condition when it is traced (it is traced once per value)."""
        branches = [Body(self, op, "then_branch"), Body(self, op, "else_branch")]
        for branch, name in zip(branches, ("then_branch", "else_branch")):
            if len(branch.outputs) != len(op.outputs):
                raise self.node_error(op, f"{name} has {len(branch.outputs)} outputs, the "
                                          f"node {len(op.outputs)}; fix the model")
        outer = list(op.implicit_inputs)

        def if_(cond, *values):
            scope = dict(zip(outer, values))
            known = _scalar(cond, "cond", self, op)
            if known is not None:
                return tuple(branches[0 if known else 1]([], scope))

            def branch(body):
                return lambda: to_tensors(body([], scope))
            return tuple(tf.cond(_as_bool(cond), branch(branches[0]), branch(branches[1])))
        graph = op.attributes.get("then_branch")
        structured = graph is not None and any(
            value.type.WhichOneof("value") in ("sequence_type", "optional_type")
            for value in graph.output)
        cond_key = self.static_key(op.inputs[0]) if structured else self.key(op.inputs[0])
        self.emit(if_, [cond_key] + self._outer_keys(op), list(op.outputs))

    def visit_loop(self, op, network) -> None:
        """Loop: ``body(iteration, cond, v...) -> (cond, v..., scan elements...)`` while
        ``iteration < M`` (when M is given) and ``cond`` (when cond is given; the
        body's condition output is ignored otherwise, as the spec's table says); scan
        elements are stacked along a new axis 0."""
        body = Body(self, op, "body")
        names = list(op.inputs) + [""] * (2 - len(op.inputs))
        n_carried = len(names) - 2
        n_scan = len(op.outputs) - n_carried
        if len(body.inputs) != 2 + n_carried or len(body.outputs) != 1 + n_carried + n_scan \
                or n_scan < 0:
            raise self.node_error(op, f"the body takes {len(body.inputs)} inputs and returns "
                                      f"{len(body.outputs)} outputs; with {n_carried} "
                                      f"loop-carried values and {len(op.outputs)} node "
                                      f"outputs it must take {2 + n_carried} and return "
                                      f"{1 + len(op.outputs)}; fix the model")
        has_trip, has_cond = bool(names[0]), bool(names[1])
        outer = list(op.implicit_inputs)

        def loop(trip, cond, *values):
            carried = list(values[:n_carried])
            scope = dict(zip(outer, values[n_carried:]))
            limit = None
            if has_trip:
                limit = _scalar(trip, "M", self, op)
                limit = trip if limit is None else int(limit)
            keep = True
            if has_cond:
                keep = _scalar(cond, "cond", self, op)
                keep = _as_bool(cond) if keep is None else bool(keep)
            eager = tf.executing_eagerly()
            scans = [[] for _ in range(n_scan)]
            i = 0
            while True:
                known = isinstance(keep, bool) and (limit is None or isinstance(limit, int))
                if not known or (not eager and i >= UNROLL_LIMIT):
                    return self._while_loop(op, body, i, keep, limit, has_cond, carried,
                                            scans, scope)
                if not keep or (limit is not None and i >= limit):
                    break
                outputs = body([np.array(i, np.int64), np.array(keep)] + carried, scope)
                carried = outputs[1:1 + n_carried]
                for k, value in enumerate(outputs[1 + n_carried:]):
                    scans[k].append(value)
                i += 1
                if has_cond:
                    keep = _scalar(outputs[0], "the body's condition", self, op)
                    keep = _as_bool(outputs[0]) if keep is None else bool(keep)
            return tuple(carried) + tuple(
                _stack(scan, 0) if scan else body.empty(1 + n_carried + k)
                for k, scan in enumerate(scans))
        keys = ([self.static_key(names[0]), self.key(names[1])]
                + [self.key(n) for n in names[2:]] + self._outer_keys(op))
        self.emit(loop, keys, list(op.outputs))

    def _while_loop(self, op, body, start: int, keep, limit, has_cond: bool, carried: list,
                    scans: list, scope: dict) -> tuple:
        """The rest of a traced Loop from iteration ``start`` as a ``tf.while_loop``;
        scan elements of the iterations already unrolled (``scans``) come first. Loop-
        carried values may change shape between iterations (ONNX allows it): if
        TensorFlow refuses the loop for that, it is rebuilt with their dimensions
        unknown."""
        n_carried = len(carried)
        if any(v is None or is_sequence(v) for v in carried):
            raise self.node_error(op, "a loop-carried sequence or optional needs the loop's "
                                      "trip count and condition when the function is "
                                      "traced; use mode='eager'")
        dtypes = []
        for k, scan in enumerate(scans):
            dtype = (tf.convert_to_tensor(scan[0]).dtype if scan
                     else body.outputs[1 + n_carried + k].dtype)
            if dtype is None:
                raise self.node_error(op, f"the body declares no element type for scan "
                                          f"output {k}, which a tf.while_loop needs; declare "
                                          f"it, or use mode='eager'", UnsupportedError)
            dtypes.append(tf.as_dtype(dtype))
        bound = None if limit is None else tf.cast(tf.reshape(_tensor(limit), []), tf.int64)
        initial = ([tf.constant(start, tf.int64), _as_bool(keep)]
                   + [tf.convert_to_tensor(v) for v in carried]   # variables read
                   + [tf.TensorArray(dtype, size=0, dynamic_size=True) for dtype in dtypes])

        def condition(i, go, *rest):
            return go if bound is None else tf.logical_and(go, i < bound)

        def step(i, go, *rest):
            values, arrays = list(rest[:n_carried]), rest[n_carried:]
            outputs = body([i, go] + values, scope)
            go = _as_bool(outputs[0]) if has_cond else go
            values = [tf.cast(new, old.dtype) for new, old in
                      zip(outputs[1:1 + n_carried], values)]
            index = tf.cast(i - start, tf.int32)
            arrays = [array.write(index, tf.convert_to_tensor(value)) for array, value in
                      zip(arrays, outputs[1 + n_carried:])]
            return [i + 1, go] + values + arrays
        try:
            final = tf.while_loop(condition, step, initial)
        except ValueError as exc:
            if "shape_invariants" not in str(exc):
                raise
            relaxed = ([tf.TensorShape([]), tf.TensorShape([])]
                       + [tf.TensorShape([None] * len(v.shape)) for v in initial[2:2 + n_carried]]
                       + [tf.TensorShape(None)] * len(dtypes))
            final = tf.while_loop(condition, step, initial, shape_invariants=relaxed)
        outputs = list(final[2:2 + n_carried])
        for scan, array in zip(scans, final[2 + n_carried:]):
            stacked = array.stack()
            outputs.append(tf.concat([_stack(scan, 0), stacked], 0) if scan else stacked)
        return tuple(outputs)

    def visit_scan(self, op, network) -> None:
        """Scan (opset 9 and newer): ``body(state..., elements...) -> (state...,
        scan elements...)`` over slices of the scan inputs along ``scan_input_axes``
        (reversed where ``scan_input_directions`` is 1), scan elements stacked along
        ``scan_output_axes`` (in reverse order where ``scan_output_directions`` is 1).
        Scan-8's batched form (a leading batch axis, time on axis 1, ``directions``) is
        run per batch element; its ``sequence_lens`` must be omitted or all full."""
        body = Body(self, op, "body")
        batched = op.since_version < 9
        names = list(op.inputs[1:] if batched else op.inputs)
        n_in = int(op.attributes["num_scan_inputs"])
        n_state = len(names) - n_in
        n_out = len(op.outputs) - n_state
        if n_state < 0 or n_out < 0 or len(body.inputs) != n_state + n_in \
                or len(body.outputs) != n_state + n_out:
            raise self.node_error(op, f"the body takes {len(body.inputs)} inputs and returns "
                                      f"{len(body.outputs)} outputs; with {len(names)} "
                                      f"inputs ({n_in} scanned) and {len(op.outputs)} outputs "
                                      f"it must take {len(names)} and return "
                                      f"{len(op.outputs)}; fix the model")
        in_axes, in_dirs, out_axes, out_dirs = self._scan_layout(op, batched, n_in, n_out)
        outer = list(op.implicit_inputs)

        def run(states, xs, scope):
            axes = [axis + len(x.shape) if axis < 0 else axis for x, axis in zip(xs, in_axes)]
            length = self._scan_length(op, xs, axes)
            scans = [[] for _ in range(n_out)]
            for t in range(length):
                elements = [_take(x, length - 1 - t if d else t, axis)
                            for x, axis, d in zip(xs, axes, in_dirs)]
                outputs = body(list(states) + elements, scope)
                states = outputs[:n_state]
                for k, value in enumerate(outputs[n_state:]):
                    scans[k].append(value)
            stacked = []
            for k, (scan, axis, d) in enumerate(zip(scans, out_axes, out_dirs)):
                stacked.append(_stack(scan[::-1] if d else scan, axis) if scan
                               else body.empty(n_state + k))
            return list(states) + stacked

        def scan(*values):
            scope = dict(zip(outer, values[len(names):]))
            return tuple(run(values[:n_state], values[n_state:len(names)], scope))

        def scan8(lengths, *values):
            scope = dict(zip(outer, values[len(names):]))
            values = values[:len(names)]
            batch = self._scan8_batch(op, lengths, values, n_state)
            per_batch = [run([_take(s, b, 0) for s in values[:n_state]],
                             [_take(x, b, 0) for x in values[n_state:]], scope)
                         for b in range(batch)]
            return tuple(_stack([result[k] for result in per_batch], 0)
                         for k in range(len(op.outputs)))
        keys = [self.key(n) for n in names] + self._outer_keys(op)
        if batched:
            self.emit(scan8, [self.static_key(op.inputs[0])] + keys, list(op.outputs))
        else:
            self.emit(scan, keys, list(op.outputs))

    def _scan_layout(self, op, batched: bool, n_in: int, n_out: int) -> tuple:
        """Scan's (input axes, input directions, output axes, output directions), one
        per scan input or output: Scan-8 scans axis 0 (of each batch entry) with its
        ``directions``; Scan-9 reads the four ``scan_*`` attributes, 0 where absent."""
        def listed(key: str, count: int) -> list[int]:
            values = op.attributes.get(key)
            values = [0] * count if values is None else [int(v) for v in values]
            if len(values) != count:
                raise self.node_error(op, f"{key} has {len(values)} entries for {count} "
                                          f"values; fix the model")
            return values
        if batched:
            return [0] * n_in, listed("directions", n_in), [0] * n_out, [0] * n_out
        return (listed("scan_input_axes", n_in), listed("scan_input_directions", n_in),
                listed("scan_output_axes", n_out), listed("scan_output_directions", n_out))

    def _scan_length(self, op, xs: list, axes: list) -> int:
        """The one length of the scan inputs ``xs`` along their ``axes`` (0 with no scan
        input); it must be known when the closure runs."""
        lengths = {_dims(x)[axis] for x, axis in zip(xs, axes)}
        if None in lengths:
            raise self.node_error(op, "the scanned axis has a length known only at run "
                                      "time; use mode='eager'", UnsupportedError)
        if len(lengths) > 1:
            raise self.node_error(op, f"the scan inputs have different lengths "
                                      f"{sorted(lengths)} along their scan axes",
                                  ShapeError)
        return lengths.pop() if lengths else 0

    def _scan8_batch(self, op, lengths, values: list, n_state: int) -> int:
        """Scan-8's batch size (axis 0 of the first of ``values``, its ``n_state`` states
        then its scan inputs), after checking that it is static and that
        ``sequence_lens``, when given, are the full lengths of the scan inputs."""
        batch = _dims(values[0])[0] if values else 0
        if batch is None:
            raise self.node_error(op, "the batch size is known only at run time; use "
                                      "mode='eager'", UnsupportedError)
        if lengths is not None:
            given = _known_value(lengths)
            full = {_dims(x)[1] for x in values[n_state:]}
            if given is None or len(full) != 1 or np.any(np.asarray(given) != full.pop()):
                raise self.node_error(op, "sequence_lens shorter than the scan inputs "
                                          "are not supported; omit it", UnsupportedError)
        return batch
