"""Level-1 validation: a graph executor's outputs and gradients against reference
values (typically the reference executor's), with white-box metrics."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

import numpy as np

from deep500.lv1_network.events import ExecutorEvent
from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv1_network.metrics import FrameworkOverhead, OperatorTimes, PeakMemory
from deep500.lv1_network.network import gradient_name
from deep500.utils.errors import ModelError
from deep500.utils.metric import TestMetric, require_reference, run_measured
from deep500.utils.tensor_desc import TensorDescriptor
from deep500.utils.threads import thread_conditions
from deep500.utils.validation_result import TestResult


def _events_of(metrics) -> list[ExecutorEvent]:
    events = []
    for metric in metrics:
        if isinstance(metric, ExecutorEvent):
            events.append(metric)
        if isinstance(metric, FrameworkOverhead) and metric.operator_times not in events:
            events.append(metric.operator_times)
    return events


@contextmanager
def _installed(executor: GraphExecutor, metrics):
    """Metrics that watch the executor from inside are its events for the test."""
    events = _events_of(metrics)
    for metric in metrics:
        if isinstance(metric, PeakMemory):
            metric.bind(executor)
        if isinstance(metric, FrameworkOverhead):
            metric.device = executor.device
            metric.framework = executor.framework
    for event in events:
        if isinstance(event, OperatorTimes):
            event.set_device(executor.device)
    executor.events.extend(events)
    try:
        yield events
    finally:
        for event in events:
            executor.events.remove(event)


def _collect_profiled(executor, events) -> None:
    """Executors that profile per operator themselves (onnxruntime) report afterwards:
    ``operator_times_of_runs`` (one dict of seconds per node for each run)."""
    if not hasattr(executor, "operator_times_of_runs"):
        return
    runs = executor.operator_times_of_runs
    op_types = getattr(executor, "last_operator_types", {})
    for event in events:
        if isinstance(event, OperatorTimes) and len(event.runs) == 0:
            for times in runs:
                event.record_run(times, op_types)


def _conditions(executor: GraphExecutor, inputs: dict) -> dict:
    return {"framework": executor.framework, "network": executor.network.name,
            "device": str(executor.device),
            "inputs": {k: TensorDescriptor.from_numpy(np.asarray(v)).to_dict()
                       for k, v in inputs.items()},
            "threads": thread_conditions()}


def _run(executor, call, inputs, metrics, reference, test: str) -> TestResult:
    for metric in metrics:
        metric.reset()
    with _installed(executor, metrics) as events:
        outputs = run_measured(call, metrics)
        _collect_profiled(executor, events)
    conditions = _conditions(executor, inputs)
    results = []
    for metric in metrics:
        require_reference(metric, reference, f"{test} of {executor.network.name}")
        missing = [k for k in (reference or {}) if k not in outputs]
        if missing:
            raise ModelError(f"{executor.framework} executor produced no {missing} for "
                             f"network '{executor.network.name}' (it produced "
                             f"{sorted(outputs)[:10]}); give reference values only for "
                             f"tensors the network outputs, or add them with "
                             f"network.add_output")
        compared = {k: outputs[k] for k in reference} if reference is not None else outputs
        result = metric.measure(inputs, compared, reference)
        result.conditions = {**conditions, **result.conditions}
        results.append(result)
    return TestResult(test, f"{executor.framework}:{executor.network.name}", conditions,
                      results, outputs=outputs)


def test_executor_inference(executor: GraphExecutor, inputs: dict,
                            reference_outputs: dict | None = None,
                            metrics: Sequence[TestMetric] = ()) -> TestResult:
    """Run inference as often as ``metrics`` need; accuracy metrics compare the outputs
    named in ``reference_outputs``."""
    return _run(executor, lambda: executor.inference(inputs), inputs, list(metrics),
                reference_outputs, "inference")


def test_executor_backprop(executor: GraphExecutor, inputs: dict,
                           reference_gradients: dict | None = None, y: str = "loss",
                           metrics: Sequence[TestMetric] = ()) -> TestResult:
    """Run inference and backpropagation; accuracy metrics compare gradients.

    ``reference_gradients`` maps parameter names (or their gradient names) to arrays.
    """
    reference = None
    if reference_gradients is not None:
        reference = {(k if k.endswith(gradient_name("")) else gradient_name(k)): v
                     for k, v in reference_gradients.items()}
    return _run(executor, lambda: executor.inference_and_backprop(inputs, y), inputs,
                list(metrics), reference, "backprop")
