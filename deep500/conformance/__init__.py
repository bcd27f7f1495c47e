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
exactly), and dtypes narrower than float32 within a number of their ULPs (``precision``).
A case is

* **pass** — every output matches;
* **fail** — an output has wrong values, shape or dtype (a floating result is first
  converted to the expected floating dtype);
* **unsupported** — the executor declines the model (``UnsupportedError`` or
  ``NotImplementedError``, when built or when run);
* **error** — any other exception (its message is kept);

and a case that does not pass gets one failure class (``classify``: nondeterministic,
harness, dtype, unsupported op, tolerance, wrong, error).

``deep500 conformance`` runs the suite and writes, into a folder (``--out``, default
``results/conformance``), every result as JSON, the Markdown pages (``conformance.md``
and the per-case matrix ``conformance_cases.md``) and the locked passing set with this
run's passing cases added. With ``--update-docs`` a run of every case also regenerates
the repository's ``docs/conformance.md`` and ``docs/conformance_cases.md`` and its
locked passing set (``tests/lv1_network/conformance_passing.json``), which the test
suite re-runs, so that a case that passed once must keep passing.

This is the runner side of level 1 (like recipes and reports): the executors come from
the framework registry (:mod:`deep500.frameworks.registry`); level 1 itself knows no
framework. ``cases`` loads the cases, ``precision`` and ``reductions`` say what a dtype
and an operator may err by, ``compare`` compares outputs, ``nondeterministic`` and
``classify`` say why a case fails, ``run`` runs them, ``results`` holds the outcomes,
``markdown`` shows them, ``locked`` keeps the locked passing set and ``command`` is
``deep500 conformance``.
"""
from deep500.conformance.cases import (DEFAULT_ATOL, DEFAULT_RTOL, ConformanceCase,
                                       case_from_directory, case_from_test_case,
                                       cases_from_directory, installed_node_tests,
                                       load_cases, tested_operator)
from deep500.conformance.classify import FAILURE_CLASSES, classify, harness_reason
from deep500.conformance.command import conformance_command
from deep500.conformance.compare import Mismatch, assert_similar, compare_outputs
from deep500.conformance.locked import locked_regressions, read_locked, update_locked
from deep500.conformance.markdown import cases_page, summary_page, write_pages
from deep500.conformance.nondeterministic import RANDOM_OPERATORS, random_reason
from deep500.conformance.precision import Tolerance, spacing
from deep500.conformance.reductions import reduction_length
from deep500.conformance.results import STATUSES, CaseResult, ConformanceResults
from deep500.conformance.run import (DEFAULT_TIME_LIMIT, EXECUTORS, Outcome,
                                     executor_factories, run_case, run_conformance)

__all__ = ["DEFAULT_ATOL", "DEFAULT_RTOL", "DEFAULT_TIME_LIMIT", "EXECUTORS",
           "FAILURE_CLASSES", "RANDOM_OPERATORS", "STATUSES", "CaseResult",
           "ConformanceCase", "ConformanceResults", "Mismatch", "Outcome", "Tolerance",
           "assert_similar", "case_from_directory", "case_from_test_case", "cases_from_directory",
           "cases_page", "classify", "compare_outputs", "conformance_command",
           "executor_factories", "harness_reason", "installed_node_tests", "load_cases",
           "locked_regressions", "random_reason", "read_locked", "reduction_length",
           "run_case", "run_conformance", "spacing", "summary_page", "tested_operator",
           "update_locked", "write_pages"]
