"""The normalization family in PyTorch: BatchNormalization, LayerNormalization,
RMSNormalization, GroupNormalization, InstanceNormalization, MeanVarianceNormalization,
LpNormalization and LRN (https://onnx.ai/onnx/operators/, newest opset), from
differentiable torch operations.
"""
from __future__ import annotations

from deep500.frameworks.pytorch._torch_common import torch_dtype
from deep500.utils.errors import ShapeError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional


def _stash(stash_type):
    """The dtype statistics are computed in (and Mean/InvStdDev have): ``stash_type``
    (default float), as the operators' function bodies cast X to it."""
    return torch_dtype(stash_type or 1)


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
    """``visit_<op>`` of the normalization family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

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

    def visit_layernormalization(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__LayerNormalization.html: statistics over
        the axes from ``axis`` on, in ``stash_type``; Mean and InvStdDev keep those axes
        as ones."""
        a = op.attributes
        axis, eps, stash_type = a["axis"], float(a["epsilon"]), a.get("stash_type")
        outputs = len(op.outputs)

        def layer_norm(x, scale, bias=None):
            start = axis % x.dim()
            normalized = tuple(x.shape[start:])
            compute = stash = _stash(stash_type)
            if (outputs == 1 and compute == x.dtype and tuple(scale.shape) == normalized
                    and (bias is None or tuple(bias.shape) == normalized)):
                return F.layer_norm(x, normalized, scale, bias, eps)
            dims = tuple(range(start, x.dim()))
            xs = x.to(compute)
            mean = xs.mean(dims, keepdim=True)
            centered = xs - mean
            inv_std = torch.rsqrt(centered.square().mean(dims, keepdim=True) + eps)
            y = (centered * inv_std).to(x.dtype) * scale
            if bias is not None:
                y = y + bias
            if outputs == 1:
                return y
            return (y, mean.to(stash), inv_std.to(stash))[:outputs]
        self._emit(op, layer_norm)

    def visit_rmsnormalization(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__RMSNormalization.html"""
        a = op.attributes
        axis, eps, stash_type = a["axis"], float(a["epsilon"]), a.get("stash_type")

        def rms_norm(x, scale):
            start = axis % x.dim()
            dims = tuple(range(start, x.dim()))
            compute = _stash(stash_type)
            xs = x.to(compute)
            inv_rms = torch.rsqrt(xs.square().mean(dims, keepdim=True) + eps)
            return (xs * inv_rms).to(x.dtype) * scale
        self._emit(op, rms_norm)

    def visit_groupnormalization(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__GroupNormalization.html: scale and bias
        per channel (opset 21) or, as opset 18 had them, per group."""
        a = op.attributes
        groups, eps, stash_type = a["num_groups"], float(a["epsilon"]), a.get("stash_type")

        def group_norm(x, scale, bias):
            channels = x.shape[1]
            if channels % groups:
                raise ShapeError(f"GroupNormalization: {channels} channels are not a "
                                 f"multiple of num_groups={groups}")
            if scale.shape[0] != channels:
                scale = scale.repeat_interleave(channels // groups)
                bias = bias.repeat_interleave(channels // groups)
            compute = _stash(stash_type)
            xs = x.to(compute).reshape(x.shape[0], groups, -1)
            mean = xs.mean(-1, keepdim=True)
            centered = xs - mean
            inv_std = torch.rsqrt(centered.square().mean(-1, keepdim=True) + eps)
            y = (centered * inv_std).reshape(x.shape).to(x.dtype)
            view = (1, channels) + (1,) * (x.dim() - 2)
            return y * scale.reshape(view) + bias.reshape(view)
        self._emit(op, group_norm)

    def visit_instancenormalization(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__InstanceNormalization.html"""
        eps = float(op.attributes["epsilon"])

        def instance_norm(x, scale, bias):
            dims = tuple(range(2, x.dim()))
            mean = x.mean(dims, keepdim=True)
            centered = x - mean
            inv_std = torch.rsqrt(centered.square().mean(dims, keepdim=True) + eps)
            view = (1, x.shape[1]) + (1,) * (x.dim() - 2)
            return centered * inv_std * scale.reshape(view) + bias.reshape(view)
        self._emit(op, instance_norm)

    def visit_meanvariancenormalization(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__MeanVarianceNormalization.html:
        (X - mean) / (std + 1e-9) over ``axes``, as the operator's function body."""
        axes = tuple(op.attributes.get("axes") or (0, 2, 3))

        def mvn(x):
            mean = x.mean(axes, keepdim=True)
            centered = x - mean
            std = centered.square().mean(axes, keepdim=True).sqrt()
            return centered / (std + 1e-9)
        self._emit(op, mvn)

    def visit_lpnormalization(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__LpNormalization.html (p 1 or 2); a zero
        norm gives zeros."""
        a = op.attributes
        axis, p = a["axis"], a["p"]
        if p not in (1, 2):
            raise self.node_error(op, f"p={p}: LpNormalization defines p 1 and 2 only",
                                  ShapeError)

        def lp_normalize(x):
            norm = x.abs().sum(axis, keepdim=True) if p == 1 else \
                x.square().sum(axis, keepdim=True).sqrt()
            zero = norm == 0
            y = x / torch.where(zero, torch.ones_like(norm), norm)
            return torch.where(zero, torch.zeros_like(y), y)
        self._emit(op, lp_normalize)

    def visit_lrn(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__LRN.html: the window over channels is
        [c - floor((size-1)/2), c + ceil((size-1)/2)] (PyTorch's local_response_norm
        centres even sizes the other way)."""
        a = op.attributes
        size, alpha, beta, bias = int(a["size"]), a["alpha"], a["beta"], a["bias"]
        before, after = (size - 1) // 2, size - 1 - (size - 1) // 2

        def lrn(x):
            square = (x * x).reshape(x.shape[0], 1, x.shape[1], -1)
            square = F.pad(square, (0, 0, before, after))
            total = F.avg_pool2d(square, (size, 1), 1) * size
            return x / (bias + alpha / size * total.reshape(x.shape)) ** beta
        self._emit(op, lrn)


__all__ = ["NormalizationOps"]
