"""ONNX node test cases: loaded from the installed onnx (in memory, ``TestCase.model``
and ``data_sets``) or from folders as ONNX's backend tests store them (``model.onnx``,
``test_data_set_N/{input,output}_M.pb``), and the operator each case tests."""
from __future__ import annotations

import functools
import glob
import json
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import onnx
import onnx.numpy_helper

from deep500.conformance.precision import DEFAULT_ATOL, DEFAULT_RTOL, Tolerance
from deep500.conformance.reductions import reduction_length
from deep500.utils.errors import Deep500Error

_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


@dataclass
class ConformanceCase:
    """One ONNX node test: a model and ``(inputs, expected outputs)`` data sets, both
    lists in the order of the graph's (fed) inputs and outputs; the operator it tests and
    how many terms each of that operator's outputs sums (both set when loaded)."""
    name: str
    model: onnx.ModelProto
    data_sets: list = field(default_factory=list)
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    op_type: str = ""
    reduction_length: int = 0

    @property
    def input_names(self) -> list[str]:
        stored = {t.name for t in self.model.graph.initializer}
        return [i.name for i in self.model.graph.input if i.name not in stored]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.model.graph.output]

    @property
    def tolerance(self) -> Tolerance:
        """What the outputs may differ by (:mod:`deep500.conformance.precision`)."""
        return Tolerance(self.rtol, self.atol, self.op_type, self.reduction_length)


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
    _annotate(cases)
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
    _annotate(cases)
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


def copy_value(value):
    if isinstance(value, list):
        return [copy_value(v) for v in value]
    return value.copy() if isinstance(value, np.ndarray) else value


def _annotate(cases: list[ConformanceCase]) -> None:
    """The operator each case tests (``test_<op>_...`` matched against the model's node
    types, then against every ONNX operator name) and its reduction length. An
    ``_expanded`` case (the operator's function body) tests the operator of its unexpanded
    twin, with the twin's reduction length (read from the twin's node)."""
    for case in cases:
        case.op_type = tested_operator(case.name, case.model)
    twins = {c.name: c for c in cases}
    for case in cases:
        twin = twins.get(_EXPANDED.sub("", case.name))
        if twin is not None and twin is not case:
            case.op_type = twin.op_type
    for case in cases:
        case.reduction_length = reduction_length(case.op_type, case.model, _values(case))
    for case in cases:
        twin = twins.get(_EXPANDED.sub("", case.name))
        if twin is not None and twin is not case:
            case.reduction_length = twin.reduction_length


def _values(case: ConformanceCase) -> dict:
    """The case's initializers and its first data set's inputs, by graph input name."""
    values = {t.name: onnx.numpy_helper.to_array(t) for t in case.model.graph.initializer}
    if case.data_sets:
        values.update(zip(case.input_names, case.data_sets[0][0]))
    return values


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
