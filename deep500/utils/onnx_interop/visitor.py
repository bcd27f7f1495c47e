"""Walking a parsed ONNX model: the visitor pattern frameworks use to build networks.

``OnnxBaseVisitor.visit_model(model, network)`` calls, in order: ``visit_graph``,
``visit_initializer`` per stored tensor, ``visit_input`` per graph input that is fed,
``visit_<op>`` per node in topological order (the ONNX name in lower case, e.g.
``visit_conv``, ``visit_globalaveragepool``), ``visit_output`` per graph output, and
``visit_graph_end``. A node whose ``visit_<op>`` the visitor lacks raises one
UnsupportedError naming every node of the model the visitor lacks a method for, grouped
by operator, with the registered executors that support each (``support.py``).
"""
from __future__ import annotations

from deep500.utils.errors import Deep500Error, UnsupportedError
from deep500.utils.framework_errors import NOT_CONVERTED, convert
from deep500.utils.onnx_interop.onnx_objects import OnnxModel, OnnxValueInfo
from deep500.utils.onnx_interop.schemas import OnnxOperation
from deep500.utils.onnx_interop.support import unsupported_operators_error


class OnnxBaseVisitor:
    """Base class of visitors; subclasses define the hooks and ``visit_<op>`` methods."""
    framework = "a Deep500 visitor"
    errors = ""   # the framework's key in deep500.utils.framework_errors.register

    def visit_model(self, model: OnnxModel, network) -> None:
        """Build ``network`` from ``model``. A framework's exception while building
        becomes a Deep500 error naming the node being visited (see
        ``deep500.utils.framework_errors``)."""
        self.model = model
        op = None
        try:
            self.visit_graph(model, network)
            for name, value in model.initializers.items():
                self.visit_initializer(name, value, network)
            for value_info in model.feed_inputs:
                self.visit_input(value_info, network)
            for op in model.operations:
                self.visitor_for(op)(op, network)
            op = None
            for value_info in model.outputs:
                self.visit_output(value_info, network)
            self.visit_graph_end(model, network)
        except (Deep500Error,) + NOT_CONVERTED:
            raise
        except Exception as exc:
            source = "" if model.source.startswith("<") else f" ({model.source})"
            raise convert(exc, self.errors, f"{self.framework} failed building network "
                                            f"'{model.name}'{source}", op) from exc

    def visitor_for(self, op: OnnxOperation):
        method = getattr(self, f"visit_{op.op_type.lower()}", None)
        if method is None:
            raise self.unsupported_error(op)
        return method

    def supports(self, op_type: str) -> bool:
        return hasattr(self, f"visit_{op_type.lower()}")

    def unsupported_error(self, op: OnnxOperation) -> UnsupportedError:
        """The one error for an unsupported ``op``: it lists every node of the model
        being visited that this visitor does not support, grouped by operator, with
        the registered executors that support each (see ``onnx_interop.support``)."""
        model = getattr(self, "model", None)
        ops = [op]
        if model is not None and any(o is op for o in model.operations):
            ops = [o for o in model.operations if o is op or not self.supports(o.op_type)]
        return unsupported_operators_error(self.framework, ops, model, exclude=self.errors)

    # -- hooks -------------------------------------------------------------------
    def visit_graph(self, model: OnnxModel, network) -> None:
        pass

    def visit_initializer(self, name: str, value, network) -> None:
        pass

    def visit_input(self, value_info: OnnxValueInfo, network) -> None:
        pass

    def visit_output(self, value_info: OnnxValueInfo, network) -> None:
        pass

    def visit_graph_end(self, model: OnnxModel, network) -> None:
        pass
