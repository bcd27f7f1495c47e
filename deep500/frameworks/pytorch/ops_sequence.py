"""PyTorchVisitor methods for the attention, normalization, recurrent (LSTM, GRU, RNN)
and resampling operators of the ONNX operator set (issue 19), mixed into
:class:`deep500.frameworks.pytorch.visitor.PyTorchVisitor`: each ``visit_<op>`` uses the
visitor's own helpers and follows https://onnx.ai/onnx/operators/. Every operator is
built from differentiable ``torch`` operations, so gradients come from autograd
(recurrent operators loop over time steps: backpropagation through time). The longer
operators live beside this file: ``seq_attention`` (Attention, LinearAttention,
RotaryEmbedding), ``seq_recurrent`` (LSTM, GRU, RNN) and ``seq_resample`` (Resize and
Upsample, LpPool, Col2Im, CenterCropPad, RoiAlign, MaxUnpool, DeformConv).
"""
from __future__ import annotations

import onnx

from deep500.frameworks.pytorch._torch_common import torch_dtype
from deep500.frameworks.pytorch.seq_attention import (attention, flex_attention,
                                                     linear_attention, rotary_embedding)
from deep500.frameworks.pytorch.seq_recurrent import activation_functions, recurrent
from deep500.frameworks.pytorch.seq_resample import (ResizePlans, apply_resize,
                                                     center_crop_pad, col2im,
                                                     deform_conv, lp_pool, max_unpool,
                                                     roi_align)
from deep500.utils.errors import ShapeError, require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional

_GRID_MODES = {"linear": "bilinear", "bilinear": "bilinear", "nearest": "nearest",
               "cubic": "bicubic", "bicubic": "bicubic"}


def _stash(stash_type):
    """The dtype statistics are computed in (and Mean/InvStdDev have): ``stash_type``
    (default float), as the operators' function bodies cast X to it."""
    return torch_dtype(stash_type or 1)


def _text(value, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else value


class SequenceOps:
    """Mixin of ``visit_<op>`` methods (see the module docstring). Methods that
    the visitor class defines itself take precedence over these."""

    # -- attention and transformer blocks ----------------------------------------------
    def visit_attention(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Attention.html"""
        a = op.attributes
        precision = a.get("softmax_precision")
        options = dict(scale=a.get("scale"), is_causal=bool(a.get("is_causal")),
                       q_num_heads=a.get("q_num_heads"), kv_num_heads=a.get("kv_num_heads"),
                       softcap=a.get("softcap") or 0.0,
                       qk_matmul_output_mode=a.get("qk_matmul_output_mode") or 0,
                       softmax_dtype=None if precision is None
                       else torch_dtype(precision),
                       left_window_size=a.get("left_window_size", -1),
                       right_window_size=a.get("right_window_size", -1))
        rank = self._rank(op.inputs[0])
        if rank is not None and rank == 3 and not (options["q_num_heads"]
                                                   and options["kv_num_heads"]):
            raise self._fail(op, "3-D Q, K, V need the attributes q_num_heads and "
                                 "kv_num_heads", ShapeError)
        outputs = len(op.outputs)

        def run(*inputs):
            results = attention(*inputs, **options)
            return results[:outputs] if outputs > 1 else results[0]
        self._emit(op, run)

    def visit_flexattention(self, op, network):
        """FlexAttention (ai.onnx.preview): ``score_mod`` and ``prob_mod`` subgraphs are
        built by this visitor into modules of their own (children of the network's
        module, so they move with it); they run inside the node, differentiably."""
        a = op.attributes
        precision = a.get("softmax_precision")
        options = dict(scale=a.get("scale"),
                       softmax_dtype=None if precision is None else torch_dtype(precision))
        for name in ("score_mod", "prob_mod"):
            graph = a.get(name)
            options[name] = None if graph is None else self._subgraph(op, name, graph)
        self._emit(op, lambda Q, K, V: flex_attention(Q, K, V, **options))

    def _subgraph(self, op, name, graph):
        """A function of one tensor computing the one-input, one-output ``graph``."""
        from deep500.frameworks.pytorch.network import PyTorchNetwork   # imports us
        from deep500.utils.onnx_interop.parser import load_and_parse_model
        if len(graph.input) != 1 or len(graph.output) != 1:
            raise self._fail(op, f"the {name} subgraph must have one input and one output, "
                                 f"it has {len(graph.input)} and {len(graph.output)}",
                             ShapeError)
        proto = self.model.proto
        imports = (list(proto.opset_import) if proto is not None
                   else [onnx.helper.make_opsetid("", self.model.opset)])
        model = onnx.helper.make_model(graph, opset_imports=imports)
        model.ir_version = proto.ir_version if proto is not None else model.ir_version
        inner = PyTorchNetwork(load_and_parse_model(model, check=False)).module
        # One child per node and attribute: a rebuild replaces it rather than adding one.
        child = "subgraph_" + "".join(c if c.isalnum() else "_"
                                      for c in f"{op.name}_{name}")
        self.module.add_module(child, inner)
        source, target = graph.input[0].name, graph.output[0].name
        return lambda tensor: inner(**{source: tensor})[target]

    def visit_linearattention(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__LinearAttention.html (``chunk_size`` is a
        tuning hint without effect on the result)."""
        a = op.attributes
        options = dict(q_num_heads=a.get("q_num_heads"), kv_num_heads=a.get("kv_num_heads"),
                       scale=a.get("scale") or 0.0,
                       update_rule=_text(a.get("update_rule"), "gated_delta"))
        outputs = len(op.outputs)

        def run(*inputs):
            results = linear_attention(*inputs, **options)
            return results[:outputs] if outputs > 1 else results[0]
        self._emit(op, run)

    def visit_rotaryembedding(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__RotaryEmbedding.html"""
        a = op.attributes
        options = dict(interleaved=a.get("interleaved") or 0,
                       rotary_embedding_dim=a.get("rotary_embedding_dim") or 0,
                       num_heads=a.get("num_heads"))
        self._emit(op, lambda *inputs: rotary_embedding(*inputs, **options))

    def visit_gelu(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Gelu.html"""
        approximate = _text(op.attributes.get("approximate"), "none")
        if approximate not in ("none", "tanh"):
            raise self._fail(op, f"approximate={approximate!r} is not 'none' or 'tanh'")
        self._emit(op, lambda x: F.gelu(x, approximate=approximate))

    # -- normalization -----------------------------------------------------------------
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
            raise self._fail(op, f"p={p}: LpNormalization defines p 1 and 2 only",
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

    # -- recurrent ---------------------------------------------------------------------
    def _recurrent(self, op):
        a = op.attributes
        direction = _text(a.get("direction"), "forward")
        if direction not in ("forward", "reverse", "bidirectional"):
            raise self._fail(op, f"direction={direction!r} is not forward, reverse or "
                                 f"bidirectional")
        directions = 2 if direction == "bidirectional" else 1
        # The given list only: RNN's schema defaults to two names even for one direction.
        activations = activation_functions(op.op_type,
                                           op.given_attributes.get("activations"),
                                           a.get("activation_alpha"),
                                           a.get("activation_beta"), directions)
        options = dict(hidden_size=a.get("hidden_size"), direction=direction,
                       layout=a.get("layout") or 0, activations=activations,
                       clip=a.get("clip"), input_forget=a.get("input_forget") or 0,
                       linear_before_reset=a.get("linear_before_reset") or 0)
        outputs = len(op.outputs)
        op_type = op.op_type

        def run(*inputs):
            results = recurrent(op_type, *inputs, **options)
            return results[:outputs] if outputs > 1 else results[0]
        self._emit(op, run)

    def visit_lstm(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__LSTM.html"""
        self._recurrent(op)

    def visit_gru(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__GRU.html"""
        self._recurrent(op)

    def visit_rnn(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__RNN.html"""
        self._recurrent(op)

    # -- resampling and windows --------------------------------------------------------
    def visit_resize(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Resize.html (plans: ``seq_resample``)."""
        self._resize(op, "Resize")

    def visit_upsample(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Upsample.html: Resize's asymmetric
        nearest (rounding down) or linear upsampling by ``scales``."""
        self._resize(op, "Upsample")

    def visit_affinegrid(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__AffineGrid.html by F.affine_grid (the
        same normalised coordinates, 2-D and 3-D, align_corners)."""
        align = bool(op.attributes.get("align_corners"))
        size = self._ints(op.inputs[1])
        if size is not None:
            self._emit(op, lambda theta: F.affine_grid(theta, size, align), op.inputs[:1])
            return
        self._emit(op, lambda theta, s: F.affine_grid(theta, s.tolist(), align))

    def _resize(self, op, op_type):
        resize = ResizePlans(op.given_attributes, op_type)
        extrapolation = resize.extrapolation
        others = list(op.inputs[1:])
        if all(not n or n in self.known for n in others):
            constants = [None if not n else self._known(n).numpy() for n in others]
            self._emit(op, lambda x: apply_resize(
                x, resize.plans(x.shape, constants), extrapolation), op.inputs[:1])
            return

        def resize_dynamic(x, *inputs):
            return apply_resize(x, resize.plans(x.shape, list(inputs)), extrapolation)
        self._emit(op, resize_dynamic)

    def visit_gridsample(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__GridSample.html by F.grid_sample (same
        grid layout, normalised coordinates, padding modes and align_corners)."""
        a = op.attributes
        mode = _GRID_MODES.get(_text(a.get("mode"), "linear"))
        padding = _text(a.get("padding_mode"), "zeros")
        if mode is None or padding not in ("zeros", "border", "reflection"):
            raise self._fail(op, f"mode {a.get('mode')!r} / padding_mode {padding!r} are "
                                 f"not supported (linear, nearest, cubic / zeros, border, "
                                 f"reflection are)")
        align = bool(a.get("align_corners"))
        rank = self._rank(op.inputs[0])
        if mode == "bicubic" and rank is not None and rank != 4:
            raise self._fail(op, "cubic GridSample of a volume (5-D X) has no PyTorch "
                                 "kernel; only 4-D X can use mode 'cubic'")
        self._emit(op, lambda x, grid: F.grid_sample(x, grid.to(x.dtype), mode, padding,
                                                     align))

    def visit_roialign(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__RoiAlign.html (opset 10, which lacks
        coordinate_transformation_mode, worked as 'output_half_pixel')."""
        a = op.attributes
        mode = _text(a.get("mode"), "avg")
        coordinates = _text(a.get("coordinate_transformation_mode"), "output_half_pixel")
        if mode not in ("avg", "max") or coordinates not in ("half_pixel",
                                                             "output_half_pixel"):
            raise self._fail(op, f"mode {mode!r} / coordinate_transformation_mode "
                                 f"{coordinates!r} are not avg/max and half_pixel/"
                                 f"output_half_pixel")
        options = dict(mode=mode, output_height=int(a.get("output_height") or 1),
                       output_width=int(a.get("output_width") or 1),
                       sampling_ratio=int(a.get("sampling_ratio") or 0),
                       spatial_scale=1.0 if a.get("spatial_scale") is None
                       else float(a["spatial_scale"]),
                       half_pixel=coordinates == "half_pixel")
        self._emit(op, lambda x, rois, indices: roi_align(x, rois, indices, **options))

    def visit_maxunpool(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__MaxUnpool.html"""
        a = op.attributes
        options = dict(kernel=list(a["kernel_shape"]), strides=a.get("strides"),
                       pads=a.get("pads"))
        names = list(op.inputs) + [""]
        shape = self._ints(names[2]) if names[2] else None
        if names[2] and shape is None:
            self._emit(op, lambda x, i, s: max_unpool(x, i, s.tolist(), **options))
        else:
            self._emit(op, lambda x, i: max_unpool(x, i, shape, **options), op.inputs[:2])

    def visit_deformconv(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__DeformConv.html (2-D)."""
        a = op.attributes
        kernel = a.get("kernel_shape") or (self._shape(op.inputs[1]) or [None] * 4)[2:]
        if len(kernel) != 2 or None in kernel:
            rank = self._rank(op.inputs[1])
            if rank is not None and rank != 4:
                raise self._fail(op, f"{rank - 2}-D DeformConv is not supported (2-D is)")
            kernel = None
        options = dict(strides=a.get("strides"), pads=a.get("pads"),
                       dilations=a.get("dilations"), group=a.get("group") or 1,
                       offset_group=a.get("offset_group") or 1)

        def run(x, w, offset, b=None, mask=None):
            return deform_conv(x, w, offset, b, mask, kernel=kernel or list(w.shape[2:]),
                               **options)
        self._emit(op, run)

    def visit_lppool(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__LpPool.html"""
        a = op.attributes
        p = a.get("p")
        p = 2 if p is None else p
        kernel = list(a["kernel_shape"])
        options = dict(strides=a.get("strides"), dilations=a.get("dilations"),
                       pads=a.get("pads"), auto_pad=_text(a.get("auto_pad"), "NOTSET"),
                       ceil_mode=bool(a.get("ceil_mode")))
        self._emit(op, lambda x: lp_pool(x, p, kernel, **options))

    def visit_col2im(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Col2Im.html"""
        a = op.attributes
        options = dict(dilations=a.get("dilations"), pads=a.get("pads"),
                       strides=a.get("strides"))
        image, block = self._ints(op.inputs[1]), self._ints(op.inputs[2])
        if image is not None and block is not None:
            self._emit(op, lambda x: col2im(x, image, block, **options), op.inputs[:1])
            return
        self._emit(op, lambda x, i, b: col2im(x, i.tolist(), b.tolist(), **options))

    def visit_centercroppad(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__CenterCropPad.html"""
        axes = op.attributes.get("axes")
        shape = self._ints(op.inputs[1])
        if shape is not None:
            self._emit(op, lambda x: center_crop_pad(x, shape, axes), op.inputs[:1])
            return
        self._emit(op, lambda x, s: center_crop_pad(x, s.tolist(), axes))


__all__ = ["SequenceOps"]
