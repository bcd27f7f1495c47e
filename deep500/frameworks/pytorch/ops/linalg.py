"""The linalg family in PyTorch: MatMul, Gemm, Einsum and Det
(https://onnx.ai/onnx/operators/onnx__Gemm.html, newest opset).
"""
from __future__ import annotations

from deep500.frameworks.pytorch._torch_common import calls
from deep500.utils.errors import require

torch = require("torch", "pytorch", "The PyTorch bridge (deep500.frameworks.pytorch)")
F = torch.nn.functional


class LinalgOps:
    """``visit_<op>`` of the linalg family, mixed into
    :class:`~deep500.frameworks.pytorch.visitor.PyTorchVisitor`, whose helpers they use."""

    visit_matmul = calls(torch.matmul)
    visit_det = calls(torch.linalg.det)

    def visit_gemm(self, op, network):
        """alpha·A'·B' + beta·C, A' and B' transposed by transA/transB."""
        a = op.attributes
        alpha, beta = a["alpha"], a["beta"]
        trans_a, trans_b = a.get("transA") or 0, a.get("transB") or 0
        c_shape = self._shape(op.inputs[2]) if len(op.inputs) > 2 else None
        has_c = len(op.inputs) > 2 and bool(op.inputs[2])
        if (not trans_a and trans_b and alpha == 1.0 and (not has_c or beta == 1.0)
                and (not has_c or (c_shape is not None and len(c_shape) == 1))):
            # The layout of nn.Linear: y = x·Wᵀ + b, one fused call.
            self._emit(op, F.linear)
            return

        def gemm(A, B, C=None):
            A = A.t() if trans_a else A
            B = B.t() if trans_b else B
            if C is None or beta == 0.0:
                product = torch.mm(A, B)
                return product if alpha == 1.0 else product * alpha
            return torch.addmm(C, A, B, beta=beta, alpha=alpha)
        self._emit(op, gemm)

    def visit_einsum(self, op, network):
        equation = op.attributes["equation"].replace(" ", "")
        self._emit(op, lambda *xs: torch.einsum(equation, *xs))


__all__ = ["LinalgOps"]
