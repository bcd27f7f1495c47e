"""The recurrent family in PyTorch: ONNX LSTM, GRU and RNN as a Python loop over time
steps of ``torch`` operations, so that autograd backpropagates through time. Directions
(forward, reverse, bidirectional), ``layout``, ``activations`` with
``activation_alpha``/``activation_beta``, ``clip``, ``sequence_lens``, peepholes,
``input_forget`` and ``linear_before_reset`` follow
https://onnx.ai/onnx/operators/onnx__LSTM.html,
https://onnx.ai/onnx/operators/onnx__GRU.html and
https://onnx.ai/onnx/operators/onnx__RNN.html.
"""
from __future__ import annotations

from deep500.frameworks.pytorch._torch_common import text
from deep500.utils.errors import require
from deep500.utils.onnx_interop.recurrent import activation_specs

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional

# name -> function of (x, alpha, beta); which alpha and beta: onnx_interop.recurrent.
ACTIVATIONS = {
    "relu": lambda x, a, b: torch.relu(x),
    "tanh": lambda x, a, b: torch.tanh(x),
    "sigmoid": lambda x, a, b: torch.sigmoid(x),
    "affine": lambda x, a, b: a * x + b,
    "leakyrelu": lambda x, a, b: F.leaky_relu(x, a),
    "thresholdedrelu": lambda x, a, b: torch.where(x > a, x, torch.zeros_like(x)),
    "scaledtanh": lambda x, a, b: a * torch.tanh(b * x),
    "hardsigmoid": lambda x, a, b: torch.clamp(a * x + b, 0.0, 1.0),
    "elu": lambda x, a, b: F.elu(x, a),
    "softsign": lambda x, a, b: F.softsign(x),
    "softplus": lambda x, a, b: F.softplus(x),
}


def _activation_functions(op_type: str, names, alphas, betas, directions: int) -> list:
    """One list of activation functions per direction, as
    ``onnx_interop.recurrent.activation_specs`` reads the node's attributes."""
    return [[lambda x, fn=ACTIVATIONS[s.key], a=s.alpha, b=s.beta: fn(x, a, b)
             for s in per]
            for per in activation_specs(op_type, names, alphas, betas, directions)]


def _reverse_index(steps: int, lengths, batch: int, device):
    """The time index that reverses each sequence within its own length (an involution:
    applying it twice restores the order); padding steps stay in place."""
    t = torch.arange(steps, device=device).unsqueeze(1).expand(steps, batch)
    if lengths is None:
        return steps - 1 - t
    lengths = lengths.to(device=device, dtype=torch.int64).unsqueeze(0)
    return torch.where(t < lengths, lengths - 1 - t, t)


def _lstm_cell(acts, clip, input_forget, R, rb, P, hidden):
    f, g, h = acts
    p_i = p_o = p_f = None
    if P is not None:
        p_i, p_o, p_f = P[:hidden], P[hidden:2 * hidden], P[2 * hidden:]

    def clipped(x):
        return x if clip is None else torch.clamp(x, -clip, clip)

    def cell(xw, state):
        h_prev, c_prev = state
        gates = xw + h_prev @ R.t()
        if rb is not None:
            gates = gates + rb
        i, o, fo, c = gates.split(hidden, -1)
        if p_i is not None:
            i = i + p_i * c_prev
            fo = fo + p_f * c_prev
        i = f(clipped(i))
        fo = 1 - i if input_forget else f(clipped(fo))
        c_new = fo * c_prev + i * g(clipped(c))
        if p_o is not None:
            o = o + p_o * c_new
        h_new = f(clipped(o)) * h(c_new)
        return h_new, (h_new, c_new)
    return cell


def _gru_cell(acts, clip, linear_before_reset, R, rb, hidden):
    f, g = acts
    r_zr, r_h = R[:2 * hidden], R[2 * hidden:]
    rb_zr = rb_h = None
    if rb is not None:
        rb_zr, rb_h = rb[:2 * hidden], rb[2 * hidden:]

    def clipped(x):
        return x if clip is None else torch.clamp(x, -clip, clip)

    def cell(xw, state):
        h_prev = state
        x_zr, x_h = xw[..., :2 * hidden], xw[..., 2 * hidden:]
        zr = x_zr + h_prev @ r_zr.t()
        if rb_zr is not None:
            zr = zr + rb_zr
        z, r = f(clipped(zr)).split(hidden, -1)
        if linear_before_reset:
            recurrent = h_prev @ r_h.t()
            if rb_h is not None:
                recurrent = recurrent + rb_h
            candidate = x_h + r * recurrent
        else:
            candidate = x_h + (r * h_prev) @ r_h.t()
            if rb_h is not None:
                candidate = candidate + rb_h
        h_new = (1 - z) * g(clipped(candidate)) + z * h_prev
        return h_new, h_new
    return cell


def _rnn_cell(acts, clip, R, rb):
    (f,) = acts

    def cell(xw, state):
        pre = xw + state @ R.t()
        if rb is not None:
            pre = pre + rb
        h_new = f(pre if clip is None else torch.clamp(pre, -clip, clip))
        return h_new, h_new
    return cell


def recurrent(op_type: str, X, W, R, B=None, sequence_lens=None, initial_h=None,
              initial_c=None, P=None, *, hidden_size, direction="forward", layout=0,
              activations=None, clip=None, input_forget=0, linear_before_reset=0):
    """(Y, Y_h[, Y_c]) of ONNX ``op_type`` (LSTM, GRU or RNN) for the given tensors."""
    if layout:
        X = X.transpose(0, 1)
        initial_h = None if initial_h is None else initial_h.transpose(0, 1)
        initial_c = None if initial_c is None else initial_c.transpose(0, 1)
    steps, batch = X.shape[0], X.shape[1]
    directions = W.shape[0]
    hidden = hidden_size or R.shape[-1]
    gate_size = W.shape[1]
    zeros = X.new_zeros((directions, batch, hidden))
    h0 = zeros if initial_h is None else initial_h
    c0 = zeros if initial_c is None else initial_c
    valid = None
    if sequence_lens is not None:
        lengths = sequence_lens.to(device=X.device, dtype=torch.int64)
        valid = (torch.arange(steps, device=X.device).unsqueeze(1) < lengths.unsqueeze(0)
                 ).unsqueeze(-1)   # (steps, batch, 1)
    else:
        lengths = None
    ys, hs, cs = [], [], []
    for d in range(directions):
        reverse = direction == "reverse" or d == 1
        acts = activations[d]
        xs = X
        if reverse:
            index = _reverse_index(steps, lengths, batch, X.device)
            xs = X[index, torch.arange(batch, device=X.device).unsqueeze(0)]
        xw = xs @ W[d].t()
        rb = None
        if B is not None:
            xw = xw + B[d, :gate_size]
            rb = B[d, gate_size:]
        if op_type == "LSTM":
            cell = _lstm_cell(acts, clip, input_forget, R[d], rb,
                              None if P is None else P[d], hidden)
            state = (h0[d], c0[d])
        elif op_type == "GRU":
            cell = _gru_cell(acts, clip, linear_before_reset, R[d], rb, hidden)
            state = h0[d]
        else:
            cell = _rnn_cell(acts, clip, R[d], rb)
            state = h0[d]
        outputs = []
        for t in range(steps):
            y, new_state = cell(xw[t], state)
            if valid is not None:
                keep = valid[t]
                if op_type == "LSTM":
                    new_state = (torch.where(keep, new_state[0], state[0]),
                                 torch.where(keep, new_state[1], state[1]))
                else:
                    new_state = torch.where(keep, new_state, state)
                y = torch.where(keep, y, torch.zeros_like(y))
            state = new_state
            outputs.append(y)
        y = torch.stack(outputs)
        if reverse:
            y = y[index, torch.arange(batch, device=X.device).unsqueeze(0)]
        ys.append(y)
        if op_type == "LSTM":
            hs.append(state[0])
            cs.append(state[1])
        else:
            hs.append(state)
    Y = torch.stack(ys, 1)           # (steps, directions, batch, hidden)
    Y_h = torch.stack(hs)            # (directions, batch, hidden)
    Y_c = torch.stack(cs) if cs else None
    if layout:
        Y = Y.permute(2, 0, 1, 3)
        Y_h = Y_h.transpose(0, 1)
        Y_c = None if Y_c is None else Y_c.transpose(0, 1)
    return (Y, Y_h, Y_c) if op_type == "LSTM" else (Y, Y_h)


class RecurrentOps:
    """``visit_<op>`` of the recurrent family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def _recurrent(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__LSTM.html,
        https://onnx.ai/onnx/operators/onnx__GRU.html,
        https://onnx.ai/onnx/operators/onnx__RNN.html"""
        a = op.attributes
        direction = text(a.get("direction"), "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise self.node_error(op, f"direction={direction!r} is not forward, reverse "
                                  f"or bidirectional")
        directions = 2 if direction == "bidirectional" else 1
        # The given list only: RNN's schema defaults to two names even for one direction.
        activations = _activation_functions(op.op_type,
                                            op.given_attributes.get("activations"),
                                            a.get("activation_alpha"),
                                            a.get("activation_beta"), directions)
        options = dict(hidden_size=a.get("hidden_size"), direction=direction,
                       layout=a.get("layout") or 0, activations=activations,
                       clip=a.get("clip"), input_forget=a.get("input_forget") or 0,
                       linear_before_reset=a.get("linear_before_reset") or 0)
        op_type = op.op_type
        self._emit_outputs(op, lambda *inputs: recurrent(op_type, *inputs, **options))

    visit_lstm = _recurrent
    visit_gru = _recurrent
    visit_rnn = _recurrent


__all__ = ["RecurrentOps"]
