"""TensorFlowVisitor: the recurrent family (``deep500/frameworks/families.py``), RNN,
GRU and LSTM: https://onnx.ai/onnx/operators/onnx__LSTM.html. The time loop is unrolled
with TensorFlow operations, so that GradientTape backpropagates through time; directions
and activations follow ``deep500.utils.onnx_interop.recurrent``.
"""
from __future__ import annotations

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _text
from deep500.frameworks.tensorflow.ops._values import _like
from deep500.utils.errors import Deep500Error, ShapeError
from deep500.utils.onnx_interop.recurrent import DIRECTIONS, activation_specs


def _tf_activation(name: str, alpha, beta):
    """The TensorFlow form of a recurrent cell's activation function (ONNX's list in
    https://onnx.ai/onnx/operators/onnx__LSTM.html)."""
    name = name.lower()
    if name == "relu":
        return tf.nn.relu
    if name == "tanh":
        return tf.tanh
    if name == "sigmoid":
        return tf.sigmoid
    if name == "affine":
        return lambda x: alpha * x + beta
    if name == "leakyrelu":
        return lambda x: tf.where(x >= 0, x, alpha * x)
    if name == "thresholdedrelu":
        return lambda x: tf.where(x > alpha, x, tf.zeros_like(x))
    if name == "scaledtanh":
        return lambda x: alpha * tf.tanh(beta * x)
    if name == "hardsigmoid":
        return lambda x: tf.clip_by_value(alpha * x + beta, 0, 1)
    if name == "elu":
        return lambda x: tf.where(x >= 0, x, alpha * tf.math.expm1(tf.minimum(x, 0)))
    if name == "softsign":
        return tf.nn.softsign
    if name == "softplus":
        return tf.math.softplus
    raise AssertionError(name)   # parse_activations has rejected other names


def _time_reversed(x, lengths):
    """Time-major ``x`` (sequence, batch, ...) reversed in time; with ``lengths``, each
    batch entry's first lengths[b] steps only."""
    return (tf.reverse(x, [0]) if lengths is None else
            tf.reverse_sequence(x, lengths, seq_axis=0, batch_axis=1))


def _initial(state, d: int, shape: list, x):
    """Direction ``d``'s initial hidden or cell state in ``x``'s dtype: ``state[d]`` (the
    node's initial_h or initial_c), or zeros of ``shape`` when it is omitted."""
    return tf.zeros(shape, x.dtype) if state is None else _like(state[d], x)


def _unrolled(step, xa, h, c, mask, steps: int) -> tuple:
    """One direction's time loop, ``step(xa[t], h, c) -> (h, c)`` for each of the
    ``steps`` steps of the input projection ``xa``: (Y (sequence, batch, hidden), last h,
    last c). Where ``mask`` (sequence, batch) is False, past a sequence's length, its
    state is kept and its output is zeros."""
    outputs = []
    for t in range(steps):
        h_new, c_new = step(xa[t], h, c)
        if mask is None:
            h, c = h_new, c_new
            outputs.append(h_new)
        else:
            m = mask[t][:, tf.newaxis]
            h, c = tf.where(m, h_new, h), tf.where(m, c_new, c)
            outputs.append(tf.where(m, h_new, tf.zeros_like(h_new)))
    return tf.stack(outputs), h, c


class RecurrentOps:
    """``visit_<op>`` of the recurrent family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def _recurrent(self, op, gates: int, defaults: tuple, cell) -> None:
        """RNN, GRU and LSTM: https://onnx.ai/onnx/operators/onnx__RNN.html, .../onnx__GRU.html,
        .../onnx__LSTM.html. The time loop is unrolled with TensorFlow operations, so
        GradientTape backpropagates through time. ``cell(xa, h, c, R, Rb, P, fns)``
        returns (h, c) from the step's X-projection ``xa`` (with W's bias)."""
        a = op.attributes
        direction, layout, clip = self._recurrent_attributes(op)
        nd = 2 if direction == "bidirectional" else 1
        activations = activation_specs(op.op_type, a.get("activations"),
                                       a.get("activation_alpha"), a.get("activation_beta"),
                                       nd, defaults)
        fns = [[_tf_activation(f.name, f.alpha, f.beta) for f in per] for per in activations]
        n_out = len(op.outputs)
        hidden_attr = a.get("hidden_size")

        def clipped(v):
            return v if clip is None else tf.clip_by_value(v, -clip, clip)

        def run(x, w, r, b=None, lengths=None, h0=None, c0=None, p=None):
            if len(x.shape) != 3:
                raise self.node_error(op, f"X must be 3-D, got shape {x.shape}", ShapeError)
            if layout == 1:
                x, h0, c0 = (None if v is None else tf.transpose(v, [1, 0, 2])
                             for v in (x, h0, c0))
            seq, batch = x.shape[0], x.shape[1]
            hidden = r.shape[2] if hidden_attr is None else int(hidden_attr)
            if tuple(w.shape) != (nd, gates * hidden, x.shape[2]) or tuple(r.shape) != (
                    nd, gates * hidden, hidden):
                raise self.node_error(op, f"W {list(w.shape)} and R {list(r.shape)} must be "
                                      f"[{nd}, {gates}*{hidden}, {x.shape[2]}] and "
                                      f"[{nd}, {gates}*{hidden}, {hidden}]", ShapeError)
            mask = None
            if lengths is not None:
                lengths = tf.cast(lengths, tf.int64)
                mask = tf.range(seq, dtype=tf.int64)[:, tf.newaxis] < lengths[tf.newaxis, :]
            ys, hs, cs = [], [], []
            for d in range(nd):
                backward = direction == "reverse" or d == 1
                xa = tf.tensordot(_time_reversed(x, lengths) if backward else x,
                                  _like(w[d], x), [[2], [1]])
                rb = None
                if b is not None:
                    xa = xa + _like(b[d, :gates * hidden], x)
                    rb = _like(b[d, gates * hidden:], x)
                pd = None if p is None else _like(p[d], x)

                def step(xt, h, c, d=d, rb=rb, pd=pd):
                    return cell(xt, h, c, _like(r[d], x), rb, pd, fns[d], clipped)
                y, h, c = _unrolled(step, xa, _initial(h0, d, [batch, hidden], x),
                                    _initial(c0, d, [batch, hidden], x), mask, seq)
                ys.append(_time_reversed(y, lengths) if backward else y)
                hs.append(h)
                cs.append(c)
            results = [tf.stack(ys, 1), tf.stack(hs), tf.stack(cs)]
            if layout == 1:
                results = [tf.transpose(results[0], [2, 0, 1, 3])] + [
                    tf.transpose(v, [1, 0, 2]) for v in results[1:]]
            return results[0] if n_out == 1 else tuple(results[:n_out])
        self._emit_node(op, run)

    def _recurrent_attributes(self, op) -> tuple:
        """(direction, layout, clip) of an RNN, GRU or LSTM node, checked: clip is None
        or positive."""
        a = op.attributes
        direction = _text(a.get("direction"), "forward")
        if direction not in DIRECTIONS:
            raise self.node_error(op, f"direction={direction!r} is not one of {DIRECTIONS}",
                                  Deep500Error)
        layout = int(a.get("layout") or 0)
        if layout not in (0, 1):
            raise self.node_error(op, f"layout={layout} must be 0 (sequence first) or 1 (batch "
                                  f"first)", Deep500Error)
        clip = a.get("clip")
        if clip is not None and clip <= 0:
            raise self.node_error(op, f"clip={clip} must be positive", Deep500Error)
        return direction, layout, clip

    def visit_rnn(self, op, network) -> None:
        """RNN: Ht = f(Xt·Wᵀ + Ht-1·Rᵀ + Wb + Rb)."""
        def cell(xa, h, c, r, rb, p, fns, clipped):
            a = xa + tf.linalg.matmul(h, r, transpose_b=True)
            if rb is not None:
                a = a + rb
            return fns[0](clipped(a)), c
        self._recurrent(op, 1, ("Tanh",), cell)

    def visit_gru(self, op, network) -> None:
        """GRU (gates z, r, h; linear_before_reset applies r after Rh)."""
        linear_before_reset = bool(op.attributes.get("linear_before_reset") or 0)

        def cell(xa, h, c, r, rb, p, fns, clipped):
            f, g = fns
            xz, xr, xh = tf.split(xa, 3, axis=-1)
            rz, rr, rh = tf.split(r, 3, axis=0)
            bz, br, bh = (None, None, None) if rb is None else tf.split(rb, 3)

            def plus(v, bias):
                return v if bias is None else v + bias
            z = f(clipped(xz + plus(tf.linalg.matmul(h, rz, transpose_b=True), bz)))
            reset = f(clipped(xr + plus(tf.linalg.matmul(h, rr, transpose_b=True), br)))
            if linear_before_reset:
                candidate = xh + reset * plus(tf.linalg.matmul(h, rh, transpose_b=True), bh)
            else:
                candidate = xh + plus(tf.linalg.matmul(reset * h, rh, transpose_b=True), bh)
            hh = g(clipped(candidate))
            return (1 - z) * hh + z * h, c
        self._recurrent(op, 3, ("Sigmoid", "Tanh"), cell)

    def visit_lstm(self, op, network) -> None:
        """LSTM (gates i, o, f, c; peepholes P for i, o, f; input_forget couples f to
        1 - i)."""
        input_forget = bool(op.attributes.get("input_forget") or 0)
        if len(op.outputs) > 3:
            raise self.node_error(op, "LSTM has at most 3 outputs", Deep500Error)

        def cell(xa, h, c, r, rb, p, fns, clipped):
            f, g, hf = fns
            a = xa + tf.linalg.matmul(h, r, transpose_b=True)
            if rb is not None:
                a = a + rb
            ai, ao, af, ac = tf.split(a, 4, axis=-1)
            pi, po, pf = (None, None, None) if p is None else tf.split(p, 3)
            i = f(clipped(ai if pi is None else ai + pi * c))
            forget = 1 - i if input_forget else f(clipped(af if pf is None else af + pf * c))
            c_new = forget * c + i * g(clipped(ac))
            o = f(clipped(ao if po is None else ao + po * c_new))
            return o * hf(c_new), c_new
        self._recurrent(op, 4, ("Sigmoid", "Tanh", "Tanh"), cell)
