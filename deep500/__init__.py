"""Deep500: a white-box benchmarking meta-framework for deep learning.

``import deep500 as d5``. Frameworks are imported separately so that this import stays
light: ``import deep500.frameworks.reference as d5ref``,
``import deep500.frameworks.pytorch as d5pt``,
``import deep500.frameworks.tensorflow as d5tf``.

Level 2 (datasets, samplers, optimizers, training) is exported here too:
``d5.load_dataset``, ``d5.ShuffleSampler``, ``d5.Trainer``, ``d5.test_training``, ...
"""
from deep500.lv1_network import (ExecutorEvent, FrameworkOverhead, GraphExecutor, Network,
                                  OperatorTimes, PeakMemory, gradient_name,
                                  test_executor_backprop, test_executor_inference)
from deep500.lv0_operators import (CppOpDescriptor, CppOperatorError, CustomCPPOp, CustomOp,
                                   CustomPythonOp, OpTestResult, ToolchainError,
                                   compile_custom_cppop, load_custom_cppop, test_op_forward,
                                   test_op_gradient)
from deep500.utils.device import CPUDevice, DeviceDescriptor, GPUDevice
from deep500.utils.errors import (CompilationError, Deep500Error, MissingDependencyError,
                                  ModelError, RecipeError, ShapeError, UnsupportedError)
from deep500.utils.flops import FLOPs, flop_count
from deep500.utils.heatmaps import DiffHeatmap, VarHeatmap
from deep500.utils.metric import MetricResult, TestMetric
from deep500.utils.norm_metrics import L1Error, L2Error, MaxError
from deep500.utils.tensor_desc import TensorDescriptor, tensor_t, tensordesc
from deep500.utils.onnx_interop import OnnxBaseVisitor, load_and_parse_model
from deep500.utils.onnx_interop import parser  # noqa: F401 - d5.parser.load_and_parse_model
from deep500.utils.validation_result import TestResult
from deep500.lv2_training import *  # noqa: F401,F403 - Level 2 (see its __all__)
from deep500.lv2_training import __all__ as _lv2_names
from deep500.datasets import IndexedTarDataset, dataset_names, dataset_shape, load_dataset
from deep500.lv3_distributed import (CommunicationNetwork, CommunicationVolume,
                                     CommunicationVolumeMetric, DistributedBucketSampler,
                                     DistributedOptimizer, DistributedSampler,
                                     MPIProfiling, PartitionedDistributedSampler,
                                     guarded_main, mpi_fork)
from deep500.utils.wallclock import UnstableMeasurementWarning, WallclockTime
from deep500.utils.energy import Energy
from deep500.utils.machine import MachineModel, load_machine
from deep500.lv3_distributed.collective_models import (predict_allreduce,
                                                       predict_allreduce_call)

from deep500.lv3_distributed.simulator import SimulatedStep, simulate_training
from deep500.lv3_distributed.step_profile import (StepProfile, measure_step_profile,
                                                  modelled_step_profile)

__version__ = "0.1.0"

__all__ = [
    "CPUDevice", "CompilationError", "CppOpDescriptor", "CppOperatorError", "CustomCPPOp",
    "ToolchainError", "compile_custom_cppop", "load_custom_cppop", "CustomOp", "CustomPythonOp", "Deep500Error", "DeviceDescriptor",
    "DiffHeatmap", "FLOPs", "GPUDevice", "L1Error", "L2Error", "MaxError", "MetricResult",
    "MissingDependencyError", "ModelError", "OpTestResult", "RecipeError", "ShapeError", "TensorDescriptor",
    "TestMetric", "UnstableMeasurementWarning", "UnsupportedError", "VarHeatmap",
    "WallclockTime", "Energy", "flop_count", "tensor_t", "tensordesc", "test_op_forward",
    "test_op_gradient", "ExecutorEvent", "FrameworkOverhead", "GraphExecutor", "Network",
    "OperatorTimes", "PeakMemory", "gradient_name", "test_executor_backprop",
    "test_executor_inference", "OnnxBaseVisitor", "load_and_parse_model", "parser",
    "TestResult", "IndexedTarDataset", "dataset_names", "dataset_shape", "load_dataset",
    *_lv2_names,
    "CommunicationNetwork", "CommunicationVolume", "CommunicationVolumeMetric",
    "guarded_main", "mpi_fork", "DistributedOptimizer", "DistributedSampler",
    "PartitionedDistributedSampler", "DistributedBucketSampler", "MPIProfiling",
    "MachineModel", "load_machine", "predict_allreduce", "predict_allreduce_call",
    "simulate_training", "SimulatedStep", "StepProfile", "measure_step_profile",
    "modelled_step_profile",
]
