"""PyTorchVisitor: BatchNormalization, Dropout, Softmax and LogSoftmax.
https://onnx.ai/onnx/operators/onnx__BatchNormalization.html
"""
from __future__ import annotations

from deep500.utils.errors import require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")

class _BatchNormInference(torch.autograd.Function):
    """ONNX BatchNormalization in inference mode with gradients for every input,
    including the statistics (PyTorch's kernel treats them as constants):
    Y = (X - mean)·scale/sqrt(var + eps) + B, so dmean = -dB·scale·inv_std and
    dvar = -dscale·scale·inv_std²/2."""

    @staticmethod

    def forward(ctx, x, scale, bias, mean, var, eps):
        ctx.save_for_backward(x, scale, mean, var)
        ctx.eps = eps
        return torch.batch_norm(x, scale, bias, mean, var, False, 0.0, eps, True)

    @staticmethod

    def backward(ctx, dy):
        x, scale, mean, var = ctx.saved_tensors
        dx, dscale, dbias = torch.ops.aten.native_batch_norm_backward(
            dy, x, scale, mean, var, None, None, False, ctx.eps, [True, True, True])
        d_mean = d_var = None
        if ctx.needs_input_grad[3] or ctx.needs_input_grad[4]:
            inv_std = torch.rsqrt(var + ctx.eps)
            d_mean = -dbias * scale * inv_std
            d_var = dscale * scale * inv_std * inv_std * -0.5
        return dx, dscale, dbias, d_mean, d_var, None


class NormalizationOps:
    """``visit_<op>`` of normalisation and regularisation, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use
    (``_emit``, ``_known``, ``_ints``, ``_shape``, ``_rank``, ``_dtype``, ``_fail``)."""

    def visit_batchnormalization(self, op, network):
        a = op.attributes
        eps, momentum = float(a["epsilon"]), float(a["momentum"])
        training = bool(a["training_mode"])
        if not training:
            if all(n in self.known for n in op.inputs[3:5]):
                # Running statistics stored in the model are constants: PyTorch's kernel.
                self._emit(op, lambda x, scale, bias, mean, var: torch.batch_norm(
                    x, scale, bias, mean, var, False, 0.0, eps, True))
                return

            def batch_norm(x, scale, bias, mean, var):
                if torch.is_grad_enabled() and (mean.requires_grad or var.requires_grad):
                    return _BatchNormInference.apply(x, scale, bias, mean, var, eps)
                return torch.batch_norm(x, scale, bias, mean, var, False, 0.0, eps, True)
            self._emit(op, batch_norm)
            return
        outputs = len(op.outputs)

        def batch_norm_training(x, scale, bias, mean, var):
            axes = [0] + list(range(2, x.dim()))
            batch_var, batch_mean = torch.var_mean(x, axes, correction=0)
            y = torch.batch_norm(x, scale, bias, None, None, True, 0.0, eps, True)
            running_mean = mean * momentum + batch_mean * (1 - momentum)
            running_var = var * momentum + batch_var * (1 - momentum)
            results = (y, running_mean, running_var, batch_mean, batch_var)[:outputs]
            return results if outputs > 1 else y
        self._emit(op, batch_norm_training)

    def visit_dropout(self, op, network):
        outputs = len(op.outputs)
        names = list(op.inputs) + ["", ""]
        ratio_name, mode_name = names[1], names[2]
        if mode_name and mode_name not in self.known:
            raise self._fail(op, "training_mode must be a constant (an initializer or "
                                 "a Constant node)")
        training = bool(self._scalar(mode_name)) if mode_name else False
        ratio = self._scalar(ratio_name) if ratio_name else 0.5
        if training and ratio is None:
            raise self._fail(op, "in training mode, ratio must be a constant")

        def dropout(x, *_):
            if training and ratio > 0:
                mask = torch.rand_like(x, dtype=torch.float32) >= ratio
                y = x * mask / (1.0 - ratio)
            else:
                y, mask = x, None
            if outputs == 1:
                return y
            return y, torch.ones_like(x, dtype=torch.bool) if mask is None else mask
        self._emit(op, dropout, op.inputs[:1])

    def _softmax(self, op, fn):
        axis = op.attributes["axis"]
        self._emit(op, lambda x: fn(x, axis))

    def visit_softmax(self, op, network):
        self._softmax(op, torch.softmax)

    def visit_logsoftmax(self, op, network):
        self._softmax(op, torch.log_softmax)
