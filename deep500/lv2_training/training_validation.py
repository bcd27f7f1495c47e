"""Level-2 validation of a whole training run: ``d5.test_training`` trains a network
with an optimizer on a dataset for some epochs, testing after each, and returns the
training metrics with the full per-epoch statistics."""
from __future__ import annotations

from typing import Sequence

from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv2_training.dataset import Dataset
from deep500.lv2_training.events import TrainingEvent
from deep500.lv2_training.optimizer import Optimizer
from deep500.lv2_training.sampler import OrderedSampler, Sampler, ShuffleSampler
from deep500.lv2_training.trainer import Trainer
from deep500.lv2_training.training_metrics import TrainingMetric
from deep500.utils.errors import Deep500Error
from deep500.utils.validation_result import TestResult


def test_training(executor: GraphExecutor, training_set: Dataset,
                  validation_set: Dataset | None, optimizer: Optimizer, epochs: int,
                  batch_size: int, metrics: Sequence[TrainingMetric] = (),
                  events: Sequence = (), sampler=ShuffleSampler, seed: int = 0,
                  network_output: str = "output",
                  test_batch_size: int | None = None) -> TestResult:
    """Train ``executor``'s network with ``optimizer`` for ``epochs`` epochs of
    ``batch_size`` minibatches drawn from ``training_set`` by ``sampler`` (a Sampler
    class, seeded with ``seed``, or a ready Sampler), testing on all of
    ``validation_set`` (in order, ``test_batch_size`` samples per inference, by default
    ``batch_size``; ``None``: no test pass) after every epoch.

    Returns a TestResult (``test="training"``) with the ``metrics``' results;
    ``details["statistics"]`` is the run's TrainingStatistics as a dict, and
    ``result.outputs`` the TrainingStatistics object. ``passed`` is None: the run
    measures; judge it by its metrics (e.g. ``result["TestAccuracy"].get("final")``).
    Metrics that are also TrainingEvents watch the run as events.

    Distributed: give a distributed sampler (e.g. ``d5.DistributedSampler``) and a
    distributed optimizer and call this on every rank. Each rank's metrics are its own
    (its shard's training figures, its replica's test accuracy, per-phase times and
    bytes in each epoch's ``optimizer_measurements``); at rank 0,
    ``details["distributed"]`` adds every rank's statistics and the global figures
    (see :mod:`deep500.lv3_distributed.distributed_training`).
    """
    metrics = list(metrics)
    for metric in metrics:
        if not isinstance(metric, TrainingMetric):
            raise Deep500Error(f"test_training: {type(metric).__name__} is not a training "
                               f"metric (TrainingAccuracy, TestAccuracy, TimeToAccuracy, "
                               f"LossCurve, or a TrainingMetric subclass)")
    if isinstance(sampler, Sampler):
        if sampler.dataset is not training_set:
            raise Deep500Error("test_training: the sampler given draws from another dataset "
                               "than training_set")
        train_sampler = sampler
    elif isinstance(sampler, type) and issubclass(sampler, Sampler):
        train_sampler = sampler(training_set, batch_size, seed=seed)
    else:
        raise Deep500Error(f"test_training: sampler must be a Sampler class (e.g. "
                           f"d5.ShuffleSampler) or instance, got {sampler!r}")
    validation_sampler = None
    if validation_set is not None:
        validation_sampler = OrderedSampler(validation_set, test_batch_size or batch_size,
                                            seed=seed, drop_last_batch=False)
    trainer = Trainer(train_sampler, validation_sampler, executor, optimizer,
                      network_output=network_output)
    watching = [m for m in metrics if isinstance(m, TrainingEvent)]
    statistics = trainer.run_loop(epochs, events=list(events) + watching)
    results = []
    conditions = {**statistics.conditions, "epochs": int(epochs),
                  "test_batch_size": None if validation_sampler is None
                  else validation_sampler.batch_size}
    for metric in metrics:
        result = metric.measure_training(statistics)
        result.conditions = {**conditions, **result.conditions}
        results.append(result)
    subject = f"{executor.framework}:{executor.network.name}:{optimizer.name}"
    details = {"statistics": statistics.to_dict(),
               "stopped_reason": statistics.stopped_reason}
    summary = getattr(optimizer, "distributed_summary", None)
    if summary is not None:  # a Level-3 optimizer: every rank's figures, at rank 0
        details["distributed"] = summary(statistics)
    return TestResult("training", subject, conditions, results, details=details,
                      outputs=statistics)


test_training.__test__ = False  # a validation function, not a pytest test
