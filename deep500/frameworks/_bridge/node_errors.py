"""One error message for a node a bridge cannot build or run: which framework, which
node (name, operator, opset version), in which model or network, and what was wrong.
"""
from __future__ import annotations

from deep500.utils.errors import Deep500Error, UnsupportedError


def node_error(framework: str, op, where: str, message: str,
               error: type[Deep500Error] = UnsupportedError) -> Deep500Error:
    """``error`` for node ``op`` (an ``OnnxOperation``) of ``where`` (``"model 'm'
    (file.onnx)"``, ``"network 'n'"`` or empty), read by ``framework`` (the bridge's
    ``framework`` text). The caller raises it: ``raise node_error(...)``."""
    version = getattr(op, "original_version", None)
    opset = f", opset version {version}" if version is not None else ""
    of = f" of {where}" if where else ""
    return error(f"{framework}: node '{op.name}' ({op.op_type}{opset}){of}: {message}")


def model_place(model=None, network_name: str | None = None) -> str:
    """``where`` for :func:`node_error`: the parsed model (name and source) when there is
    one, else the network's name, else empty."""
    if model is not None and getattr(model, "name", None) is not None:
        source = getattr(model, "source", None)
        return f"model '{model.name}'" + (f" ({source})" if source else "")
    return f"network '{network_name}'" if network_name else ""


class NodeErrors:
    """Mixed into a bridge's visitor: ``self.node_error(op, message)``. The visitor sets
    ``framework`` and answers :meth:`error_place` (by default its ``model``, else its
    ``network``'s name)."""
    framework = "A framework bridge"

    def error_place(self) -> str:
        network = getattr(self, "network", None)
        return model_place(getattr(self, "model", None),
                           getattr(network, "name", None))

    def node_error(self, op, message: str,
                   error: type[Deep500Error] = UnsupportedError) -> Deep500Error:
        return node_error(self.framework, op, self.error_place(), message, error)


__all__ = ["NodeErrors", "model_place", "node_error"]
