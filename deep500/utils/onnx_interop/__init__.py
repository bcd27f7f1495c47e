"""Deep500's intermediate representation of ONNX models."""
from deep500.utils.onnx_interop.onnx_objects import OnnxModel, OnnxValueInfo
from deep500.utils.onnx_interop.parser import ModelError, load_and_parse_model
from deep500.utils.onnx_interop.schemas import OnnxOperation, operator_class, operators
from deep500.utils.onnx_interop.visitor import OnnxBaseVisitor

__all__ = ["ModelError", "OnnxBaseVisitor", "OnnxModel", "OnnxOperation", "OnnxValueInfo",
           "load_and_parse_model", "operator_class", "operators"]
