"""ONNX conformance: Deep500's graph executors against ONNX's node test suite.

The installed ``onnx`` package carries a test case per operator behaviour
(``onnx.backend.test``, kind ``node``): a small model (usually one node), inputs and the
outputs the ONNX reference computes. Recent onnx versions build the cases in memory
(``TestCase.model`` and ``TestCase.data_sets``); older ones store them as folders holding
``model.onnx`` and ``test_data_set_N/{input,output}_M.pb``. Both are read here.

Each case is run on each executor: the executor is built from the case's model, run on
the case's inputs (keyed by the graph's input names), and every output is compared with
the expected one as ONNX's backend test runner does (``numpy.testing.assert_allclose``,
rtol=1e-3, atol=1e-7, NaN where NaN is expected; integer, boolean and string outputs
exactly). A case is

* **pass** — every output matches;
* **fail** — an output has wrong values, shape or dtype (a floating result is first
  converted to the expected floating dtype);
* **unsupported** — the executor declines the model (``UnsupportedError`` or
  ``NotImplementedError``, when built or when run);
* **error** — any other exception (its message is kept).

``deep500 conformance`` runs the suite, writes every result as JSON, a Markdown table
(``docs/conformance.md``) and the locked passing set
(``tests/lv1_network/conformance_passing.json``) that the test suite re-runs, so that a
case that passed once must keep passing.

This is the runner side of level 1 (like recipes and reports): the executors come from
the framework registry (:mod:`deep500.frameworks.registry`); level 1 itself knows no
framework.
"""
from __future__ import annotations

import datetime
import functools
import glob
import json
import os
import re
import sys
import time
import warnings
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import onnx
import onnx.numpy_helper

from deep500.frameworks import registry
from deep500.utils.errors import Deep500Error, MissingDependencyError, UnsupportedError

EXECUTORS = tuple(registry.names())   # one executor per registered framework
STATUSES = ("pass", "fail", "unsupported", "error")
DEFAULT_RTOL = 1e-3   # ONNX's backend test runner defaults
DEFAULT_ATOL = 1e-7
DEFAULT_TIME_LIMIT = 20.0
_MESSAGE_CHARS = 600
_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


@dataclass
class ConformanceCase:
    """One ONNX node test: a model and ``(inputs, expected outputs)`` data sets, both
    lists in the order of the graph's (fed) inputs and outputs."""
    name: str
    model: onnx.ModelProto
    data_sets: list = field(default_factory=list)
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    op_type: str = ""

    @property
    def input_names(self) -> list[str]:
        stored = {t.name for t in self.model.graph.initializer}
        return [i.name for i in self.model.graph.input if i.name not in stored]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.model.graph.output]


# -- loading ----------------------------------------------------------------------------
def load_cases(pattern: str | None = None, test_cases: Iterable | None = None
               ) -> list[ConformanceCase]:
    """The node test cases of the installed onnx (or ``test_cases``, objects shaped like
    ``onnx.backend.test.case.test_case.TestCase``) whose names match the regular
    expression ``pattern`` (``re.search``), sorted by name."""
    if test_cases is None:
        test_cases = installed_node_tests()
    regex = re.compile(pattern) if pattern else None
    cases = [case_from_test_case(tc) for tc in test_cases
             if regex is None or regex.search(tc.name)]
    _assign_op_types(cases)
    return sorted(cases, key=lambda c: c.name)


@functools.lru_cache(maxsize=1)
def installed_node_tests() -> tuple:
    """The installed onnx's node ``TestCase`` objects (loaded once per process: building
    them computes every expected output)."""
    from onnx.backend.test.loader import load_model_tests
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # some cases overflow on purpose while computing their expected outputs
        warnings.simplefilter("ignore")
        return tuple(load_model_tests(kind="node"))


def case_from_test_case(test_case) -> ConformanceCase:
    """A :class:`ConformanceCase` from an onnx ``TestCase``: in memory when it carries
    its model, else read from its ``model_dir``."""
    rtol = getattr(test_case, "rtol", DEFAULT_RTOL)
    atol = getattr(test_case, "atol", DEFAULT_ATOL)
    model_dir = getattr(test_case, "model_dir", None)
    if getattr(test_case, "model", None) is None:
        if not model_dir:
            raise Deep500Error(f"ONNX test case {test_case.name!r} has neither a model nor "
                               f"a model_dir (a model-zoo case that needs a download?)")
        return case_from_directory(model_dir, name=test_case.name, rtol=rtol, atol=atol)
    data_sets = [([_normalize(v) for v in inputs], [_normalize(v) for v in outputs])
                 for inputs, outputs in (test_case.data_sets or [])]
    return ConformanceCase(test_case.name, test_case.model, data_sets, rtol, atol)


def case_from_directory(path: str, name: str | None = None, rtol: float = DEFAULT_RTOL,
                        atol: float = DEFAULT_ATOL) -> ConformanceCase:
    """A case stored as ONNX's backend tests store it: ``path/model.onnx`` and
    ``path/test_data_set_N/input_M.pb``, ``output_M.pb`` (serialized TensorProto,
    SequenceProto or OptionalProto, by the graph's input and output types)."""
    model_path = os.path.join(path, "model.onnx")
    if not os.path.isfile(model_path):
        raise Deep500Error(f"{path} is not an ONNX test case folder: it has no model.onnx")
    model = onnx.load(model_path)
    settings_path = os.path.join(path, "data.json")
    if os.path.isfile(settings_path):
        with open(settings_path, encoding="utf-8") as settings:
            data = json.load(settings)
        rtol, atol = data.get("rtol", rtol), data.get("atol", atol)
    stored = {t.name for t in model.graph.initializer}
    input_types = [i.type for i in model.graph.input if i.name not in stored]
    output_types = [o.type for o in model.graph.output]
    data_sets = []
    for folder in sorted(glob.glob(os.path.join(path, "test_data_set_*")),
                         key=lambda p: int(re.sub(r"\D", "", os.path.basename(p)) or 0)):
        inputs = _read_values(folder, "input", input_types)
        outputs = _read_values(folder, "output", output_types)
        data_sets.append((inputs, outputs))
    case_name = name or os.path.basename(os.path.normpath(path))
    return ConformanceCase(case_name, model, data_sets, rtol, atol)


def cases_from_directory(root: str, pattern: str | None = None) -> list[ConformanceCase]:
    """Every case folder under ``root`` (as in ``onnx/backend/test/data/node``)."""
    regex = re.compile(pattern) if pattern else None
    cases = [case_from_directory(os.path.dirname(p))
             for p in sorted(glob.glob(os.path.join(root, "*", "model.onnx")))
             if regex is None or regex.search(os.path.basename(os.path.dirname(p)))]
    _assign_op_types(cases)
    return cases


def _read_values(folder: str, kind: str, types: list) -> list:
    count = len(glob.glob(os.path.join(folder, f"{kind}_*.pb")))
    values = []
    for index in range(count):
        with open(os.path.join(folder, f"{kind}_{index}.pb"), "rb") as stream:
            content = stream.read()
        type_proto = types[index] if index < len(types) else None
        if type_proto is not None and type_proto.HasField("sequence_type"):
            proto = onnx.SequenceProto()
            proto.ParseFromString(content)
            values.append(_normalize(onnx.numpy_helper.to_list(proto)))
        elif type_proto is not None and type_proto.HasField("optional_type"):
            proto = onnx.OptionalProto()
            proto.ParseFromString(content)
            values.append(_normalize(onnx.numpy_helper.to_optional(proto)))
        else:
            proto = onnx.TensorProto()
            proto.ParseFromString(content)
            values.append(onnx.numpy_helper.to_array(proto))
    return values


def _normalize(value):
    """Test data as executors take it: arrays, lists of arrays (sequences), None (an
    empty optional)."""
    if value is None:
        return None
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, (list, tuple)):
        return [_normalize(v) for v in value]
    return np.asarray(value)


def _copy(value):
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value.copy() if isinstance(value, np.ndarray) else value


def _assign_op_types(cases: list[ConformanceCase]) -> None:
    """The operator each case tests: ``test_<op>_...`` matched against the model's node
    types (then against every ONNX operator name). An ``_expanded`` case (the operator's
    function body) tests the operator of its unexpanded twin."""
    for case in cases:
        case.op_type = tested_operator(case.name, case.model)
    by_name = {c.name: c.op_type for c in cases}
    for case in cases:
        twin = _EXPANDED.sub("", case.name)
        if twin != case.name and twin in by_name:
            case.op_type = by_name[twin]


def tested_operator(name: str, model: onnx.ModelProto) -> str:
    """The ONNX operator a test named ``test_<op>_<variant>`` exercises."""
    node_types = list(dict.fromkeys(n.op_type for n in model.graph.node))
    if len(node_types) == 1:
        return node_types[0]
    key = re.sub(r"^test_", "", name).replace("_", "").lower()
    for candidates in (node_types, _schema_names()):
        matches = [c for c in candidates if key.startswith(c.lower())]
        if matches:
            return max(matches, key=len)
    return node_types[0] if node_types else "?"


_SCHEMA_NAMES: list[str] = []


def _schema_names() -> list[str]:
    if not _SCHEMA_NAMES:
        _SCHEMA_NAMES.extend(sorted({s.name for s in onnx.defs.get_all_schemas()}))
    return _SCHEMA_NAMES


# -- comparing --------------------------------------------------------------------------
def compare_outputs(expected: list, outputs: dict, names: list[str], rtol: float = DEFAULT_RTOL,
                    atol: float = DEFAULT_ATOL) -> None:
    """Raise ``AssertionError`` unless ``outputs[names[i]]`` matches ``expected[i]``."""
    if len(expected) != len(names):
        raise AssertionError(f"the test has {len(expected)} expected outputs for the "
                             f"graph's {len(names)} outputs {names}")
    for name, value in zip(names, expected):
        if name not in outputs:
            raise AssertionError(f"no output {name!r} (returned: {sorted(outputs)})")
        assert_similar(value, outputs[name], rtol, atol, where=f"output {name!r}")


def assert_similar(expected, actual, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
                   where: str = "output") -> None:
    """Compare one value (a tensor, a sequence of tensors, or None) with its expected
    value."""
    if expected is None:
        if actual is not None:
            raise AssertionError(f"{where}: expected an empty optional, got "
                                 f"{type(actual).__name__}")
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)):
            raise AssertionError(f"{where}: expected a sequence of {len(expected)} tensors, "
                                 f"got {type(actual).__name__}")
        if len(actual) != len(expected):
            raise AssertionError(f"{where}: expected a sequence of {len(expected)} tensors, "
                                 f"got {len(actual)}")
        for index, (e, a) in enumerate(zip(expected, actual)):
            assert_similar(e, a, rtol, atol, where=f"{where}[{index}]")
        return
    if actual is None or isinstance(actual, (list, tuple)):
        raise AssertionError(f"{where}: expected a tensor, got {type(actual).__name__}")
    expected, actual = np.asarray(expected), np.asarray(actual)
    if actual.shape != expected.shape:
        raise AssertionError(f"{where}: shape {list(actual.shape)}, expected "
                             f"{list(expected.shape)}")
    if expected.dtype == object or expected.dtype.kind in "SU":
        np.testing.assert_array_equal(actual.astype(object), expected, err_msg=where)
        return
    if _is_float(expected.dtype) and _is_float(actual.dtype):
        actual = actual.astype(expected.dtype)
    if actual.dtype != expected.dtype:
        raise AssertionError(f"{where}: dtype {actual.dtype}, expected {expected.dtype}")
    if _is_ml_dtype(expected.dtype):
        # ml_dtypes (bfloat16, float8, int4, ...) do not promote with Python numbers
        wide = np.float32 if _is_float(expected.dtype) else np.int64
        expected, actual = expected.astype(wide), actual.astype(wide)
        if expected.dtype.name == "bfloat16":
            rtol = max(rtol, 2 ** -6)
    if np.issubdtype(expected.dtype, np.inexact):
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=where)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=where)


def _is_ml_dtype(dtype: np.dtype) -> bool:
    return dtype.type.__module__.startswith("ml_dtypes")


def _is_float(dtype: np.dtype) -> bool:
    return np.issubdtype(dtype, np.floating) or (
        _is_ml_dtype(dtype) and dtype.name.startswith(("bfloat", "float")))


# -- running ----------------------------------------------------------------------------
ExecutorFactory = Callable[[onnx.ModelProto], Any]


@dataclass
class CaseResult:
    """The outcome of one case on one executor."""
    case: str
    executor: str
    status: str
    op_type: str
    message: str = ""
    seconds: float = 0.0


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


def run_case(case: ConformanceCase, factory: ExecutorFactory,
             time_limit: float = DEFAULT_TIME_LIMIT) -> tuple[str, str]:
    """``(status, message)`` of one case on the executor ``factory`` builds.

    The time limit is cooperative: once it has passed, the remaining data sets are
    skipped (a data set that hangs is not interrupted).
    """
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            executor = factory(case.model)
        except (UnsupportedError, NotImplementedError) as exc:
            return "unsupported", _message(exc)
        except Exception as exc:  # noqa: BLE001 - any crash is a result to record
            return "error", _message(exc)
        names = case.input_names
        note = ""
        for index, (inputs, expected) in enumerate(case.data_sets):
            if index and time.perf_counter() - start > time_limit:
                note = (f"time limit of {time_limit:g} s: {index} of {len(case.data_sets)} "
                        f"data sets checked")
                break
            if len(inputs) != len(names):
                return "error", (f"data set {index} has {len(inputs)} inputs for the "
                                 f"graph's {len(names)} inputs {names}")
            try:
                # copies: an executor that writes into its inputs must not change the case
                outputs = executor.inference(dict(zip(names, _copy(inputs))))
            except (UnsupportedError, NotImplementedError) as exc:
                return "unsupported", "when run: " + _message(exc)
            except Exception as exc:  # noqa: BLE001
                return "error", _message(exc)
            try:
                compare_outputs(expected, outputs, case.output_names, case.rtol, case.atol)
            except AssertionError as exc:
                return "fail", _message(exc, with_type=False)
            except Exception as exc:  # noqa: BLE001 - e.g. an output of a strange type
                return "error", "comparing outputs: " + _message(exc)
    return "pass", note


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
            for case in cases:
                bar.set_postfix_str(f"{executor} {case.name}", refresh=False)
                start = time.perf_counter()
                status, message = run_case(case, factory, time_limit)
                results.append(CaseResult(case.name, executor, status, case.op_type, message,
                                          round(time.perf_counter() - start, 4)))
                bar.update()
    return ConformanceResults(results, executors=list(factories), skipped=dict(skipped or {}),
                              command=command, cases=len(cases))


# -- results ----------------------------------------------------------------------------
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

    def to_dict(self) -> dict:
        return {"onnx_version": self.onnx_version, "date": self.date, "command": self.command,
                "cases": self.cases, "versions": self.versions, "skipped": self.skipped,
                "summary": {e: self.counts(e) for e in self.executors},
                "executors": {e: {r.case: {k: v for k, v in asdict(r).items()
                                           if k not in ("case", "executor")}
                                  for r in self.of(e)} for e in self.executors}}

    def write_json(self, path: str) -> None:
        _write(path, json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n")

    def markdown(self) -> str:
        """The summary and per-operator tables, with how they were generated."""
        lines = ["# ONNX conformance of Deep500's executors", "",
                 f"Generated by `{self.command or 'deep500 conformance'}` on {self.date} "
                 f"from the {self.cases} node test cases of onnx {self.onnx_version} "
                 f"(`onnx.backend.test`, kind `node`). Versions: "
                 + ", ".join(f"{k} {v}" for k, v in self.versions.items() if v) + ".", "",
                 "Each case builds the executor from the test's model, runs the test's "
                 "inputs and compares every output with ONNX's expected one "
                 "(`numpy.testing.assert_allclose`, rtol=1e-3, atol=1e-7, NaN where NaN is "
                 "expected; integer, boolean and string outputs exactly). **fail**: wrong "
                 "values, shape or dtype; **unsupported**: the executor declines the model "
                 "(`UnsupportedError` or `NotImplementedError`); **error**: any other "
                 "exception. Messages are in the JSON results.", ""]
        for name, why in self.skipped.items():
            lines.append(f"Not run: **{name}** ({why}).")
        if self.skipped:
            lines.append("")
        lines += ["## Summary", "",
                  "| executor | pass | fail | unsupported | error | total | pass % |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for executor in self.executors:
            counts = self.counts(executor)
            total = sum(counts.values())
            share = 100.0 * counts["pass"] / total if total else 0.0
            lines.append(f"| {executor} | " + " | ".join(str(counts[s]) for s in STATUSES)
                         + f" | {total} | {share:.1f} |")
        lines += ["", "## By operator", "",
                  "Cases passed / cases of the operator (expanded function bodies count "
                  "for their operator).", "",
                  "| operator | " + " | ".join(self.executors) + " |",
                  "|---|" + "---:|" * len(self.executors)]
        table: dict[str, dict[str, list[int]]] = defaultdict(
            lambda: defaultdict(lambda: [0, 0]))
        for result in self.results:
            cell = table[result.op_type][result.executor]
            cell[0] += result.status == "pass"
            cell[1] += 1
        for op_type in sorted(table, key=str.lower):
            cells = [f"{table[op_type][e][0]}/{table[op_type][e][1]}" for e in self.executors]
            lines.append(f"| {op_type} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def write_markdown(self, path: str) -> None:
        _write(path, self.markdown())


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


def _write(path: str, text: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(text)


# -- the locked passing set ---------------------------------------------------------------
def read_locked(path: str) -> dict[str, list[str]]:
    """``{executor: [case names that must pass]}``; empty when the file does not exist."""
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as stream:
        return json.load(stream)


def update_locked(path: str, results: ConformanceResults, replace: bool = False
                  ) -> dict[str, list[str]]:
    """Add this run's passing cases to the locked set in ``path``; returns the
    regressions: ``{executor: [locked cases this run ran and did not pass]}``.

    Locked cases stay locked unless ``replace``, which makes the run's outcome the new
    truth for the cases it ran (cases it did not run keep their state).
    """
    locked = read_locked(path)
    regressions = {}
    for executor in results.executors:
        ran = {r.case: r.status for r in results.of(executor)}
        previous = set(locked.get(executor, []))
        passing = {case for case, status in ran.items() if status == "pass"}
        regressions[executor] = sorted(c for c in previous if c in ran and c not in passing)
        keep = previous - set(ran) if replace else previous
        locked[executor] = sorted(keep | passing)
    _write(path, json.dumps(dict(sorted(locked.items())), indent=1) + "\n")
    return {e: cases for e, cases in regressions.items() if cases}


# -- the command ------------------------------------------------------------------------
def conformance_command(executors: Iterable[str] = EXECUTORS, out: str | None = None,
                        json_path: str | None = None, results_path: str | None = None,
                        pattern: str | None = None, time_limit: float = DEFAULT_TIME_LIMIT,
                        replace: bool = False, progress: bool = True, command: str = ""
                        ) -> int:
    """``deep500 conformance``: run, write the outputs, print a summary. Exit status 0,
    or 1 when a locked case no longer passes."""
    factories, skipped = executor_factories(executors)
    for name, why in skipped.items():
        print(f"deep500 conformance: skipping {name}: {why}", file=sys.stderr)
    if not factories:
        raise Deep500Error(f"None of the executors {list(executors)} can be imported; "
                           f"nothing to run")
    cases = load_cases(pattern)
    if not cases:
        raise Deep500Error(f"No ONNX node test case matches the pattern {pattern!r}")
    results = run_conformance(cases, factories, time_limit=time_limit, progress=progress,
                              skipped=skipped, command=command)
    for executor in results.executors:
        counts = results.counts(executor)
        total = sum(counts.values())
        print(f"{executor:<12} " + "  ".join(f"{s} {counts[s]:>4}" for s in STATUSES)
              + f"  ({100.0 * counts['pass'] / total:.1f}% of {total})")
    if results_path:
        results.write_json(results_path)
        print(f"Results:  {results_path}")
    if out:
        results.write_markdown(out)
        print(f"Table:    {out}")
    regressions = {}
    if json_path:
        regressions = update_locked(json_path, results, replace=replace)
        print(f"Passing:  {json_path}")
    for executor, names in regressions.items():
        print(f"deep500 conformance: {executor} no longer passes {len(names)} locked cases: "
              f"{', '.join(names[:20])}{' ...' if len(names) > 20 else ''}", file=sys.stderr)
    return 1 if regressions else 0
