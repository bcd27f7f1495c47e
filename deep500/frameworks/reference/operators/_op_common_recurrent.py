"""What the recurrent operators (RNN, GRU, LSTM) share: the activation functions and their
derivatives, input checks, layouts, directions, sequence lengths, and the time loop
with its backpropagation through time. Each operator only writes its cell: one time
step forward, and that step's vector-Jacobian product.
https://onnx.ai/onnx/operators/onnx__LSTM.html, https://onnx.ai/onnx/operators/onnx__GRU.html,
https://onnx.ai/onnx/operators/onnx__RNN.html
"""
from __future__ import annotations

import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp
from deep500.utils.errors import ShapeError, UnsupportedError
from deep500.utils.onnx_interop.recurrent import DIRECTIONS, activation_specs  # noqa: F401


def _sigmoid(x):
    # exp of a non-positive argument only: no overflow warnings for large |x|.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


# name (lower case) -> (default alpha, default beta, f(x, a, b), f'(x, y, a, b)); None
# for an alpha or beta the function does not take. Defaults are those of the ONNX
# operators of the same name (the spec's rule for activation_alpha/beta).
_ACTIVATIONS = {
    "relu": (None, None, lambda x, a, b: np.maximum(x, 0),
             lambda x, y, a, b: (x > 0).astype(x.dtype)),
    "tanh": (None, None, lambda x, a, b: np.tanh(x), lambda x, y, a, b: 1 - y * y),
    "sigmoid": (None, None, lambda x, a, b: _sigmoid(x), lambda x, y, a, b: y * (1 - y)),
    "affine": (1.0, 0.0, lambda x, a, b: a * x + b,
               lambda x, y, a, b: np.full_like(x, a)),
    "leakyrelu": (0.01, None, lambda x, a, b: np.where(x >= 0, x, a * x),
                  lambda x, y, a, b: np.where(x >= 0, 1, a).astype(x.dtype)),
    "thresholdedrelu": (1.0, None, lambda x, a, b: np.where(x > a, x, 0).astype(x.dtype),
                        lambda x, y, a, b: (x > a).astype(x.dtype)),
    "scaledtanh": (1.0, 1.0, lambda x, a, b: a * np.tanh(b * x),
                   lambda x, y, a, b: a * b * (1 - np.tanh(b * x) ** 2)),
    "hardsigmoid": (0.2, 0.5, lambda x, a, b: np.clip(a * x + b, 0, 1),
                    lambda x, y, a, b: np.where((a * x + b > 0) & (a * x + b < 1), a,
                                                0).astype(x.dtype)),
    "elu": (1.0, None, lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))),
            lambda x, y, a, b: np.where(x >= 0, 1, a * np.exp(np.minimum(x, 0))).astype(
                x.dtype)),
    "softsign": (None, None, lambda x, a, b: x / (1 + np.abs(x)),
                 lambda x, y, a, b: 1 / (1 + np.abs(x)) ** 2),
    "softplus": (None, None, lambda x, a, b: np.logaddexp(0, x),
                 lambda x, y, a, b: _sigmoid(x)),
}


class Activation:
    """One activation function of a recurrent cell with its alpha and beta."""

    def __init__(self, name: str, alpha=None, beta=None):
        self.name = name
        default_alpha, default_beta, self._f, self._df = _ACTIVATIONS[name.lower()]
        self.alpha = default_alpha if alpha is None else alpha
        self.beta = default_beta if beta is None else beta

    def __call__(self, x):
        return np.asarray(self._f(x, self.alpha, self.beta), dtype=x.dtype)

    def derivative(self, x, y):
        """dy/dx at x, where y = self(x)."""
        return np.asarray(self._df(x, y, self.alpha, self.beta), dtype=x.dtype)


def parse_activations(op_type: str, names, alphas, betas, defaults: tuple,
                      num_directions: int) -> list[list[Activation]]:
    """Per direction, the activations of attribute ``activations`` (``defaults`` per
    direction when absent), as ``onnx_interop.recurrent.activation_specs`` reads them."""
    return [[Activation(s.name, s.alpha, s.beta) for s in per] for per in
            activation_specs(op_type, names, alphas, betas, num_directions, defaults)]


def clip_mask(a, clip):
    """(clipped pre-activation, derivative of the clip: 1 inside [-clip, clip], else 0)."""
    if clip is None:
        return a, None
    return np.clip(a, -clip, clip), (np.abs(a) <= clip).astype(a.dtype)


def through_clip(da, mask):
    return da if mask is None else da * mask


class RecurrentCell:
    """What the RNN and LSTM cells share: the recurrent pre-activation of all gates,
    a = xa + h·Rᵀ (+ Rb), and, from its gradient da, the gradients of R, Rb (summed over
    the steps in ``dR``, ``dRb``) and of h."""

    def __init__(self, R, Rb):
        self.R, self.Rb = R, Rb
        self.dR = np.zeros_like(R)
        self.dRb = np.zeros(R.shape[0], R.dtype)

    def preactivation(self, xa, h):
        a = xa + h @ self.R.T
        if self.Rb is not None:
            a += self.Rb
        return a

    def preactivation_back(self, da, h):
        """(da, dh through R); adds this step's dR and dRb."""
        self.dR += da.T @ h
        self.dRb += da.sum(axis=0)
        return da, da @ self.R


class RecurrentOp(ReferenceOp):
    """The plumbing of RNN, GRU and LSTM. A subclass sets ``gates`` (how many blocks of
    hidden_size rows W and R have), ``default_activations`` (one direction's list),
    ``has_cell`` (LSTM's cell state), and ``make_cell(W, R, Rb, P, activations)``
    returning an object with ``step(xa, h, c)`` -> (h, c, cache) and ``step_back(dh,
    dc, cache)`` -> (d pre-activation of the X part, dh_prev, dc_prev), which
    accumulates its own dR, dRb (and dP) over the steps."""
    gates = 1
    has_cell = False
    default_activations: tuple = ()
    common_defaults = {"activation_alpha": None, "activation_beta": None,
                       "activations": None, "clip": None, "direction": "forward",
                       "hidden_size": None, "layout": 0, "output_sequence": 0}

    # -- checks and layout -----------------------------------------------------------
    def _setup(self, X, W, R, B, sequence_lens, initial_h, initial_c, P):
        name = self.op_type
        direction = self.attr("direction")
        direction = direction.decode() if isinstance(direction, bytes) else direction
        if direction not in DIRECTIONS:
            raise UnsupportedError(f"{name}: direction={direction!r} is not one of "
                                   f"{DIRECTIONS}")
        layout = int(self.attr("layout"))
        if layout not in (0, 1):
            raise UnsupportedError(f"{name}: layout={layout} must be 0 (sequence first) or "
                                   f"1 (batch first)")
        X = np.asarray(X)
        if X.ndim != 3:
            raise ShapeError(f"{name}: X must be 3-D ([seq_length, batch_size, input_size] "
                             f"with layout 0, batch first with layout 1), got shape {X.shape}")
        if not np.issubdtype(X.dtype, np.floating):
            raise ShapeError(f"{name}: X must be a floating-point tensor, got {X.dtype}")
        if layout == 1:
            X = X.swapaxes(0, 1)
        seq, batch, input_size = X.shape
        nd = 2 if direction == "bidirectional" else 1
        G = self.gates
        if R is None or np.ndim(R) != 3:
            raise ShapeError(f"{name}: R must be 3-D [num_directions, {G}*hidden_size, "
                             f"hidden_size], got shape {np.shape(R)}")
        hidden = self.attr("hidden_size")
        hidden = R.shape[2] if hidden is None else int(hidden)
        expected = {"W": (nd, G * hidden, input_size), "R": (nd, G * hidden, hidden),
                    "B": (nd, 2 * G * hidden), "P": (nd, 3 * hidden)}
        for key, value in (("W", W), ("R", R), ("B", B), ("P", P)):
            if value is None:
                continue
            if np.shape(value) != expected[key]:
                raise ShapeError(f"{name}: {key} must have shape {list(expected[key])} "
                                 f"(direction={direction}, hidden_size={hidden}, "
                                 f"input_size={input_size}), got {list(np.shape(value))}")
            if value.dtype != X.dtype:
                raise ShapeError(f"{name}: {key} has dtype {value.dtype}, X has {X.dtype}; "
                                 f"they must match")
        states = []
        for key, value in (("initial_h", initial_h), ("initial_c", initial_c)):
            if value is None:
                states.append(np.zeros((nd, batch, hidden), X.dtype))
                continue
            given = np.asarray(value)
            value = given.swapaxes(0, 1) if layout == 1 and given.ndim == 3 else given
            if value.shape != (nd, batch, hidden):
                shape = [nd, batch, hidden] if layout == 0 else [batch, nd, hidden]
                raise ShapeError(f"{name}: {key} must have shape {shape} (layout={layout}), "
                                 f"got {list(given.shape)}")
            if value.dtype != X.dtype:
                raise ShapeError(f"{name}: {key} has dtype {value.dtype}, X has {X.dtype}")
            states.append(value)
        lengths = None
        if sequence_lens is not None:
            lengths = np.asarray(sequence_lens)
            if lengths.shape != (batch,) or not np.issubdtype(lengths.dtype, np.integer):
                raise ShapeError(f"{name}: sequence_lens must be an integer tensor of shape "
                                 f"[{batch}], got {lengths.dtype} {list(lengths.shape)}")
            if lengths.size and (lengths.min() < 1 or lengths.max() > seq):
                raise ShapeError(f"{name}: sequence_lens {lengths.tolist()} must lie in "
                                 f"[1, seq_length={seq}]")
            if np.all(lengths == seq):
                lengths = None
        clip = self.attr("clip")
        if clip is not None and clip <= 0:
            raise ShapeError(f"{name}: clip={clip} must be positive")
        activations = parse_activations(name, self.attr("activations"),
                                        self.attr("activation_alpha"),
                                        self.attr("activation_beta"),
                                        self.default_activations, nd)
        reversed_ = [direction == "reverse" or d == 1 for d in range(nd)]
        return dict(X=X, W=W, R=R, B=B, P=P, h0=states[0], c0=states[1], lengths=lengths,
                    hidden=hidden, nd=nd, layout=layout, activations=activations,
                    reversed=reversed_)

    def _setup_from(self, inputs):
        inputs = list(inputs) + [None] * (8 - len(inputs))
        if inputs[1] is None or inputs[2] is None:
            raise ShapeError(f"{self.op_type}: inputs X, W and R are required")
        return self._setup(*inputs[:8])

    @staticmethod
    def _reverse_index(lengths, seq, batch):
        """Index (seq, batch) that reverses each sequence within its length (an
        involution: applying it twice restores the order)."""
        t = np.arange(seq)[:, None]
        if lengths is None:
            return np.broadcast_to(seq - 1 - t, (seq, batch))
        return np.where(t < lengths[None, :], lengths[None, :] - 1 - t, t)

    @staticmethod
    def _permute(A, index):
        return np.take_along_axis(A, index.reshape(index.shape + (1,) * (A.ndim - 2)),
                                  axis=0)

    # -- forward -------------------------------------------------------------------
    def _run(self, setup, keep: bool):
        X, W, R, B, P = setup["X"], setup["W"], setup["R"], setup["B"], setup["P"]
        seq, batch, _ = X.shape
        H, G = setup["hidden"], self.gates
        lengths = setup["lengths"]
        mask = None if lengths is None else np.arange(seq)[:, None] < lengths[None, :]
        rindex = self._reverse_index(lengths, seq, batch)
        Ys, hs, cs, runs = [], [], [], []
        for d in range(setup["nd"]):
            Xd = self._permute(X, rindex) if setup["reversed"][d] else X
            Wb = B[d, :G * H] if B is not None else None
            Rb = B[d, G * H:] if B is not None else None
            xa = (Xd.reshape(-1, Xd.shape[2]) @ W[d].T).reshape(seq, batch, G * H)
            if Wb is not None:
                xa += Wb
            cell = self.make_cell(W[d], R[d], Rb, None if P is None else P[d],
                                  setup["activations"][d])
            h = setup["h0"][d]
            c = setup["c0"][d] if self.has_cell else None
            Y = np.empty((seq, batch, H), X.dtype)
            caches = []
            for t in range(seq):
                h_new, c_new, cache = cell.step(xa[t], h, c)
                if mask is None:
                    h, c = h_new, c_new
                    Y[t] = h_new
                else:
                    m = mask[t][:, None]
                    h = np.where(m, h_new, h)
                    c = np.where(m, c_new, c) if c is not None else None
                    Y[t] = np.where(m, h_new, 0)
                if keep:
                    caches.append(cache)
            if setup["reversed"][d]:
                Y = self._permute(Y, rindex)
            Ys.append(Y)
            hs.append(h)
            cs.append(c)
            runs.append((cell, caches, Xd))
        Y = np.stack(Ys, axis=1)              # (seq, nd, batch, H)
        Y_h = np.stack(hs)                    # (nd, batch, H)
        outputs = [Y, Y_h]
        if self.has_cell:
            outputs.append(np.stack(cs))
        if setup["layout"] == 1:
            outputs = [np.ascontiguousarray(Y.transpose(2, 0, 1, 3))] + [
                np.ascontiguousarray(o.swapaxes(0, 1)) for o in outputs[1:]]
        return outputs, runs, mask, rindex

    def forward(self, *inputs):
        outputs, _, _, _ = self._run(self._setup_from(inputs), keep=False)
        return tuple(outputs)

    # -- backward (backpropagation through time) ------------------------------------
    def backward(self, grads, fwd_inputs, fwd_outputs):
        setup = self._setup_from(fwd_inputs)
        X, W, B = setup["X"], setup["W"], setup["B"]
        _, runs, mask, rindex = self._run(setup, keep=True)
        seq, batch, input_size = X.shape
        H, G, nd = setup["hidden"], self.gates, setup["nd"]
        grads = list(grads) + [None] * (3 - len(grads))
        dY, dY_h, dY_c = grads[0], grads[1], grads[2] if self.has_cell else None
        if setup["layout"] == 1:
            dY = None if dY is None else dY.transpose(1, 2, 0, 3)
            dY_h = None if dY_h is None else dY_h.swapaxes(0, 1)
            dY_c = None if dY_c is None else dY_c.swapaxes(0, 1)
        dtype = X.dtype
        dX = np.zeros_like(X)
        dW = np.zeros_like(W)
        dR = np.zeros_like(setup["R"])
        dB = np.zeros((nd, 2 * G * H), dtype)
        dP = np.zeros((nd, 3 * H), dtype)
        dh0 = np.zeros((nd, batch, H), dtype)
        dc0 = np.zeros((nd, batch, H), dtype)
        for d, (cell, caches, Xd) in enumerate(runs):
            dYd = np.zeros((seq, batch, H), dtype) if dY is None else dY[:, d]
            if setup["reversed"][d]:
                dYd = self._permute(dYd, rindex)
            dh = np.zeros((batch, H), dtype) if dY_h is None else np.array(dY_h[d])
            dc = None
            if self.has_cell:
                dc = np.zeros((batch, H), dtype) if dY_c is None else np.array(dY_c[d])
            dxa = np.empty((seq, batch, G * H), dtype)
            for t in range(seq - 1, -1, -1):
                if mask is None:
                    dxa[t], dh, dc = cell.step_back(dh + dYd[t], dc, caches[t])
                    continue
                m = mask[t][:, None]
                total = dh + np.where(m, dYd[t], 0)
                dc_in = None if dc is None else np.where(m, dc, 0)
                dxa[t], dh_prev, dc_prev = cell.step_back(np.where(m, total, 0), dc_in,
                                                          caches[t])
                dh = dh_prev + np.where(m, 0, total)
                dc = None if dc is None else dc_prev + np.where(m, 0, dc)
            flat = dxa.reshape(-1, G * H)
            dXd = (flat @ W[d]).reshape(seq, batch, input_size)
            dX += self._permute(dXd, rindex) if setup["reversed"][d] else dXd
            dW[d] = flat.T @ Xd.reshape(-1, input_size)
            dB[d, :G * H] = flat.sum(axis=0)
            dB[d, G * H:] = cell.dRb
            dR[d] = cell.dR
            if setup["P"] is not None:
                dP[d] = cell.dP
            dh0[d] = dh
            if dc is not None:
                dc0[d] = dc
        if setup["layout"] == 1:
            dX = np.ascontiguousarray(dX.swapaxes(0, 1))
            dh0, dc0 = dh0.swapaxes(0, 1), dc0.swapaxes(0, 1)
        given = list(fwd_inputs) + [None] * (8 - len(fwd_inputs))
        result = [dX, dW, dR, dB if B is not None else None, None,
                  np.ascontiguousarray(dh0) if given[5] is not None else None,
                  np.ascontiguousarray(dc0) if given[6] is not None else None,
                  dP if given[7] is not None else None]
        return result[:len(fwd_inputs)]
