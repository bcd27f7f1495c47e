"""Measured seconds per ONNX node, the weights a balanced pipeline split evens out.

Each node's forward plus backward seconds, the median over ``reruns`` runs of
``inference_and_backprop`` after ``warmup`` runs, from the Level-1
:class:`~deep500.lv1_network.metrics.OperatorTimes` event (forward bracketed per
operator; backward as the executor reports it per node).
"""
from __future__ import annotations

import numpy as np

from deep500.lv1_network.layer_profile import timed_backprop_runs


def measure_node_seconds(executor, node_names, inputs: dict, loss: str = "loss",
                         reruns: int = 5, warmup: int = 2) -> list:
    """Forward + backward seconds of each node of ``node_names`` (graph order) on
    ``executor`` (built from the same model) for the minibatch ``inputs``; a node the
    executor did not report (folded into another) counts zero."""
    times = timed_backprop_runs(executor, inputs, loss, reruns, warmup)

    def median(runs, name):
        return float(np.median([r.get(name, 0.0) for r in runs])) if runs else 0.0
    return [median(times.runs, n) + median(times.backward_runs, n) for n in node_names]
