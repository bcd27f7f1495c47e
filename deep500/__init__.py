"""Deep500: a white-box benchmarking meta-framework for deep learning.

``import deep500 as d5``. Frameworks are imported separately so that this import stays
light: ``import deep500.frameworks.reference as d5ref``,
``import deep500.frameworks.pytorch as d5pt``,
``import deep500.frameworks.tensorflow as d5tf``.

Level 2 (datasets, samplers, optimizers, training) is exported here too:
``d5.load_dataset``, ``d5.ShuffleSampler``, ``d5.Trainer``, ``d5.test_training``, ...

Every ``d5.<name>`` is imported on first use (module ``__getattr__``, PEP 562, as in
Scientific Python's SPEC 1 "lazy loading"): ``import deep500`` itself costs milliseconds,
so that ``deep500 info`` or ``deep500 --help`` do not wait a second for NumPy, ONNX and
every level to load.
"""
import importlib

__version__ = "0.1.0"

# Where each exported name lives.
_EXPORTS = {
    "deep500.lv1_network": (
        "ExecutorEvent", "FrameworkOverhead", "GraphExecutor", "Network", "OperatorTimes",
        "PeakMemory", "gradient_name", "test_executor_backprop", "test_executor_inference"),
    "deep500.lv0_operators": (
        "CppOpDescriptor", "CppOperatorError", "CustomCPPOp", "CustomOp", "CustomPythonOp",
        "OpTestResult", "ToolchainError", "compile_custom_cppop", "load_custom_cppop",
        "test_op_forward", "test_op_gradient"),
    "deep500.utils.device": ("CPUDevice", "DeviceDescriptor", "GPUDevice"),
    "deep500.utils.errors": (
        "CompilationError", "Deep500Error", "MissingDependencyError", "ModelError",
        "RecipeError", "ShapeError", "UnsupportedError"),
    "deep500.utils.flops": ("FLOPs", "flop_count"),
    "deep500.utils.heatmaps": ("DiffHeatmap", "VarHeatmap"),
    "deep500.utils.metric": ("MetricResult", "TestMetric"),
    "deep500.utils.norm_metrics": ("L1Error", "L2Error", "MaxError"),
    "deep500.utils.tensor_desc": ("TensorDescriptor", "tensor_t", "tensordesc"),
    "deep500.utils.onnx_interop": ("OnnxBaseVisitor", "load_and_parse_model", "parser"),
    "deep500.utils.validation_result": ("TestResult",),
    "deep500.datasets": ("IndexedTarDataset", "dataset_names", "dataset_shape",
                         "load_dataset"),
    "deep500.lv3_distributed": (
        "CommunicationNetwork", "CommunicationVolume", "CommunicationVolumeMetric",
        "DistributedBucketSampler", "DistributedOptimizer", "DistributedSampler",
        "MPIProfiling", "PartitionedDistributedSampler", "guarded_main", "mpi_fork"),
    "deep500.utils.wallclock": ("UnstableMeasurementWarning", "WallclockTime"),
    "deep500.utils.energy": ("Energy",),
    "deep500.utils.machine": ("MachineModel", "load_machine"),
    "deep500.lv3_distributed.collective_models": ("predict_allreduce",
                                                  "predict_allreduce_call"),
    "deep500.lv3_distributed.simulator": ("SimulatedStep", "simulate_training"),
    "deep500.lv3_distributed.step_profile": ("StepProfile", "measure_step_profile",
                                             "modelled_step_profile"),
    "deep500.lv3_distributed.pipeline": ("PipelineParallel",),
}
# Every name in this module's ``__all__`` is exported too.
_EXPORTED_MODULES = ("deep500.lv2_training",)

_HOME = {name: module for module, names in _EXPORTS.items() for name in names}


def _level2_names() -> list:
    return [name for module in _EXPORTED_MODULES
            for name in importlib.import_module(module).__all__]


def __getattr__(name: str):
    if name == "__all__":
        return [*_HOME, *_level2_names()]
    module = _HOME.get(name)
    if module is None:
        module = next((m for m in _EXPORTED_MODULES
                       if name in importlib.import_module(m).__all__), None)
    if module is None:
        raise AttributeError(f"module 'deep500' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list:
    return sorted({*globals(), *_HOME, *_level2_names()})
