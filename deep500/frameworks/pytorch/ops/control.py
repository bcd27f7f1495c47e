"""The control family in PyTorch: Loop, If and Scan, mixed into
:class:`deep500.frameworks.pytorch.visitor.PyTorchVisitor`.

Each body is built once into a module of its own (``_bodies``). The loops run in Python,
one body call per iteration, from differentiable ``torch`` operations, so autograd
differentiates the unrolled iterations (backpropagation through time). Loop-carried
values and branch outputs may be sequences (lists of tensors) and optionals (None when
empty), as the sequence family carries them.
Semantics: https://onnx.ai/onnx/operators/onnx__Loop.html,
https://onnx.ai/onnx/operators/onnx__If.html,
https://onnx.ai/onnx/operators/onnx__Scan.html (opset 8, batched, and opset 9+).
"""
from __future__ import annotations

import onnx

from deep500.frameworks.pytorch._torch_common import torch_dtype
from deep500.frameworks.pytorch.ops._bodies import Body
from deep500.utils.errors import ModelError, ShapeError, UnsupportedError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


class ControlOps:
    """``visit_<op>`` of the control family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers (and
    ``_bodies.NestedGraphs``) they use."""

    def visit_loop(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Loop.html: ``for (i = 0; i < M && cond;
        ++i) (cond, carried..., scans...) = body(i, cond, carried...)``; M and cond are
        optional (a missing M is no limit; a missing cond is true, and the body's cond
        output is then ignored). Outputs: the final carried values, then each scan
        output stacked along a new first axis."""
        body = self._body(op, "body")
        names = list(op.inputs)
        carried = len(names) - 2
        scans = len(body.outputs) - 1 - carried
        if len(body.formals) != carried + 2 or scans < 0:
            raise self.node_error(op, f"its body takes {len(body.formals)} inputs and returns "
                                  f"{len(body.outputs)} outputs for {carried} loop-carried "
                                  f"values; it must take 2 + {carried} (iteration number, "
                                  f"condition, carried values) and return 1 + {carried} + "
                                  f"K (condition, carried values, scan outputs)", ModelError)
        if not names[0] and not names[1]:
            raise self.node_error(op, "has neither a trip count M nor a condition: ONNX "
                                  "defines it as a loop that never ends", ModelError)
        has_cond = bool(names[1])
        explicit = len(names)
        scan_info = body.output_info[1 + carried:]
        outputs = len(op.outputs)
        name = op.name

        def loop(*values):
            values = values + (None,) * (explicit + len(body.outer) - len(values))
            trip, cond = values[0], values[1]
            state = list(values[2:explicit])
            outer = values[explicit:]
            limit = None if trip is None else int(trip)
            keep_going = True if cond is None else bool(cond)
            device = _device(values)
            condition = cond if cond is not None else torch.ones((), dtype=torch.bool,
                                                                 device=device)
            stacks = [[] for _ in range(scans)]
            i = 0
            while keep_going and (limit is None or i < limit):
                iteration = torch.tensor(i, dtype=torch.int64, device=device)
                results = body.run([iteration, condition, *state], outer)
                condition = results[0]
                state = results[1:1 + carried]
                for stack, value in zip(stacks, results[1 + carried:]):
                    stack.append(value)
                if has_cond:
                    keep_going = bool(condition)
                i += 1
            final = state + [_stack(stack, 0, info, name, device)
                             for stack, info in zip(stacks, scan_info)]
            return tuple(final[:outputs]) if outputs > 1 else final[0]
        self._emit_control(op, loop, names + body.outer)

    def visit_if(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__If.html: runs ``then_branch`` if the
        one-element ``cond`` is true, else ``else_branch``. A condition known while
        building (a shape check of an exported model) builds only the branch taken."""
        outputs = len(op.outputs)
        chosen = self._known(op.inputs[0])
        if chosen is not None:
            if chosen.numel() != 1:
                raise self.node_error(op, f"the condition has {chosen.numel()} elements; it "
                                      f"must have one", ShapeError)
            branch = self._body(op, "then_branch" if bool(chosen) else "else_branch")
            self._check_branch(op, branch, outputs)

            def taken(*outer):
                results = branch.run([], outer)
                return tuple(results) if outputs > 1 else results[0]
            self._emit_control(op, taken, branch.outer)
            return
        then_branch = self._body(op, "then_branch")
        else_branch = self._body(op, "else_branch")
        for branch in (then_branch, else_branch):
            self._check_branch(op, branch, outputs)
        outer = list(dict.fromkeys(then_branch.outer + else_branch.outer))
        picks = [[outer.index(n) for n in b.outer] for b in (then_branch, else_branch)]

        def if_(cond, *values):
            if cond.numel() != 1:
                raise ShapeError(f"If node '{op.name}': the condition has {cond.numel()} "
                                 f"elements; it must have one")
            which = 0 if bool(cond) else 1
            branch = (then_branch, else_branch)[which]
            results = branch.run([], [values[k] for k in picks[which]])
            return tuple(results) if outputs > 1 else results[0]
        self._emit_control(op, if_, [op.inputs[0]] + outer)

    def _check_branch(self, op, branch: Body, outputs: int) -> None:
        if branch.formals or len(branch.outputs) != outputs:
            raise self.node_error(op, f"a branch takes {len(branch.formals)} inputs and returns "
                                  f"{len(branch.outputs)} outputs; it must take none and "
                                  f"return the node's {outputs}", ModelError)

    def visit_scan(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Scan.html: ``(states..., scan output
        elements...) = body(states..., one slice of each scan input)`` over the scan
        inputs' ``scan_input_axes`` (each forward or, by ``scan_input_directions``,
        reversed); scan outputs are stacked along ``scan_output_axes`` (reversed by
        ``scan_output_directions``). Opset 8's Scan has a batch axis 0, scans axis 1,
        takes optional ``sequence_lens`` first and ``directions`` for its inputs; scan
        outputs of shorter sequences are padded with zeros to the longest."""
        body = self._body(op, "body")
        scanned = op.attributes["num_scan_inputs"]
        batched = op.original_version < 9
        explicit = list(op.inputs)
        states = len(explicit) - scanned - (1 if batched else 0)
        outs = len(body.outputs) - states
        if states < 0 or len(body.formals) != states + scanned or outs < 0:
            raise self.node_error(op, f"its body takes {len(body.formals)} inputs and returns "
                                  f"{len(body.outputs)} outputs for {max(states, 0)} states "
                                  f"and {scanned} scan inputs", ModelError)
        in_axes, in_dirs, out_axes, out_dirs = self._scan_layout(op, batched, scanned, outs)
        scan_info = body.output_info[states:]
        outputs = len(op.outputs)
        name = op.name

        def scan(xs_states, xs, outer, device):
            """Scan-9 on one (unbatched) set of states and scan inputs."""
            length, slices = _scan_slices(xs, in_axes, in_dirs, name)
            stacks = [[] for _ in range(outs)]
            state = list(xs_states)
            for t in range(length):
                results = body.run(state + [s[t] for s in slices], outer)
                state = results[:states]
                for stack, value in zip(stacks, results[states:]):
                    stack.append(value)
            return state, [_stack(s[::-1] if d else s, axis, info, name, device)
                           for s, d, axis, info in zip(stacks, out_dirs, out_axes,
                                                       scan_info)]

        def finish(values):
            return tuple(values[:outputs]) if outputs > 1 else values[0]

        if not batched:
            def scan9(*values):
                outer = values[len(explicit):]
                state, stacked = scan(values[:states], values[states:len(explicit)],
                                      outer, _device(values))
                return finish(state + stacked)
            self._emit_control(op, scan9, explicit + body.outer)
            return

        def scan8(*values):
            values = values + (None,) * (len(explicit) + len(body.outer) - len(values))
            lens, initial = values[0], values[1:1 + states]
            xs = values[1 + states:len(explicit)]
            outer = values[len(explicit):]
            longest = xs[0].shape[1]
            lengths = _sequence_lengths(lens, xs[0].shape[0], longest, name)
            device = _device(values)
            finals, stacked = [], []
            for b, length in enumerate(lengths):
                state, results = scan([s[b] for s in initial],
                                      [x[b, :length] for x in xs], outer, device)
                finals.append(state)
                stacked.append([_pad(r, longest) for r in results])
            state = [torch.stack(column) for column in zip(*finals)]
            return finish(state + [torch.stack(column) for column in zip(*stacked)])
        self._emit_control(op, scan8, explicit + body.outer)

    def _scan_layout(self, op, batched: bool, scanned: int, outs: int) -> tuple:
        """Scan's (input axes, input directions, output axes, output directions), one
        per scan input or output: opset 8 scans axis 1 (axis 0 of each batch entry) by
        its ``directions``; opset 9 reads the four ``scan_*`` attributes, 0 where
        absent."""
        a = op.attributes
        if batched:
            in_dirs = list(a.get("directions") or [0] * scanned)
            in_axes, out_axes, out_dirs = [0] * scanned, [0] * outs, [0] * outs
        else:
            in_axes = list(a.get("scan_input_axes") or [0] * scanned)
            in_dirs = list(a.get("scan_input_directions") or [0] * scanned)
            out_axes = list(a.get("scan_output_axes") or [0] * outs)
            out_dirs = list(a.get("scan_output_directions") or [0] * outs)
        for attribute, values, count in (("scan input axes/directions", in_axes, scanned),
                                         ("scan input directions", in_dirs, scanned),
                                         ("scan output axes", out_axes, outs),
                                         ("scan output directions", out_dirs, outs)):
            if len(values) != count:
                raise self.node_error(op, f"has {len(values)} {attribute} for {count} "
                                      f"values", ModelError)
        return in_axes, in_dirs, out_axes, out_dirs


def _device(values):
    return next((v.device for v in values if isinstance(v, torch.Tensor)), None)


def _scan_slices(xs: list, in_axes: list, in_dirs: list, node: str) -> tuple:
    """(length, slices): the scan inputs' one length along their scan axes, and each
    input's slices along its axis, in reverse order where its direction is 1."""
    axes = [axis % x.dim() for axis, x in zip(in_axes, xs)]
    lengths = {x.shape[axis] for x, axis in zip(xs, axes)}
    if len(lengths) != 1:
        raise ShapeError(f"Scan node '{node}': the scan inputs have different "
                         f"lengths {sorted(lengths)} along their scan axes")
    slices = [x.unbind(axis) for x, axis in zip(xs, axes)]
    return lengths.pop(), [s[::-1] if d else s for s, d in zip(slices, in_dirs)]


def _sequence_lengths(lens, batch: int, longest: int, node: str) -> list[int]:
    """Scan-8's ``sequence_lens`` as a list, every entry the full ``longest`` when it is
    omitted; one length in [0, longest] per batch entry."""
    lengths = [longest] * batch if lens is None else [int(n) for n in lens.tolist()]
    if len(lengths) != batch or any(not 0 <= n <= longest for n in lengths):
        raise ShapeError(f"Scan node '{node}': sequence_lens {lengths} must give "
                         f"one length in [0, {longest}] per batch entry ({batch})")
    return lengths


def _stack(values: list, axis: int, info, node: str, device):
    """The per-iteration ``values`` stacked along a new ``axis``; with no iteration,
    an empty tensor of the shape the body declares for them."""
    if values:
        return torch.stack(values, axis % (values[0].dim() + 1))
    if info is None or not info.is_static or info.dtype is None:
        raise UnsupportedError(
            f"Control-flow node '{node}' ran no iteration, and its body does not declare "
            f"a static shape and element type for the scan output "
            f"{getattr(info, 'name', '')!r}: the empty result's shape is unknown. Declare "
            f"it in the body's outputs")
    shape = list(info.shape)
    shape.insert(axis % (len(shape) + 1), 0)
    dtype = torch_dtype(onnx.helper.np_dtype_to_tensor_dtype(info.dtype))
    return torch.empty(shape, dtype=dtype, device=device)


def _pad(value, length: int):
    """``value`` padded with zeros along axis 0 to ``length``."""
    missing = length - value.shape[0]
    if not missing:
        return value
    return torch.cat([value, value.new_zeros((missing, *value.shape[1:]))])


