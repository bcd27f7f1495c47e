"""Acceptance thresholds: ``"<Metric>[.<field>] <= <number>"`` or ``>=``.

The direction is part of every threshold, so "lower is better" (errors, times) and
"higher is better" (GFLOP/s, accuracy) are both explicit. When the recipe is loaded, a
field is checked against the fields the metric declares (``fields`` on the metric
class); when a measurement is judged, a field that is missing or not a number fails the
threshold with a note, and the measurement is kept.
"""
from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass

from deep500.recipe.problems import show
from deep500.utils.errors import RecipeError

_PATTERN = re.compile(r"^\s*([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?\s*(<=|>=)\s*(\S+)\s*$")


@dataclass(frozen=True)
class Threshold:
    metric: str
    field: str | None
    direction: str
    value: float

    @property
    def text(self) -> str:
        name = self.metric + (f".{self.field}" if self.field else "")
        return f"{name} {self.direction} {self.value:g}"

    def check(self, metric_results) -> dict | None:
        """``{"threshold", "value", "passed"}`` (and ``"error"`` when the value cannot be
        judged) for the first result of this metric, or None when the measurement has
        no such metric (the threshold does not apply). Never raises: a threshold that
        cannot be judged fails, and the measurement it judges is kept."""
        for result in metric_results:
            if getattr(result, "metric", None) != self.metric:
                continue
            summary = getattr(result, "summary", None) or {}
            key = self.field or getattr(result, "primary", None)
            if key not in summary:
                return {"threshold": self.text, "value": None, "passed": False,
                        "error": f"{self.metric} has no field {key!r}; it has "
                                 f"{sorted(map(str, summary))}"}
            value = summary[key]
            if value is None:
                return {"threshold": self.text, "value": None, "passed": False}
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                return {"threshold": self.text, "value": None, "passed": False,
                        "error": f"{self.metric}.{key} is {show(value)}, not a number"}
            value = float(value)
            if math.isnan(value):
                return {"threshold": self.text, "value": value, "passed": False,
                        "error": f"{self.metric}.{key} is NaN"}
            passed = value <= self.value if self.direction == "<=" else value >= self.value
            return {"threshold": self.text, "value": value, "passed": bool(passed)}
        return None


def parse_threshold(text, where: str, metric_names) -> Threshold:
    """The threshold written as ``text`` at key path ``where``; ``metric_names`` are the
    metrics the recipe measures (None: not known, any metric is taken)."""
    if not isinstance(text, str):
        raise RecipeError(f"{where}: a threshold is a string like 'L2Error.relative <= 1e-4', "
                          f"got {show(text)}")
    match = _PATTERN.match(text)
    if not match:
        raise RecipeError(f"{where}: cannot read {show(text)}; write '<Metric>[.<field>] <= "
                          f"<number>' or with '>=' (the direction is required)")
    metric, field, direction, number = match.groups()
    if metric_names is not None and metric not in metric_names:
        raise RecipeError(f"{where}: {text!r} names metric {metric!r}, which the recipe "
                          f"does not measure (its metrics: {sorted(metric_names)})")
    try:
        value = float(number)
    except ValueError:
        raise RecipeError(f"{where}: {number!r} in {text!r} is not a number") from None
    if math.isnan(value):
        raise RecipeError(f"{where}: {text!r} compares with NaN, which nothing passes")
    if field is not None:
        from deep500.recipe.components import metric_fields
        fields = metric_fields(metric)
        if fields is not None and field not in fields:
            raise RecipeError(f"{where}: {text!r}: {metric} has no field {field!r}; it "
                              f"has {sorted(fields)} (without a field, the threshold "
                              f"judges its main one)")
    return Threshold(metric, field, direction, value)
