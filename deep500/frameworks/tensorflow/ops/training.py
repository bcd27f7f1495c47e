"""TensorFlowVisitor: the training family (``deep500/frameworks/families.py``), one
optimizer step of the ai.onnx.preview.training operators (Adagrad, Momentum, Adam):
https://onnx.ai/onnx/operators/onnx_aionnxpreviewtraining_Adam.html.
"""
from __future__ import annotations

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _attr, _text
from deep500.frameworks.tensorflow.ops._values import _tf_dtype


class TrainingOps:
    """``visit_<op>`` of the training family, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def _optimizer_groups(self, op, per_tensor: int):
        """R, T and ``per_tensor`` groups of n tensors (X, G, then the states)."""
        rest = len(op.inputs) - 2
        if rest % per_tensor:
            raise self.node_error(op, f"{op.op_type} takes R, T and {per_tensor} tensors "
                                      f"per optimized tensor; it has {len(op.inputs)} inputs")
        return rest // per_tensor

    def visit_adagrad(self, op, network) -> None:
        """Adagrad (ai.onnx.preview.training, https://jmlr.org/papers/v12/duchi11a.html):
        https://onnx.ai/onnx/operators/onnx_aionnxpreviewtraining_Adagrad.html"""
        decay = float(_attr(op, "decay_factor", 0.0))
        epsilon = float(_attr(op, "epsilon", 1e-6))
        norm = float(_attr(op, "norm_coefficient", 0.0))
        n = self._optimizer_groups(op, 3)

        def adagrad(rate, step, *tensors):
            xs, gs, hs = tensors[:n], tensors[n:2 * n], tensors[2 * n:]
            r = tf.cast(rate, tf.float64) / (1 + tf.cast(step, tf.float64) * decay)
            new_x, new_h = [], []
            for x, g, h in zip(xs, gs, hs):
                g = norm * x + g
                h = h + g * g
                new_h.append(h)
                new_x.append(x - tf.cast(r, _tf_dtype(x)) * g / (tf.sqrt(h) + epsilon))
            return tuple(new_x + new_h)
        self.emit(adagrad, [self.key(n) for n in op.inputs], list(op.outputs))

    def visit_momentum(self, op, network) -> None:
        """Momentum (ai.onnx.preview.training), standard or Nesterov:
        https://onnx.ai/onnx/operators/onnx_aionnxpreviewtraining_Momentum.html"""
        alpha = float(op.attributes["alpha"])
        beta = float(op.attributes["beta"])
        norm = float(op.attributes["norm_coefficient"])
        nesterov = _text(op.attributes["mode"], "standard") == "nesterov"
        n = self._optimizer_groups(op, 3)

        def momentum(rate, step, *tensors):
            xs, gs, vs = tensors[:n], tensors[n:2 * n], tensors[2 * n:]
            first = tf.reshape(step, []) <= 0   # the first step takes the gradient whole
            new_x, new_v = [], []
            for x, g, v in zip(xs, gs, vs):
                r = tf.cast(rate, _tf_dtype(x))
                g = norm * x + g
                v = alpha * v + tf.where(first, tf.ones_like(g), beta * tf.ones_like(g)) * g
                new_v.append(v)
                new_x.append(x - r * (g + alpha * v) if nesterov else x - r * v)
            return tuple(new_x + new_v)
        self.emit(momentum, [self.key(n) for n in op.inputs], list(op.outputs))

    def visit_adam(self, op, network) -> None:
        """Adam (ai.onnx.preview.training, https://arxiv.org/abs/1412.6980):
        https://onnx.ai/onnx/operators/onnx_aionnxpreviewtraining_Adam.html"""
        alpha = float(_attr(op, "alpha", 0.9))
        beta = float(_attr(op, "beta", 0.999))
        epsilon = float(_attr(op, "epsilon", 1e-6))
        norm = float(_attr(op, "norm_coefficient", 0.0))
        norm_post = float(_attr(op, "norm_coefficient_post", 0.0))
        n = self._optimizer_groups(op, 4)

        def adam(rate, step, *tensors):
            xs, gs = tensors[:n], tensors[n:2 * n]
            vs, hs = tensors[2 * n:3 * n], tensors[3 * n:]
            t = tf.cast(tf.reshape(step, []), tf.float64)
            r = tf.reshape(tf.cast(rate, tf.float64), [])
            corrected = r * tf.sqrt(1 - beta ** t) / (1 - alpha ** t)
            r = tf.where(t > 0, corrected, r)
            new_x, new_v, new_h = [], [], []
            for x, g, v, h in zip(xs, gs, vs, hs):
                g = norm * x + g
                v = alpha * v + (1 - alpha) * g
                h = beta * h + (1 - beta) * g * g
                new_v.append(v)
                new_h.append(h)
                x = x - tf.cast(r, _tf_dtype(x)) * (v / (tf.sqrt(h) + epsilon))
                new_x.append((1 - norm_post) * x)
            return tuple(new_x + new_v + new_h)
        self.emit(adam, [self.key(n) for n in op.inputs], list(op.outputs))
