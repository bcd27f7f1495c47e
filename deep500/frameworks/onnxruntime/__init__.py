"""The onnxruntime bridge (``d5ort``): runs ONNX models with onnxruntime, for inference
only."""
from __future__ import annotations

from deep500.frameworks.onnxruntime.executor import OnnxRuntimeGraphExecutor
from deep500.frameworks.onnxruntime.network import OnnxRuntimeNetwork
from deep500.utils.onnx_interop.onnx_objects import OnnxModel
from deep500.utils.onnx_interop.parser import load_and_parse_model


def from_onnx(path_or_model, device=None, events=(), *, threads: int | None = None,
              optimization: str | None = None) -> OnnxRuntimeGraphExecutor:
    """An onnxruntime executor of an ONNX file, ``onnx.ModelProto`` or parsed
    ``OnnxModel``. ``threads`` and ``optimization``: see
    :class:`OnnxRuntimeGraphExecutor`."""
    model = (path_or_model if isinstance(path_or_model, OnnxModel)
             else load_and_parse_model(path_or_model))
    return OnnxRuntimeGraphExecutor(model, device=device, events=events, threads=threads,
                                    optimization=optimization)


__all__ = ["OnnxRuntimeGraphExecutor", "OnnxRuntimeNetwork", "from_onnx"]
