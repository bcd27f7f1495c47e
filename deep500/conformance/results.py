"""Conformance results: every case's outcome on every executor, the conditions of the
run, their counts and their JSON (the Markdown pages are views of them:
:mod:`deep500.conformance.markdown`)."""
from __future__ import annotations

import datetime
import json
import os
from dataclasses import asdict, dataclass, field

import onnx

from deep500.conformance.classify import FAILURE_CLASSES
from deep500.frameworks import registry

STATUSES = ("pass", "fail", "unsupported", "error")
WIDENED_NOTE = "passes within the ULPs granted to its dtype"


@dataclass
class CaseResult:
    """The outcome of one case on one executor; a case that does not pass has a failure
    class (:data:`deep500.conformance.classify.FAILURE_CLASSES`) and, when its values
    differ, the largest error in ULPs of the output's largest magnitude."""
    case: str
    executor: str
    status: str
    op_type: str
    message: str = ""
    seconds: float = 0.0
    failure_class: str = ""
    max_ulp: float | None = None


@dataclass
class ConformanceResults:
    """Every case's result on every executor, and the conditions of the run."""
    results: list[CaseResult]
    executors: list[str]
    skipped: dict[str, str] = field(default_factory=dict)
    command: str = ""
    cases: int = 0
    onnx_version: str = onnx.__version__
    date: str = field(default_factory=lambda: datetime.datetime.now(datetime.timezone.utc)
                      .strftime("%Y-%m-%d %H:%M UTC"))
    versions: dict = field(default_factory=lambda: _framework_versions())

    def of(self, executor: str) -> list[CaseResult]:
        return [r for r in self.results if r.executor == executor]

    def passing(self) -> dict[str, list[str]]:
        return {e: sorted(r.case for r in self.of(e) if r.status == "pass")
                for e in self.executors}

    def counts(self, executor: str) -> dict[str, int]:
        counts = dict.fromkeys(STATUSES, 0)
        for result in self.of(executor):
            counts[result.status] += 1
        return counts

    def class_counts(self, executor: str) -> dict[str, int]:
        """``{failure class: cases}`` of the executor's non-passing cases, in the order of
        FAILURE_CLASSES (every class listed, unknown ones after)."""
        counts = dict.fromkeys(FAILURE_CLASSES, 0)
        for result in self.of(executor):
            if result.status != "pass":
                key = result.failure_class or "unclassified"
                counts[key] = counts.get(key, 0) + 1
        return counts

    def widened(self, executor: str) -> list[str]:
        """The executor's cases that pass only within the ULPs granted to their dtype."""
        return [r.case for r in self.of(executor)
                if r.status == "pass" and WIDENED_NOTE in r.message]

    def to_dict(self) -> dict:
        return {"onnx_version": self.onnx_version, "date": self.date, "command": self.command,
                "cases": self.cases, "versions": self.versions, "skipped": self.skipped,
                "summary": {e: self.counts(e) for e in self.executors},
                "failure_classes": {e: self.class_counts(e) for e in self.executors},
                "executors": {e: {r.case: {k: v for k, v in asdict(r).items()
                                           if k not in ("case", "executor")}
                                  for r in self.of(e)} for e in self.executors}}

    def write_json(self, path: str) -> None:
        write_text(path, json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n")


def _framework_versions() -> dict:
    """The installed version of each registered framework's package (the pip package
    the registry names, else the module's own distribution or its -gpu build)."""
    from importlib import metadata
    versions = {}
    for framework in registry.FRAMEWORKS.values():
        key = framework.requires[0]
        distributions = dict.fromkeys((framework.pip, key, f"{key}-gpu"))
        for distribution in distributions:
            try:
                versions[key] = metadata.version(distribution)
                break
            except metadata.PackageNotFoundError:
                continue
    return versions


def write_text(path: str, text: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(text)
