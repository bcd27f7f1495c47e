"""Level-2 validation of one optimizer step: the parameters after a step of the tested
optimizer against expected parameters, typically those a reference optimizer reaches
from the same weights on the same minibatch."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from deep500.lv2_training.optimizer import Optimizer
from deep500.utils.errors import Deep500Error, ShapeError
from deep500.utils.metric import TestMetric, run_together
from deep500.utils.norm_metrics import L2Error, MaxError
from deep500.utils.tensor_desc import TensorDescriptor
from deep500.utils.threads import thread_conditions
from deep500.utils.validation_result import TestResult


class _RestoreBeforeRerun(TestMetric):
    """Not a metric: puts parameters and optimizer state back before every run but the
    first, so that timing metrics that rerun the step time the same step each time. As a
    non-timing metric it begins before (outside) every timer."""

    def __init__(self, optimizer: Optimizer):
        self.optimizer = optimizer
        network = optimizer.network
        self.parameters = {p: np.array(network.fetch_tensor(p), copy=True)
                           for p in network.get_params()}
        self.state = optimizer.state_dict()
        self.runs = 0

    def begin(self, inputs=None) -> None:
        if self.runs:
            for name, value in self.parameters.items():
                # A copy: the reference network adopts fed arrays and updates them.
                self.optimizer.network.feed_tensor(name, np.array(value, copy=True),
                                                   is_param=True)
            self.optimizer.load_state_dict(self.state)
        self.runs += 1


def _expected_from(reference: Optimizer, optimizer: Optimizer, inputs: dict) -> dict:
    """One step of ``reference``, which must start from ``optimizer``'s weights."""
    start = {p: optimizer.network.fetch_tensor(p) for p in optimizer.network.get_params()}
    for name in reference.network.get_params():
        if name in start and not np.allclose(reference.network.fetch_tensor(name),
                                             start[name], rtol=1e-6, atol=0):
            raise Deep500Error(f"test_optimizer: the reference optimizer's parameter "
                               f"{name!r} differs from the tested optimizer's before the "
                               f"step; build both executors from the same model and "
                               f"weights")
    reference.step(inputs)
    return {p: np.array(reference.network.fetch_tensor(p), copy=True)
            for p in reference.network.get_params()}


def _check_expected(optimizer: Optimizer, expected: dict) -> list[str]:
    params = optimizer.network.get_params()
    unknown = [p for p in expected if p not in params]
    if unknown:
        raise Deep500Error(f"test_optimizer: expected values for {unknown}, which are not "
                           f"parameters of network '{optimizer.network.name}' (its "
                           f"parameters: {params[:10]})")
    for name, value in expected.items():
        if value is None:
            raise Deep500Error(f"test_optimizer: the expected value of {name!r} is None")
        shape = np.shape(optimizer.network.fetch_tensor(name))
        if np.shape(value) != shape:
            raise ShapeError(f"test_optimizer: parameter {name!r} has shape {shape} but "
                             f"its expected value has shape {np.shape(value)}")
    return [p for p in params if p not in expected]


def test_optimizer(optimizer: Optimizer, inputs: dict, expected_params,
                   metrics: Sequence[TestMetric] | None = None,
                   tolerance: float = 1e-5) -> TestResult:
    """One step of ``optimizer`` on the minibatch ``inputs``, then every parameter named
    in ``expected_params`` compared with its expected value.

    Args:
        optimizer: the optimizer under test (any Level-2 ``Optimizer``).
        inputs: the minibatch, ``{tensor name: array}``.
        expected_params: ``{parameter name: array}`` after the step, or an optimizer
            (e.g. a reference one) over an executor with the same weights, which then
            takes its own step on ``inputs`` to produce them.
        metrics: default ``L2Error`` and ``MaxError``. Accuracy metrics compare the
            parameters; metrics that rerun the step (``WallclockTime``) see the same step
            each time, since parameters and optimizer state are restored before each
            rerun (outside any timer).
        tolerance: the largest relative error (each accuracy metric's ``relative``, over
            all parameters) that passes.

    Returns:
        A ``TestResult`` whose metrics hold the worst error over the parameters and,
        in ``details["per_parameter"]``, each parameter's absolute and relative errors
        per metric; ``passed`` says whether every accuracy metric is within
        ``tolerance`` (None without accuracy metrics). ``outputs`` are the step's.
    """
    if not isinstance(optimizer, Optimizer):
        raise Deep500Error(f"test_optimizer needs a Level-2 Optimizer, got "
                           f"{type(optimizer).__name__}")
    metrics = [L2Error(), MaxError()] if metrics is None else list(metrics)
    network = optimizer.network
    conditions = {"framework": optimizer.executor.framework, "network": network.name,
                  "device": str(optimizer.executor.device), "optimizer": optimizer.name,
                  "hyperparameters": optimizer.hyperparameters(),
                  "step_count": optimizer.step_count,
                  "inputs": {k: TensorDescriptor.from_numpy(np.asarray(v)).to_dict()
                             for k, v in inputs.items()},
                  "threads": thread_conditions()}
    if isinstance(expected_params, Optimizer):
        conditions["reference"] = {"optimizer": expected_params.name,
                                   "framework": expected_params.executor.framework}
        expected_params = _expected_from(expected_params, optimizer, inputs)
    expected = {k: np.asarray(v) for k, v in expected_params.items()}
    not_compared = _check_expected(optimizer, expected)

    for metric in metrics:
        metric.reset()
    # Metrics that disturb others run alone, as in run_measured; each run is one step.
    groups = [[m] for m in metrics if m.exclusive]
    shared = [m for m in metrics if not m.exclusive]
    if shared or not groups:
        groups.append(shared)
    runs = sum(max([m.reruns for m in group] + [1]) for group in groups)
    adaptive = any(getattr(m, "adaptive", False) for m in metrics)  # may ask for more
    restore = [_RestoreBeforeRerun(optimizer)] if runs > 1 or adaptive else []
    outputs = None
    for group in groups:
        outputs = run_together(lambda: optimizer.step(inputs), [*restore, *group], None)

    actual = {p: network.fetch_tensor(p) for p in expected}
    results, per_parameter, passed = [], {p: {} for p in expected}, None
    for metric in metrics:
        result = metric.measure(inputs, actual, expected)
        result.conditions = {**conditions, **result.conditions}
        results.append(result)
        if getattr(metric, "needs_reference", False):
            for name, errors in zip(expected, result.summary.get("per_output", [])):
                per_parameter[name][metric.name] = errors
            within = bool(result.get("relative") <= tolerance)
            passed = within if passed is None else passed and within
    details = {"tolerance": tolerance, "per_parameter": per_parameter,
               "not_compared": not_compared}
    if outputs is not None and optimizer.loss in outputs:
        details["loss"] = float(np.asarray(outputs[optimizer.loss]))
    if per_parameter and results and any(per_parameter.values()):
        first = next(m.name for m in metrics if getattr(m, "needs_reference", False))
        details["worst_parameter"] = max(per_parameter,
                                         key=lambda p: per_parameter[p][first]["relative"])
    subject = f"{optimizer.name}:{optimizer.executor.framework}:{network.name}"
    return TestResult("optimizer", subject, conditions, results, passed, details,
                      outputs=outputs)


test_optimizer.__test__ = False  # a validation function, not a pytest test
