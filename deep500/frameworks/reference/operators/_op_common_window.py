"""What the window generators (HannWindow, HammingWindow, BlackmanWindow) share: the
window of ``size`` points w[n] = Σ_k a_k cos(2πkn / D), n = 0 … size-1, with D = size
for a periodic window (``periodic=1``, the default: the first point of the next period
is left out, as spectral analysis wants) and D = size - 1 for a symmetric one, in the
element type ``output_datatype`` (FLOAT by default).
https://onnx.ai/onnx/operators/onnx__HannWindow.html"""
import numpy as np

from deep500.frameworks.reference.operators.registry import ReferenceOp
from deep500.utils.errors import ShapeError
from deep500.utils.onnx_interop.cast import target_dtype


class CosineWindow(ReferenceOp):
    """Subclasses name their cosine-series coefficients ``(a_0, a_1, ...)``."""
    defaults = {"output_datatype": 1, "periodic": 1}
    coefficients: tuple = ()

    def forward(self, size):
        size = np.asarray(size)
        if size.size != 1 or size.dtype.kind not in "iu" or int(size.reshape(-1)[0]) < 0:
            raise ShapeError(f"{self.op_type}: size must be one non-negative integer, got "
                             f"{size!r}")
        n = int(size.reshape(-1)[0])
        period = n if self.attr("periodic") else n - 1
        phase = 2.0 * np.pi * np.arange(n) / max(period, 1)
        window = sum(a * np.cos(k * phase) for k, a in enumerate(self.coefficients))
        return np.asarray(window, np.float64).astype(
            target_dtype(self.op_type, self.attr("output_datatype")))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return [None]   # the window is a function of its integer size alone
