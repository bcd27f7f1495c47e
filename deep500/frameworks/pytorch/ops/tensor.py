"""The tensor family in PyTorch: creating tensors (Constant, ConstantOfShape, EyeLike,
Range), passing them on (Identity) and changing their element type (Cast, CastLike,
BitCast) by ONNX's Cast rules (``_cast``). https://onnx.ai/onnx/operators/onnx__Cast.html
"""
from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper

from deep500.frameworks.pytorch._torch_common import as_tensor, torch_dtype
from deep500.frameworks.pytorch.extension_dtypes import carried_type, is_carried
from deep500.frameworks.pytorch.ops._cast import cast, cast_to_carried, cast_to_e8m0
from deep500.utils.errors import ShapeError, UnsupportedError, require
from deep500.utils.onnx_interop.cast import is_string

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")


class TensorOps:
    """``visit_<op>`` of the tensor family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    def visit_identity(self, op, network):
        self._emit(op, lambda x: x)

    def visit_cast(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__Cast.html: 8-bit floats saturate (or
        not) as ONNX says, FLOAT8E8M0 rounds by ``round_mode``, int4/uint4/int2/uint2 and
        float4 are made in their carriers (``_cast``)."""
        carried = carried_type(op.attributes["to"])
        if carried is not None:
            self._emit(op, lambda x: cast_to_carried(x, carried))
            return
        dtype = torch_dtype(op.attributes["to"])
        saturate = bool(op.attributes.get("saturate", 1))
        if dtype == getattr(torch, "float8_e8m0fnu", None):
            self._emit(op, cast_to_e8m0(saturate, op.attributes.get("round_mode") or "up"))
            return
        self._emit(op, lambda x: cast(x, dtype, saturate))

    def visit_castlike(self, op, network):
        """Cast to the element type of the second input.
        https://onnx.ai/onnx/operators/onnx__CastLike.html"""
        saturate = bool(op.attributes.get("saturate", 1))
        carried = self._element_type(op.inputs[1])
        if is_carried(carried):
            self._emit(op, lambda x: cast_to_carried(x, carried), op.inputs[:1])
            return
        try:
            target = self._dtype(op.inputs[1])
        except UnsupportedError as error:
            raise self.node_error(op, f"the target type has no PyTorch tensor type "
                                  f"({error}); run this model on the reference "
                                  f"executor, which implements it") from None
        if target is not None:
            self._emit(op, lambda x: cast(x, target, saturate), op.inputs[:1])
        else:
            self._emit(op, lambda x, like: cast(x, like.dtype, saturate))

    def visit_bitcast(self, op, network):
        """The same bits read as type ``to`` (of the same width), shape unchanged.
        https://onnx.ai/onnx/operators/onnx__BitCast.html"""
        target = torch_dtype(op.attributes["to"])

        def bit_cast(x):
            if x.element_size() != torch.empty((), dtype=target).element_size():
                raise ShapeError(f"BitCast: {x.dtype} and {target} differ in width; "
                                 f"BitCast needs types of the same number of bits")
            return x.view(target)
        self._emit(op, bit_cast)

    def visit_constant(self, op, network):
        # The parser made value_float(s)/value_int(s) a ``value`` tensor.
        if op.attributes.get("value") is None:
            raise self.node_error(op, "only tensor, float(s), int(s) and string(s) "
                                  "constants are supported (not sparse ones)")
        value = onnx.numpy_helper.to_array(op.attributes["value"])
        # strings have no tensor type: the text operators read them as an array
        constant = value if is_string(value.dtype) else as_tensor(value)
        self._emit(op, lambda: constant, [])

    def visit_constantofshape(self, op, network):
        given = op.attributes.get("value")
        value = (onnx.numpy_helper.to_array(given) if given is not None
                 else np.zeros(1, np.float32))
        fill, dtype = value.reshape(-1)[0].item(), torch_dtype(
            onnx.helper.np_dtype_to_tensor_dtype(value.dtype))
        self._emit(op, lambda shape: torch.full(shape.tolist(), fill, dtype=dtype,
                                                device=shape.device))

    def visit_range(self, op, network):
        def arange(start, limit, delta):
            return torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype,
                                device=start.device)
        self._emit(op, arange)

    def visit_eyelike(self, op, network):
        """https://onnx.ai/onnx/operators/onnx__EyeLike.html"""
        dtype = op.attributes.get("dtype")
        dtype = None if dtype is None else torch_dtype(dtype)
        k = int(op.attributes.get("k") or 0)

        def eye_like(x):
            if x.dim() != 2:
                raise ShapeError(f"EyeLike takes a 2-D input, not shape {tuple(x.shape)}")
            rows = torch.arange(x.shape[0], device=x.device).view(-1, 1)
            cols = torch.arange(x.shape[1], device=x.device).view(1, -1)
            return (cols - rows == k).to(x.dtype if dtype is None else dtype)
        self._emit(op, eye_like)


__all__ = ["TensorOps"]
