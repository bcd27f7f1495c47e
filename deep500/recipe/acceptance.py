"""Acceptance thresholds: ``"<Metric>[.<field>] <= <number>"`` or ``>=``.

The direction is part of every threshold, so "lower is better" (errors, times) and
"higher is better" (GFLOP/s, accuracy) are both explicit.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

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
        """{"threshold", "value", "passed"} for the first result of this metric, or
        None when the measurement has no such metric (the threshold does not apply)."""
        for result in metric_results:
            if result.metric != self.metric:
                continue
            value = result.get(self.field)
            if value is None:
                return {"threshold": self.text, "value": None, "passed": False}
            passed = value <= self.value if self.direction == "<=" else value >= self.value
            return {"threshold": self.text, "value": value, "passed": bool(passed)}
        return None


def parse_threshold(text, where: str, metric_names) -> Threshold:
    if not isinstance(text, str):
        raise RecipeError(f"{where}: a threshold is a string like 'L2Error.relative <= 1e-4', "
                          f"got {text!r}")
    match = _PATTERN.match(text)
    if not match:
        raise RecipeError(f"{where}: cannot read {text!r}; write '<Metric>[.<field>] <= "
                          f"<number>' or with '>=' (the direction is required)")
    metric, field, direction, number = match.groups()
    if metric not in metric_names:
        raise RecipeError(f"{where}: {text!r} names metric {metric!r}, which the recipe "
                          f"does not measure (its metrics: {sorted(metric_names)})")
    try:
        value = float(number)
    except ValueError:
        raise RecipeError(f"{where}: {number!r} in {text!r} is not a number") from None
    return Threshold(metric, field, direction, value)
