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
framework. ``cases`` loads the cases, ``compare`` compares outputs, ``run`` runs them,
``results`` holds and shows the outcomes, ``locked`` keeps the locked passing set and
``command`` is ``deep500 conformance``.
"""
from deep500.conformance.cases import (DEFAULT_ATOL, DEFAULT_RTOL, ConformanceCase,
                                       case_from_directory, case_from_test_case,
                                       cases_from_directory, installed_node_tests,
                                       load_cases, tested_operator)
from deep500.conformance.command import conformance_command
from deep500.conformance.compare import assert_similar, compare_outputs
from deep500.conformance.locked import read_locked, update_locked
from deep500.conformance.results import STATUSES, CaseResult, ConformanceResults
from deep500.conformance.run import (DEFAULT_TIME_LIMIT, EXECUTORS, executor_factories,
                                     run_case, run_conformance)

__all__ = ["DEFAULT_ATOL", "DEFAULT_RTOL", "DEFAULT_TIME_LIMIT", "EXECUTORS", "STATUSES",
           "CaseResult", "ConformanceCase", "ConformanceResults", "assert_similar",
           "case_from_directory", "case_from_test_case", "cases_from_directory",
           "compare_outputs", "conformance_command", "executor_factories",
           "installed_node_tests", "load_cases", "read_locked", "run_case",
           "run_conformance", "tested_operator", "update_locked"]
