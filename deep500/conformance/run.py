"""Running cases on executors: build the executor from the case's model, run each data
set, compare, and classify the case as pass, fail, unsupported or error, and a case that
does not pass by its failure class (:mod:`deep500.conformance.classify`). The executors
come from the framework registry."""
from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import onnx

from deep500.conformance.cases import ConformanceCase, copy_value
from deep500.conformance.classify import classify
from deep500.conformance.compare import Mismatch, compare_outputs
from deep500.conformance.results import WIDENED_NOTE, CaseResult, ConformanceResults
from deep500.frameworks import registry
from deep500.utils.errors import MissingDependencyError, UnsupportedError

EXECUTORS = tuple(registry.names())   # one executor per registered framework
DEFAULT_TIME_LIMIT = 20.0
_MESSAGE_CHARS = 600
ExecutorFactory = Callable[[onnx.ModelProto], Any]


def executor_factories(names: Iterable[str] = EXECUTORS
                       ) -> tuple[dict[str, ExecutorFactory], dict[str, str]]:
    """``{name: the registry's executor factory}`` for the executors (registered
    executor names, variants such as ``pytorch_compiled`` included) whose framework
    imports, and ``{name: why not}`` for those that do not. An unknown name is a
    Deep500Error listing the registered ones."""
    factories, skipped = {}, {}
    for name in names:
        framework = registry.framework_of(name)
        try:
            factories[name] = framework.executor_factory(name)
        except (ImportError, MissingDependencyError) as exc:
            skipped[name] = f"{framework.module} does not import: {exc}"
    return factories, skipped


@dataclass
class Outcome:
    """One case on one executor: its status and message, its failure class ('' when it
    passes) and, when values differ, the largest error in ULPs of the output's largest
    magnitude."""
    status: str
    message: str = ""
    failure_class: str = ""
    max_ulp: float | None = None


def run_case(case: ConformanceCase, factory: ExecutorFactory,
             time_limit: float = DEFAULT_TIME_LIMIT) -> Outcome:
    """The :class:`Outcome` of one case on the executor ``factory`` builds.

    The time limit is cooperative: once it has passed, the remaining data sets are
    skipped (a data set that hangs is not interrupted).
    """
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            executor = factory(case.model)
        except (UnsupportedError, NotImplementedError) as exc:
            return _failed(case, "unsupported", _message(exc))
        except Exception as exc:  # noqa: BLE001 - any crash is a result to record
            return _failed(case, "error", _message(exc))
        names = case.input_names
        notes, widened = [], []
        for index, (inputs, expected) in enumerate(case.data_sets):
            if index and time.perf_counter() - start > time_limit:
                notes.append(f"time limit of {time_limit:g} s: {index} of "
                             f"{len(case.data_sets)} data sets checked")
                break
            if len(inputs) != len(names):
                return Outcome("error", f"data set {index} has {len(inputs)} inputs for the "
                               f"graph's {len(names)} inputs {names}", "harness")
            fed = dict(zip(names, inputs))
            try:
                # copies: an executor that writes into its inputs must not change the case
                outputs = executor.inference(dict(zip(names, copy_value(inputs))))
            except (UnsupportedError, NotImplementedError) as exc:
                return _failed(case, "unsupported", "when run: " + _message(exc), fed)
            except Exception as exc:  # noqa: BLE001
                return _failed(case, "error", _message(exc), fed)
            try:
                widened += compare_outputs(expected, outputs, case.output_names,
                                           case.tolerance)
            except Mismatch as exc:
                return _failed(case, "fail", _message(exc, with_type=False), fed, exc)
            except Exception as exc:  # noqa: BLE001 - e.g. an output of a strange type
                return _failed(case, "error", "comparing outputs: " + _message(exc), fed)
    if widened:
        names = ", ".join(repr(name) for name in dict.fromkeys(widened))
        notes.append(f"{WIDENED_NOTE} ({names}; ONNX's fixed rtol={case.rtol:g} alone "
                     f"fails it)")
    return Outcome("pass", "; ".join(notes))


def _failed(case: ConformanceCase, status: str, message: str, values: dict | None = None,
            mismatch: Mismatch | None = None) -> Outcome:
    return Outcome(status, message, classify(case, status, message, mismatch, values),
                   mismatch.max_ulp if mismatch is not None else None)


def _message(exc: BaseException, with_type: bool = True) -> str:
    text = " ".join(str(exc).split()) or repr(exc)
    if with_type:
        text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= _MESSAGE_CHARS else text[:_MESSAGE_CHARS - 3] + "..."


def run_conformance(cases: list[ConformanceCase], factories: dict[str, ExecutorFactory],
                    time_limit: float = DEFAULT_TIME_LIMIT, progress: bool = True,
                    skipped: dict[str, str] | None = None, command: str = ""
                    ) -> "ConformanceResults":
    """Run every case on every executor, with a progress bar on stderr."""
    from tqdm import tqdm
    results = []
    with tqdm(total=len(cases) * len(factories), file=sys.stderr, disable=not progress,
              unit="case", dynamic_ncols=True) as bar:
        for executor, factory in factories.items():
            ran = []
            for case in cases:
                bar.set_postfix_str(f"{executor} {case.name}", refresh=False)
                start = time.perf_counter()
                outcome = run_case(case, factory, time_limit)
                ran.append(CaseResult(
                    case.name, executor, outcome.status, case.op_type, outcome.message,
                    round(time.perf_counter() - start, 4), outcome.failure_class,
                    outcome.max_ulp))
                bar.update()
            results += _reclassify_declines(cases, ran)
    return ConformanceResults(results, executors=list(factories), skipped=dict(skipped or {}),
                              command=command, cases=len(cases))


def _reclassify_declines(cases: list[ConformanceCase], ran: list[CaseResult]
                         ) -> list[CaseResult]:
    """Classify the declines again, knowing which operators the executor passes a case of
    (a kernel missing for a rare element type, or the operator missing altogether)."""
    passing = {case.op_type for case, result in zip(cases, ran) if result.status == "pass"}
    for case, result in zip(cases, ran):
        if result.status == "unsupported":
            result.failure_class = classify(case, result.status, result.message,
                                            operator_passes=case.op_type in passing)
    return ran
