"""``TrajectoryDivergence`` as a recipe metric: how far a configuration's optimizer
drifts from the reference optimizer of the same type, trained from the same weights on
the same minibatches (Fig. 11 of the Deep500 paper; see
:func:`deep500.lv2_training.trajectory.trajectory_divergence`)."""
from __future__ import annotations

import json
import os

from deep500.lv2_training.trajectory import trajectory_divergence
from deep500.utils.errors import Deep500Error
from deep500.utils.metric import MetricResult, TestMetric, to_jsonable
from deep500.utils.storage_errors import storage_errors_named


class TrajectoryDivergenceMetric(TestMetric):
    """Runs ``steps`` steps of two optimizers side by side and summarises the
    divergence of ``b`` from ``a`` (the primary value is the largest relative L2
    distance ‖w_a − w_b‖₂ / ‖w_a‖₂ over the steps). The samples are one entry per step;
    with ``path`` the whole per-parameter record is also written there as JSON."""

    fields = ("steps", "max_total_l2", "max_total_linf", "max_relative_l2",
              "final_total_l2", "final_loss_a", "final_loss_b")  # the summary's keys

    def __init__(self, steps: int = 40, path: str | None = None):
        if not isinstance(steps, int) or steps < 1:
            raise Deep500Error(f"TrajectoryDivergence: steps must be a positive integer, "
                               f"got {steps!r}")
        self.steps = steps
        self.path = path

    @property
    def name(self) -> str:
        return "TrajectoryDivergence"

    def compare(self, optimizer_a, optimizer_b, batches) -> MetricResult:
        result = trajectory_divergence(optimizer_a, optimizer_b, batches, self.steps)
        if self.path:
            with storage_errors_named(self.path):
                os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
                with open(self.path, "w", encoding="utf-8") as handle:
                    json.dump(result.to_dict(), handle)
        samples = [{"step": s, "relative_l2": r, "total_l2": l2, "total_linf": linf,
                    "loss_a": la, "loss_b": lb}
                   for s, r, l2, linf, la, lb in zip(result.steps, result.relative_l2,
                                                      result.total_l2, result.total_linf,
                                                      result.loss_a, result.loss_b)]
        return MetricResult(self.name, to_jsonable(result.summary()), "max_relative_l2",
                            None, samples,
                            {"a": result.label_a, "b": result.label_b,
                             **to_jsonable(result.conditions)})

    def measure(self, inputs=None, outputs=None, reference_outputs=None) -> MetricResult:
        raise Deep500Error("TrajectoryDivergence compares two optimizers: call "
                           "compare(optimizer_a, optimizer_b, batches)")
