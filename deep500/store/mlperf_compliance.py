"""MLPerf logs checked by MLCommons' compliance checker
(``mlperf_logging.compliance_checker``), with the rules that cannot apply to a benchmark
that is not one of MLPerf's named and left out.

The checker reads a ruleset's ``training_<version>/common.yaml``: rules per log key
(how often it occurs, checks on its value, state across lines). ``submission_division``
then enqueues ``<division>_common.yaml``, which requires ``submission_benchmark`` to be
one of MLPerf's benchmarks and enqueues that benchmark's rules (its reference
hyperparameters and quality target). A Deep500 network is none of those, so those rules
cannot apply: the common rules are run with the enqueueing statement removed (and
``submission_benchmark`` only required to be present), and :data:`NOT_APPLICABLE` says
what was left out. Every other rule of the common file is run as MLCommons wrote it.
"""
from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass

import yaml

from deep500.utils.errors import Deep500Error, require

RULESET = "6.1.0"
USAGE = "training"

NOT_APPLICABLE = (
    "<division>_common.yaml (enqueued by submission_division): submission_benchmark must "
    "be one of MLPerf's benchmarks, and a Deep500 network is not one",
    "<division>_<benchmark>.yaml (enqueued by submission_benchmark): the MLPerf reference "
    "model's hyperparameters and quality target",
)


@dataclass
class ComplianceVerdict:
    """The checker's verdict on one log: ``passed``, its ``messages`` (failed rules and
    warnings), and the ruleset it ran."""
    path: str
    passed: bool
    messages: list[str]
    ruleset: str

    def summary(self) -> str:
        head = (f"MLPerf compliance ({USAGE} {self.ruleset}, common rules; "
                f"{len(NOT_APPLICABLE)} benchmark-specific rule files not applicable): ")
        if self.passed:
            return head + "passed"
        return head + "FAILED: " + "; ".join(self.messages)


def _rules_dir(ruleset: str) -> str:
    compliance_checker = require("mlperf_logging.compliance_checker", "mlperf",
                                 "Checking MLPerf logs")
    return os.path.join(os.path.dirname(compliance_checker.__file__), f"{USAGE}_{ruleset}")


def _rulesets() -> list[str]:
    folder = os.path.dirname(_rules_dir(RULESET))
    return sorted(name.split("_", 1)[1] for name in os.listdir(folder)
                  if name.startswith(USAGE + "_"))


def _without_enqueueing(code: str) -> str:
    kept = [part for part in code.split(";") if "enqueue_config" not in part]
    return ";".join(kept).strip() or "pass"


def applicable_rules(ruleset: str = RULESET) -> list:
    """The ruleset's common rules with every enqueueing of benchmark-specific rule files
    removed (module docstring)."""
    rules_file = os.path.join(_rules_dir(ruleset), "common.yaml")
    if not os.path.exists(rules_file):
        raise Deep500Error(f"MLPerf compliance: mlperf-logging has no {USAGE} ruleset "
                           f"{ruleset} ({rules_file} is missing); the installed version "
                           f"has: {', '.join(_rulesets())}")
    with open(rules_file) as stream:
        rules = yaml.load(stream, Loader=yaml.BaseLoader)
    for rule in rules:
        key = rule.get("KEY")
        if key and "enqueue_config" in key.get("POST", ""):
            key["POST"] = _without_enqueueing(key["POST"])
    names = {rule["KEY"]["NAME"] for rule in rules if "KEY" in rule}
    if "submission_benchmark" not in names:
        rules.append({"KEY": {"NAME": "submission_benchmark", "REQ": "EXACTLY_ONE",
                              "CHECK": " v['value'] != '' "}})
    return rules


def check_mlperf_log(path: str, ruleset: str = RULESET) -> ComplianceVerdict:
    """Run MLCommons' compliance checker on the log at ``path`` with
    :func:`applicable_rules`."""
    from mlperf_logging.compliance_checker import mlp_compliance
    with tempfile.TemporaryDirectory(prefix="deep500-mlperf-") as folder:
        config = os.path.join(folder, "deep500_common.yaml")
        with open(config, "w") as stream:
            yaml.safe_dump(applicable_rules(ruleset), stream, sort_keys=False)
        checker = mlp_compliance.make_checker(USAGE, ruleset, quiet=False, werror=False)
        quiet = logging.getLogger().level
        logging.getLogger().setLevel(logging.ERROR)   # the checker logs each rule file
        try:
            checker.check_file(path, config)
        finally:
            logging.getLogger().setLevel(quiet)
    messages = list(checker.not_overwritable) + list(checker.overwritable.values())
    warnings = [f"warning: {text}" for text in checker.warnings.values()]
    return ComplianceVerdict(path, not checker.has_messages(), messages + warnings, ruleset)
