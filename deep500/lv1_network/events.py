"""Executor events: hooks that see inside a graph executor's run.

Executors call the per-operator hooks only when some event asks for them
(``wants_operator_events``), so a run without such events pays nothing for them.
"""
from __future__ import annotations


class ExecutorEvent:
    """Override the hooks you need. ``op`` is the executing ``OnnxOperation``."""
    wants_operator_events = False

    def before_executor(self, inputs: dict) -> None:
        pass

    def after_inference(self, outputs: dict) -> None:
        pass

    def after_backprop(self, outputs: dict) -> None:
        pass

    def before_operator(self, op) -> None:
        pass

    def after_operator(self, op) -> None:
        pass
