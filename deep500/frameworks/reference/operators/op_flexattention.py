"""FlexAttention (domain ai.onnx.preview): scaled dot-product attention of rank-4 Q
(B, Hq, L, E), K (B, Hkv, S, E), V (B, Hkv, S, Ev) with optional modifier bodies::

    Scores = (Q·Kᵀ)·scale;  Scores = score_mod(Scores);  P = Softmax(Scores, -1)
    P = prob_mod(P);        Y = P·V

https://onnx.ai/onnx/operators/onnx_aionnxpreview_FlexAttention.html

``scale`` defaults to 1/√E. Query head h reads key/value head h // (Hq/Hkv) (grouped
queries). Scores, softmax and the bodies run in ``softmax_precision`` (float32 unless the
inputs are double); Y is cast back to the inputs' type. A row the score_mod masks whole
(all -inf) gives NaN, as ONNX's Softmax does.

Backward: through P·V, prob_mod's body, the softmax, score_mod's body and Q·Kᵀ, with
the gradients of the outer-scope tensors the bodies read; grouped heads sum their
key/value gradients.
"""
import numpy as np

from deep500.frameworks.reference.operators._op_common_attention import (
    repeat_heads, repeat_heads_backward, softmax_backward)
from deep500.frameworks.reference.operators._op_common_body import (ControlFlowOp, add,
                                                                     read_tapes, with_tapes)
from deep500.frameworks.reference.operators._op_common_softmax import softmax
from deep500.frameworks.reference.operators.registry import register
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.cast import target_dtype


@register("FlexAttention", domain="ai.onnx.preview")
class FlexAttention(ControlFlowOp):
    defaults = {"prob_mod": None, "score_mod": None, "scale": None,
                "softmax_precision": None}
    optional_graph_attributes = ("score_mod", "prob_mod")

    def _layout(self, Q, K, V):
        """(work dtype, scale, heads per key/value head, Q, K, V in the work dtype with
        key/value heads repeated for every query head)."""
        if Q.ndim != 4 or K.ndim != 4 or V.ndim != 4 or K.shape[:3] != V.shape[:3] or \
                Q.shape[::3] != K.shape[::3] or Q.shape[1] % K.shape[1]:
            raise ShapeError(f"{self.op_type}: Q (B, Hq, L, E), K (B, Hkv, S, E), V (B, Hkv, "
                             f"S, Ev) with Hq a multiple of Hkv; got {list(Q.shape)}, "
                             f"{list(K.shape)}, {list(V.shape)}")
        precision = self.attr("softmax_precision")
        work = (target_dtype(self.op_type, precision) if precision is not None else
                np.dtype(np.float64 if Q.dtype == np.float64 else np.float32))
        scale = self.attr("scale")
        scale = 1.0 / np.sqrt(Q.shape[-1]) if scale is None else scale
        group = Q.shape[1] // K.shape[1]
        return (work, work.type(scale), group, Q.astype(work),
                repeat_heads(K.astype(work), group), repeat_heads(V.astype(work), group))

    def _modify(self, key, value, outer, tapes):
        body = self.bodies.get(key) if self.bodies else None
        if body is None:
            return value
        values = [value]
        local = {name: outer[name] for name in body.outer}
        if tapes is None:
            return np.asarray(body.run(values, local)[0], value.dtype)
        (result,), tapes[key] = body.run_taped(values, local)
        return np.asarray(result, value.dtype)

    def _attend(self, args, tapes=None):
        (Q, K, V), outer = self._inputs(args)
        work, scale, _, q, k, v = self._layout(Q, K, V)
        scores = self._modify("score_mod", (q @ k.swapaxes(-1, -2)) * scale, outer, tapes)
        with np.errstate(invalid="ignore"):   # a row masked whole is NaN, as in ONNX
            probabilities = softmax(scores, -1)
        probabilities = self._modify("prob_mod", probabilities, outer, tapes)
        if tapes is not None:
            tapes["probabilities"] = (scores, softmax(scores, -1), probabilities)
        return (probabilities @ v).astype(Q.dtype)

    def _inputs(self, args):
        if self.bodies is None:   # built without a node: no bodies, no outer names
            return list(args[:3]), {}
        return self.split(args)

    def forward(self, *args):
        return self._attend(args)

    def forward_taped(self, *args):
        tapes = {}
        return with_tapes((self._attend(args, tapes),), tapes)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (Q, K, V), outer = self._inputs(fwd_inputs)
        tapes = read_tapes(fwd_outputs, 1)
        if tapes is None:
            tapes = {}
            self._attend(fwd_inputs, tapes)
        if grads[0] is None:
            return self.input_grads(fwd_inputs, [np.zeros_like(x) for x in (Q, K, V)], {})
        work, scale, group, q, k, v = self._layout(Q, K, V)
        scores, softmaxed, probabilities = tapes["probabilities"]
        dY = np.asarray(grads[0]).astype(work)
        dV = repeat_heads_backward(probabilities.swapaxes(-1, -2) @ dY, group)
        outer_grads = {}
        d_probabilities = self._unmodify("prob_mod", dY @ v.swapaxes(-1, -2), tapes,
                                         outer_grads)
        d_scores = softmax_backward(d_probabilities, softmaxed)
        d_scores = self._unmodify("score_mod", d_scores, tapes, outer_grads) * scale
        dQ = d_scores @ k
        dK = repeat_heads_backward(d_scores.swapaxes(-1, -2) @ q, group)
        return self.input_grads(fwd_inputs, [dQ.astype(Q.dtype), dK.astype(K.dtype),
                                             dV.astype(V.dtype)], outer_grads)

    def _unmodify(self, key, gradient, tapes, outer_grads):
        """The gradient at a body's input from the one at its output; the outer-scope
        tensors it reads get theirs added to ``outer_grads``."""
        body = self.bodies.get(key) if self.bodies else None
        if body is None:
            return gradient
        body_grads = body.backward(tapes[key], [gradient])
        add(outer_grads, body_grads, body.outer)
        result = body_grads.get(body.inputs[0])
        return np.zeros_like(gradient) if result is None else np.asarray(result, gradient.dtype)
