"""``StepTimePrediction``: how far a predicted training-step time is from the one
measured, as the ratio predicted / measured and the relative error
|predicted / measured − 1| (the absolute relative error Catalán's thesis and PyDTNN
report for their simulators; ``benchmarks/lv3_simulator.py`` prints its median).

The metric judges comparisons made elsewhere (``deep500.recipe.experiments.models``
predicts with ``d5.simulate_training`` and measures by training): ``compare(rows)``
takes one row per rank count, ``{"ranks", "predicted_s", "measured_s"}``, and
summarises

* at the largest rank count compared (``ranks``): ``predicted_s``, ``measured_s``,
  ``ratio``, ``error``;
* at one rank, where nothing is communicated (the prediction is then compute and
  update only, the part of the model that does not depend on the network):
  ``one_rank_predicted_s``, ``one_rank_measured_s``, ``one_rank_ratio``,
  ``one_rank_error``.

``error`` is the headline value, so a recipe threshold ``StepTimePrediction <= 0.5``
judges it; ``StepTimePrediction.one_rank_error <= 0.25`` judges the 1-rank one.
"""
from __future__ import annotations

import math

from deep500.utils.errors import Deep500Error
from deep500.utils.metric import MetricResult, TestMetric


def relative_error(predicted: float, measured: float) -> float:
    """|predicted / measured − 1|."""
    return abs(predicted / measured - 1.0)


class StepTimePrediction(TestMetric):
    """Predicted against measured step time (see the module docstring)."""

    fields = ("ranks", "predicted_s", "measured_s", "ratio", "error",
              "one_rank_predicted_s", "one_rank_measured_s", "one_rank_ratio",
              "one_rank_error")  # the summary's keys

    def compare(self, rows: list[dict]) -> MetricResult:
        """The summary of ``rows`` (one per rank count; see the module docstring)."""
        checked = []
        for row in rows:
            predicted, measured = row.get("predicted_s"), row.get("measured_s")
            for name, value in (("predicted_s", predicted), ("measured_s", measured)):
                if not isinstance(value, (int, float)) or not math.isfinite(value) \
                        or value <= 0:
                    raise Deep500Error(f"StepTimePrediction: {name} at {row.get('ranks')} "
                                       f"rank(s) is {value!r}; a step time is a positive "
                                       f"number of seconds")
            checked.append({"ranks": int(row["ranks"]), "predicted_s": float(predicted),
                            "measured_s": float(measured),
                            "ratio": float(predicted) / float(measured),
                            "error": relative_error(predicted, measured)})
        if not checked:
            raise Deep500Error("StepTimePrediction: nothing to compare (no rank count was "
                               "both predicted and measured)")
        checked.sort(key=lambda r: r["ranks"])
        top = checked[-1]
        one = next((r for r in checked if r["ranks"] == 1), None)
        summary = {"ranks": top["ranks"], "predicted_s": top["predicted_s"],
                   "measured_s": top["measured_s"], "ratio": top["ratio"],
                   "error": top["error"]}
        for key in ("predicted_s", "measured_s", "ratio", "error"):
            summary[f"one_rank_{key}"] = None if one is None else one[key]
        return MetricResult(self.name, summary, "error", None, checked,
                            conditions={"error": "|predicted / measured - 1|"})

    def measure(self, inputs=None, outputs=None, reference_outputs=None) -> MetricResult:
        return self.compare(inputs or [])
