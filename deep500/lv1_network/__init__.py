"""Level 1: networks (built from ONNX by visitors) and graph executors."""
from deep500.lv1_network.events import ExecutorEvent
from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv1_network.network import GRADIENT_SUFFIX, Network, gradient_name

__all__ = ["ExecutorEvent", "GRADIENT_SUFFIX", "GraphExecutor", "Network", "gradient_name"]
from deep500.lv1_network.metrics import FrameworkOverhead, OperatorTimes, PeakMemory
from deep500.lv1_network.validation import test_executor_backprop, test_executor_inference

__all__ += ["FrameworkOverhead", "OperatorTimes", "PeakMemory", "test_executor_backprop",
            "test_executor_inference"]
