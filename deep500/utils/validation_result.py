"""The structured outcome of every level's validation functions."""
from __future__ import annotations

from dataclasses import dataclass, field

from deep500.utils.metric import MetricResult, to_jsonable


@dataclass
class TestResult:
    """What a validation function measured: metric results, conditions, a verdict.

    ``subject`` names what was tested (``"pytorch:Conv"``, a network name, ...);
    ``passed`` is None when the test only measures. ``outputs`` are kept in memory for
    the caller and not serialised.
    """
    __test__ = False  # not a pytest test class despite the name
    test: str
    subject: str
    conditions: dict
    metrics: list = field(default_factory=list)
    passed: bool | None = None
    details: dict = field(default_factory=dict)
    outputs: object = field(default=None, repr=False)

    @property
    def operator(self) -> str:
        """The subject of a level-0 test (an operator)."""
        return self.subject

    def __getitem__(self, metric_name: str) -> MetricResult:
        for result in self.metrics:
            if result.metric == metric_name:
                return result
        raise KeyError(f"No {metric_name} among {[m.metric for m in self.metrics]}")

    def to_dict(self) -> dict:
        return to_jsonable({"test": self.test, "subject": self.subject,
                            "conditions": self.conditions, "passed": self.passed,
                            "details": self.details,
                            "metrics": [m.to_dict() for m in self.metrics]})

    def __str__(self) -> str:
        status = {True: "PASSED", False: "FAILED", None: "measured"}[self.passed]
        lines = [f"{self.test} test of {self.subject}: {status}"]
        lines += [f"  {m}" for m in self.metrics]
        return "\n".join(lines)


OpTestResult = TestResult
