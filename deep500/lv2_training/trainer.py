"""The Level-2 training loop: epochs of optimizer steps over a training sampler, each
followed by a full validation pass, measured as :class:`TrainingStatistics`.

What is measured per epoch (see :class:`EpochStatistics`): the training loss and
accuracy from the outputs of the training steps themselves (no extra pass), the test
loss and accuracy of ``executor.inference`` over the whole validation set, and the
time spent loading data (``next(sampler)``), in optimizer steps (forward, backward,
update) and validating. The measuring layer reads ``time.perf_counter`` around those
calls and counts correct predictions with one NumPy ``argmax`` per step; it adds no
device synchronisation besides reading each step's loss (which the statistics need).

Events (:class:`TrainingEvent`) are called around training, epochs, steps and test
passes; raising :class:`StopTraining` from any of them ends training cleanly (with a
distributed optimizer, at the end of the epoch and on every rank together: the ranks
agree on it there, so one rank's time limit cannot leave the others waiting). The
trainer's attributes (``epoch``, ``step``, ``optimizer``, ``executor``, the samplers,
``stats``) are there for events to read and change. Checkpoints (``save_checkpoint``,
``load_checkpoint``, ``run_loop(resume_from=...)``) continue a run exactly where it was
saved: parameters, optimizer state, sampler positions, statistics.

The paper's Level-2 trainer is the "Trainer" of Ben-Nun et al., "A Modular
Benchmarking Infrastructure for High-Performance and Reproducible Deep Learning"
(IPDPS 2019), Section IV-C.
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from deep500.lv1_network.graph_executor import GraphExecutor
from deep500.lv2_training.checkpoint import (check_compatible, read_checkpoint,
                                              restore_network, save_checkpoint)
from deep500.lv2_training.events import StopTraining, TrainingEvent
from deep500.lv2_training.optimizer import Optimizer, OptimizerEvent
from deep500.lv2_training.sampler import Sampler
from deep500.lv2_training.training_statistics import EpochStatistics, TrainingStatistics
from deep500.utils.errors import Deep500Error
from deep500.utils.threads import thread_conditions

_clock = time.perf_counter
_HOOKS = ("before_training", "before_epoch", "before_training_step",
          "after_training_step", "before_test_set", "after_test_set", "after_epoch",
          "after_training")


class Trainer:
    """Trains ``optimizer`` (which drives ``executor``) on ``train_sampler`` and tests
    on ``validation_sampler`` (``None``: no test pass) after every epoch.

    Accuracy compares ``argmax`` over axis 1 of the output ``network_output`` with the
    labels (``sampler.dataset.label_node``); unlabelled data has no accuracy.

    Attributes (events may use them):
        train_sampler, validation_sampler, executor, optimizer, network_output: as given.
        events: events called in every :meth:`run_loop` (besides those passed to it).
        epoch: epochs run so far, i.e. the index of the next epoch; during an epoch its
            index (it becomes ``index + 1`` just before the ``after_epoch`` events).
        step: training steps taken so far, over all epochs.
        epochs: the number of epochs the running :meth:`run_loop` trains to.
        stats: the :class:`TrainingStatistics` so far.
        epoch_stats: the :class:`EpochStatistics` of the running (or last) epoch.
    """

    def __init__(self, train_sampler: Sampler, validation_sampler: Sampler | None,
                 executor: GraphExecutor, optimizer: Optimizer,
                 network_output: str = "output", events: Sequence = ()):
        for name, sampler in (("train_sampler", train_sampler),
                              ("validation_sampler", validation_sampler)):
            if not (sampler is None and name == "validation_sampler") and \
                    not isinstance(sampler, Sampler):
                raise Deep500Error(f"Trainer: {name} must be a d5 Sampler (e.g. "
                                   f"d5.ShuffleSampler(dataset, batch_size)), got "
                                   f"{type(sampler).__name__}")
        if not isinstance(optimizer, Optimizer):
            raise Deep500Error(f"Trainer: optimizer must be a d5 Optimizer, got "
                               f"{type(optimizer).__name__}")
        if optimizer.executor is not executor:
            raise Deep500Error("Trainer: the optimizer drives a different executor than the "
                               "one given; it would train one network and test another. "
                               "Build the optimizer on this executor")
        self.train_sampler = train_sampler
        self.validation_sampler = validation_sampler
        self.executor = executor
        self.optimizer = optimizer
        self.network_output = network_output
        self.events = list(events)
        self.epoch = 0
        self.step = 0
        self.epochs = 0
        self.stats = TrainingStatistics(conditions=self.conditions())
        self.epoch_stats: EpochStatistics | None = None
        self.running_events: list = []
        self._event_states: dict = {}

    def conditions(self) -> dict:
        """What the statistics were measured with (for reports and fair comparisons)."""
        train = self.train_sampler
        validation = self.validation_sampler
        return {"framework": self.executor.framework,
                "network": self.executor.network.name,
                "device": str(self.executor.device),
                "optimizer": self.optimizer.name,
                "hyperparameters": _jsonable(self.optimizer.hyperparameters()),
                "batch_size": train.batch_size,
                "train_sampler": type(train).__name__, "seed": train.seed,
                "train_dataset": train.dataset.name, "train_samples": len(train.dataset),
                "steps_per_epoch": len(train),
                "validation_dataset": None if validation is None else validation.dataset.name,
                "validation_samples": None if validation is None else len(validation.dataset),
                "threads": thread_conditions()}

    # -- the loop --------------------------------------------------------------------
    def run_loop(self, epochs: int, events: Sequence = (),
                 resume_from: str | None = None) -> TrainingStatistics:
        """Train until ``epochs`` epochs have run in total, counting those already run
        by this trainer or by the run a checkpoint ``resume_from`` was saved in (so
        rerunning the same call with ``resume_from`` finishes an interrupted run).

        ``events`` are :class:`TrainingEvent` objects (called besides ``self.events``);
        those that are also, or only, ``OptimizerEvent`` objects are added to the
        optimizer's events for this run if not there already. Returns the statistics;
        after a :class:`StopTraining`, ``stats.stopped_reason`` says why.
        """
        if int(epochs) < 0:
            raise Deep500Error(f"run_loop: epochs must be >= 0, got {epochs}")
        events = self.events + list(events)
        for event in events:
            if not isinstance(event, (TrainingEvent, OptimizerEvent)):
                raise Deep500Error(f"Trainer: {type(event).__name__} is neither a "
                                   f"TrainingEvent nor an OptimizerEvent")
        if resume_from is not None:
            self.load_checkpoint(resume_from)
        training_events, added = self._install(events)
        hooks = {name: _hooks(training_events, name) for name in _HOOKS}
        together = bool(getattr(self.optimizer, "stops_together", False))
        if together:   # a rank that stopped alone would leave the others waiting
            self._deferred_stop = None
            hooks = {name: [self._deferring(hook) for hook in hooks[name]]
                     if name != "after_training" else hooks[name] for name in _HOOKS}
        self.epochs = int(epochs)
        self.running_events = training_events
        self._restore_event_states()
        stats = self.stats
        stats.stopped_reason = None
        try:
            try:
                for hook in hooks["before_training"]:
                    hook(self, stats)
                if together:
                    self._stop_if_agreed()
                while self.epoch < self.epochs:
                    self._run_epoch(hooks)
                    if together:
                        self._stop_if_agreed()
            except StopTraining as stop:
                stats.stopped_reason = stop.reason
            for hook in hooks["after_training"]:
                try:
                    hook(self, stats)
                except StopTraining as stop:
                    stats.stopped_reason = stats.stopped_reason or stop.reason
        finally:
            for event in added:
                self.optimizer.events.remove(event)
        return stats

    def _deferring(self, hook):
        """``hook`` with a StopTraining kept for the end of the epoch instead of
        raised (distributed optimizers: see ``Optimizer.stops_together``)."""
        def deferred(*args):
            try:
                hook(*args)
            except StopTraining as stop:
                if self._deferred_stop is None:
                    self._deferred_stop = stop.reason
        return deferred

    def _stop_if_agreed(self) -> None:
        """Collective: raise StopTraining on every process if any wants to stop."""
        reason = self.optimizer.agree_to_stop(self._deferred_stop)
        self._deferred_stop = None
        if reason is not None:
            raise StopTraining(reason)

    def _install(self, events: list) -> tuple[list, list]:
        """The training events, and the optimizer events added to the optimizer."""
        training, added = [], []
        for event in events:
            if isinstance(event, TrainingEvent) and not any(e is event for e in training):
                training.append(event)
            if isinstance(event, OptimizerEvent) and \
                    not any(e is event for e in self.optimizer.events):
                self.optimizer.events.append(event)
                added.append(event)
        return training, added

    def _run_epoch(self, hooks: dict) -> None:
        epoch = self.epoch
        record = EpochStatistics(epoch, completed=False)
        self.epoch_stats = record
        self.stats.epochs.append(record)
        start = _clock()
        try:
            for hook in hooks["before_epoch"]:
                hook(self, epoch)
            try:
                self._train_epoch(record, hooks)
            except StopTraining:  # the optimizer still finishes its outstanding work
                record.optimizer_measurements = self.optimizer.end_epoch() or {}
                raise
            record.optimizer_measurements = self.optimizer.end_epoch() or {}
            record.completed = True
            if self.validation_sampler is not None:
                for hook in hooks["before_test_set"]:
                    hook(self, epoch)
                started = _clock()
                result = self.evaluate()
                record.validation_time = _clock() - started
                record.test_loss = result["loss"]
                record.test_accuracy = result["accuracy"]
                record.test_samples = result["samples"]
                for hook in hooks["after_test_set"]:
                    hook(self, epoch, record)
        finally:  # a stopped or failed epoch keeps what it measured
            record.wall_time = _clock() - start
            if record.steps == 0 and not record.completed:
                self.stats.epochs.pop()  # stopped before its first step: never ran
                self.epoch_stats = self.stats.final
            else:
                self.epoch = epoch + 1
        for hook in hooks["after_epoch"]:
            hook(self, epoch, record)

    def _train_epoch(self, record: EpochStatistics, hooks: dict) -> None:
        sampler = self.train_sampler
        if 0 < sampler.position < len(sampler):
            sampler.reset()  # an epoch left unfinished (stopped run): start a new one
        iterator = iter(sampler)
        before, after = hooks["before_training_step"], hooks["after_training_step"]
        step_function = self.optimizer.step
        loss_name, output_name = self.optimizer.loss, self.network_output
        input_node, label_node = sampler.dataset.input_node, sampler.dataset.label_node
        losses, times = record.step_losses, record.step_times
        step_correct, step_counted = record.step_correct, record.step_counted
        clock, count_nonzero = _clock, np.count_nonzero
        data_time = step_time = loss_sum = 0.0
        samples = correct = counted = 0
        try:
            while True:
                t0 = clock()
                try:
                    batch = next(iterator)
                except StopIteration:
                    data_time += clock() - t0
                    break
                t1 = clock()
                data_time += t1 - t0
                step = self.step
                for hook in before:
                    hook(self, step, batch)
                t2 = clock()
                outputs = step_function(batch)
                loss = float(np.asarray(outputs[loss_name]))  # waits for the device
                t3 = clock()
                step_time += t3 - t2
                self.step = step + 1
                n = len(batch[input_node])
                losses.append(loss)
                times.append(t3 - t2)
                loss_sum += loss * n
                samples += n
                logits = outputs.get(output_name)
                labels = batch.get(label_node) if label_node is not None else None
                if logits is not None and labels is not None:
                    if type(logits) is not np.ndarray:
                        logits = np.asarray(logits)
                    hits = int(count_nonzero(logits.argmax(1) == labels))
                    correct += hits
                    counted += labels.size
                    step_correct.append(hits)
                    step_counted.append(int(labels.size))
                else:
                    step_correct.append(0)
                    step_counted.append(0)
                for hook in after:
                    hook(self, step, batch, outputs)
        finally:
            record.steps = len(losses)
            record.samples = samples
            record.train_loss = loss_sum / samples if samples else None
            record.train_accuracy = int(correct) / counted if counted else None
            record.data_time = data_time
            record.step_time = step_time
            record.learning_rate = _number(getattr(self.optimizer, "learning_rate", None))

    def evaluate(self, sampler: Sampler | None = None) -> dict:
        """One full pass of ``executor.inference`` over ``sampler`` (by default the
        validation sampler): ``{"loss", "accuracy", "samples"}``, the loss averaged over
        samples (``None`` if the network has no loss output or the data no labels)."""
        sampler = self.validation_sampler if sampler is None else sampler
        if sampler is None:
            raise Deep500Error("Trainer.evaluate: no validation sampler to evaluate on")
        if 0 < sampler.position < len(sampler):
            sampler.reset()
        inference = self.executor.inference
        loss_name, output_name = self.optimizer.loss, self.network_output
        input_node, label_node = sampler.dataset.input_node, sampler.dataset.label_node
        loss_sum = 0.0
        samples = loss_samples = correct = counted = 0
        for batch in sampler:
            outputs = inference(batch)
            n = len(batch[input_node])
            samples += n
            loss = outputs.get(loss_name)
            if loss is not None:
                loss_sum += float(np.asarray(loss)) * n
                loss_samples += n
            logits = outputs.get(output_name)
            labels = batch.get(label_node) if label_node is not None else None
            if logits is not None and labels is not None:
                correct += int(np.count_nonzero(np.argmax(np.asarray(logits), axis=1)
                                                == labels))
                counted += labels.size
        return {"loss": loss_sum / loss_samples if loss_samples else None,
                "accuracy": correct / counted if counted else None, "samples": samples}

    # -- checkpoints -------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The trainer's position, optimizer and sampler states, the statistics, and the
        state of running events that have a ``state_dict`` (e.g. schedules)."""
        validation = self.validation_sampler
        return {"trainer": {"epoch": self.epoch, "step": self.step},
                "optimizer": self.optimizer.state_dict(),
                "train_sampler": self.train_sampler.state_dict(),
                "validation_sampler": None if validation is None else validation.state_dict(),
                "events": {key: event.state_dict()
                           for key, event in _stateful(self.running_events).items()},
                "statistics": self.stats.to_dict()}

    def save_checkpoint(self, path: str) -> str:
        """Save everything a resumed run needs to ``path`` (see
        :mod:`deep500.lv2_training.checkpoint`); returns the path."""
        return save_checkpoint(path, self.executor.network, self.state_dict())

    def load_checkpoint(self, path: str) -> None:
        """Restore parameters, optimizer, samplers, epoch, step and statistics from a
        checkpoint. Everything is checked before anything changes: a checkpoint of
        another model, optimizer or sampler raises Deep500Error and leaves the trainer
        as it was."""
        data = read_checkpoint(path)
        state = data.state
        missing = [k for k in ("trainer", "optimizer", "train_sampler", "statistics")
                   if not isinstance(state.get(k), dict)]
        if missing:
            raise Deep500Error(f"{path} is a network checkpoint without the training state "
                               f"{missing}; it was not saved by a Trainer")
        check_compatible(data, self.executor.network)
        _check_kind(path, "optimizer", state["optimizer"].get("optimizer"),
                    self.optimizer.name)
        _check_kind(path, "training sampler", state["train_sampler"].get("sampler"),
                    type(self.train_sampler).__name__)
        validation = state.get("validation_sampler")
        if validation is not None and self.validation_sampler is not None:
            _check_kind(path, "validation sampler", validation.get("sampler"),
                        type(self.validation_sampler).__name__)
        stats = TrainingStatistics.from_dict(state["statistics"])
        restore_network(data, self.executor.network)
        self.optimizer.load_state_dict(state["optimizer"])
        self.train_sampler.load_state_dict(state["train_sampler"])
        if validation is not None and self.validation_sampler is not None:
            self.validation_sampler.load_state_dict(validation)
        self.epoch = int(state["trainer"]["epoch"])
        self.step = int(state["trainer"]["step"])
        resumed = list(stats.conditions.get("resumed_from", []))
        stats.conditions = {**self.conditions(), "resumed_from": resumed + [str(path)]}
        self.stats = stats
        self.epoch_stats = stats.final
        self._event_states = dict(state.get("events") or {})

    def _restore_event_states(self) -> None:
        if not self._event_states:
            return
        for key, event in _stateful(self.running_events).items():
            if key in self._event_states and hasattr(event, "load_state_dict"):
                event.load_state_dict(self._event_states[key])
        self._event_states = {}

    def __repr__(self) -> str:
        return (f"Trainer({self.optimizer.name} on {self.executor.framework}:"
                f"{self.executor.network.name}, epoch {self.epoch}, step {self.step})")


def _hooks(events: list, name: str) -> list:
    """Bound hooks of the events that override ``name`` (no calls to empty ones)."""
    base = getattr(TrainingEvent, name)
    return [getattr(e, name) for e in events if getattr(type(e), name, base) is not base]


def _stateful(events: list) -> dict:
    """Events with a ``state_dict``, keyed ``ClassName#k`` (k-th of its class)."""
    keyed, seen = {}, {}
    for event in events:
        if callable(getattr(event, "state_dict", None)):
            name = type(event).__name__
            keyed[f"{name}#{seen.get(name, 0)}"] = event
            seen[name] = seen.get(name, 0) + 1
    return keyed


def _check_kind(path, what: str, saved, current: str) -> None:
    if saved is not None and saved != current:
        raise Deep500Error(f"Checkpoint {path} holds the state of a {saved} {what}, but "
                           f"this trainer's {what} is a {current}; resume with the same "
                           f"kind of {what}")


def _number(value) -> float | None:
    try:
        return float(value) if value is not None and np.ndim(value) == 0 else None
    except (TypeError, ValueError):
        return None


def _jsonable(values: dict) -> dict:
    """Hyper-parameters as JSON values (NumPy scalars as floats, others as repr)."""
    plain = {}
    for name, value in values.items():
        if value is None or isinstance(value, (str, bool, int, float)):
            plain[name] = value
        else:
            number = _number(value)
            plain[name] = number if number is not None else repr(value)
    return plain
