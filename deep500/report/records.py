"""Reading measurement records (lines of results.jsonl) for report sections: their
metrics and verdicts, the settings that tell them apart, the flags a row carries, and
the run's counts (the same counts ``deep500 run`` prints)."""
from __future__ import annotations

import json
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from deep500.report.tables import fmt_number

# WallclockTime's own default for flagging a wide CI (ci_warn_fraction).
DEFAULT_CI_WARN_FRACTION = 0.05


def metric(record: dict, name: str) -> dict | None:
    for entry in record.get("result", {}).get("metrics", []):
        if entry["metric"] == name:
            return entry
    return None


def summary(record: dict, name: str, field: str):
    entry = metric(record, name)
    return None if entry is None else entry["summary"].get(field)


def verdict(record: dict) -> str:
    """'pass', '—' (no thresholds) or 'FAIL: <threshold> (got <value>); ...'."""
    acceptance = record.get("acceptance", [])
    if not acceptance:
        return "—"
    if record.get("passed"):
        return "pass"
    return "FAIL: " + "; ".join(f"{c['threshold']} (got {fmt_number(c['value'])})"
                                for c in acceptance if not c["passed"])


def of_level(records: list[dict], level: int, kind: str) -> list[dict]:
    return [r for r in records if r.get("level") == level and r["kind"] == kind]


def by_outcome(records: list[dict], level: int) -> tuple[list, list, list]:
    """The level's records measured, failed (``error``) and not applicable
    (``skipped``), each in the order written."""
    return tuple(of_level(records, level, kind)
                 for kind in ("measurement", "error", "skipped"))


def acceptance_failures(records: list[dict]) -> int:
    """How many of the measured ``records`` missed an acceptance threshold."""
    return sum(1 for r in records if not r.get("passed", True))


def measurement_warnings(records: list[dict], describe) -> list[str]:
    return [f"{describe(r)}: {w}" for r in records
            for m in r.get("result", {}).get("metrics", []) for w in m["warnings"]]


# -- what tells records apart ---------------------------------------------------------

def configuration_key(configuration: dict, without=()) -> str:
    """A configuration as canonical text (equal configurations, equal text)."""
    return json.dumps({k: v for k, v in configuration.items() if k not in without},
                      sort_keys=True, default=str)


def value_text(value) -> str:
    """A component's value as a reader knows it: a spec's ``label``, a dataset's name
    and options, or the value itself."""
    if isinstance(value, dict):
        if "label" in value:
            return str(value["label"])
        rest = {k: v for k, v in value.items() if k != "name"}
        options = ", ".join(f"{k}={v}" for k, v in rest.items())
        if "name" in value:
            return f"{value['name']}" + (f" ({options})" if options else "")
        return options
    return str(value)


def varied_keys(records: list[dict], manifest: dict | None = None) -> list[str]:
    """Configuration keys whose values differ between ``records``, and the components
    the recipe varies (``mutable`` in the manifest's copy of it) that the records
    carry, in the recipe's order and then the records'."""
    mutable = ((manifest or {}).get("recipe", {}).get("content") or {}).get("mutable") or {}
    keys = list(OrderedDict.fromkeys(
        [k for k in mutable if isinstance(k, str)] +
        [k for r in records for k in r.get("configuration", {})]))
    present = {k for r in records for k in r.get("configuration", {})}
    return [key for key in keys if key in present and (
        (key in mutable and len(mutable[key] or []) > 1) or _differs(records, key))]


def _differs(records: list[dict], key: str) -> bool:
    """Whether the records' configurations hold more than one value of ``key`` (as
    canonical JSON); stops at the first that differs."""
    first, first_text = records[0].get("configuration", {}).get(key), None
    for record in records:
        value = record.get("configuration", {}).get(key)
        if value is first or value == first:  # equal settings: no text needed
            continue
        first_text = first_text or json.dumps(first, sort_keys=True, default=str)
        if json.dumps(value, sort_keys=True, default=str) != first_text:
            return True
    return False


class Settings:
    """The varied settings a section's own columns do not show (``shown``), nor
    aggregate over (``aggregated``, e.g. ``seed`` when runs of several seeds make one
    row): they go into a "Settings" column and into plot series names, so that no two
    configurations share a row label or a series."""

    def __init__(self, records: list[dict], shown, manifest: dict | None = None,
                 aggregated=()):
        self.keys = [k for k in varied_keys(records, manifest)
                     if k not in shown and k not in aggregated]
        # runs appended to one folder (deep500 run --append) may repeat configurations
        self.sessions = len({r.get("session") for r in records}) > 1
        # id(record) -> (record, text): rows, labels and series each ask; the record is
        # held so that its id is not reused while this lives
        self._texts: dict[int, tuple] = {}

    def __bool__(self) -> bool:
        return bool(self.keys) or self.sessions

    def text(self, record: dict) -> str:
        known = self._texts.get(id(record))
        if known is not None and known[0] is record:
            return known[1]
        configuration = record.get("configuration", {})
        parts = [f"{k}={value_text(configuration.get(k))}" for k in self.keys]
        if self.sessions:
            parts.append(f"session={record.get('session')}")
        text = ", ".join(parts)
        self._texts[id(record)] = (record, text)
        return text

    def label(self, base: str, record: dict) -> str:
        text = self.text(record)
        return f"{base} · {text}" if text else base


def _flatten(value, prefix: str = "") -> dict:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: json.dumps(value, sort_keys=True, default=str)}


def distinct_labels(records: list[dict], label: Callable[[dict], str],
                    identity: Callable[[dict], str] | None = None,
                    without=()) -> dict[int, str]:
    """``{id(record): label}`` such that records of different configurations (ignoring
    the keys in ``without``) never share a row: ``identity`` is everything a row shows
    of its configuration (default: ``label``); where two configurations have the same
    identity, the nested fields that differ (``operator.attributes.axis=0``) are
    appended to their labels."""
    identity = identity or label
    labels = {id(r): label(r) for r in records}
    by_identity: dict[str, list[dict]] = {}
    for record in records:
        by_identity.setdefault(identity(record), []).append(record)
    for group in by_identity.values():
        if len(group) < 2:
            continue
        keys = {configuration_key(r.get("configuration", {}), without) for r in group}
        if len(keys) < 2:
            continue
        flat = [_flatten({k: v for k, v in r.get("configuration", {}).items()
                          if k not in without}) for r in group]
        paths = sorted({p for f in flat for p in f})
        differing = [p for p in paths if len({f.get(p) for f in flat}) > 1]
        # a component whose own label differs is named by that label alone
        labelled = {p[:-len(".label")] for p in differing if p.endswith(".label")}
        differing = [p for p in differing if p.endswith(".label") or
                     not any(p.startswith(f"{c}.") for c in labelled)]
        for record, fields in zip(group, flat):
            extra = ", ".join(
                (json.loads(fields[p]) if p in fields else "unset") if p.endswith(".label")
                else f"{p}={json.loads(fields[p]) if p in fields else 'unset'}"
                for p in differing)
            labels[id(record)] = f"{labels[id(record)]} · {extra}"
    return labels


# -- flags on a row --------------------------------------------------------------------

def ci_warn_fraction(manifest: dict | None) -> float:
    """The recipe's ``WallclockTime.ci_warn_fraction`` (WallclockTime's default: 5%)."""
    metrics = ((manifest or {}).get("recipe", {}).get("content") or {}).get("metrics")
    params = metrics.get("WallclockTime") if isinstance(metrics, dict) else None
    value = params.get("ci_warn_fraction") if isinstance(params, dict) else None
    return float(value) if isinstance(value, (int, float)) else DEFAULT_CI_WARN_FRACTION


def timing_text(record: dict) -> str:
    """``n (+w warm-up)`` of the record's WallclockTime, or "n/a"."""
    n, warmup = summary(record, "WallclockTime", "n"), summary(record, "WallclockTime",
                                                                "warmup")
    if n is None:
        return "n/a"
    return f"{n}" + (f" (+{warmup} warm-up)" if warmup is not None else "")


def flags(record: dict, ci_threshold: float = DEFAULT_CI_WARN_FRACTION) -> str:
    """What a reader must know before trusting a row's numbers, or "—":

    - interference: the telemetry sampler saw other processes use the CPU while the
      configuration was measured (``record["telemetry"]["interfered"]``);
    - re-measured: how often the configuration was measured again
      (``record["remeasured"]``);
    - a wide CI: the 95% CI of the median time spans more than ``ci_threshold`` of the
      median (or WallclockTime said so in its warnings), or there were too few samples
      for a CI.
    """
    parts = []
    telemetry = record.get("telemetry")
    if isinstance(telemetry, dict) and telemetry.get("interfered"):
        cores = telemetry.get("other_cpu_cores")
        short = (f"other processes used {cores:.2g} cores"
                 if isinstance(cores, (int, float)) else None)
        # the sampler's reason spells out thresholds; the row keeps what was seen
        clauses = [short if short and c.startswith("other processes used") else c
                   for c in (telemetry.get("reason") or "").split("; ") if c]
        if short and short not in clauses:
            clauses.insert(0, short)
        parts.append("⚠ interference: " + ("; ".join(clauses) or
                                           "flagged by the telemetry sampler"))
    remeasured = record.get("remeasured")
    if isinstance(remeasured, int) and remeasured > 0:
        parts.append(f"re-measured {remeasured}×")
    wall = metric(record, "WallclockTime")
    if wall is not None:
        width = wall["summary"].get("ci_relative_width")
        known = isinstance(width, (int, float)) and not math.isnan(width)
        said_wide = any("CI of the median spans" in w for w in wall.get("warnings", []))
        if known and (width > ci_threshold or said_wide):
            parts.append(f"⚠ wide CI: {width:.0%} of the median")
        elif not known and wall["summary"].get("n"):
            parts.append(f"⚠ no CI: {wall['summary']['n']} samples are too few")
    return "; ".join(parts) or "—"


# -- the run's counts ------------------------------------------------------------------

@dataclass
class Counts:
    """Outcomes per configuration (not per rank): ``measured`` ran on every rank,
    ``failed`` raised on at least one rank, ``skipped`` did not apply,
    ``acceptance_failures`` measured but missed a threshold on at least one rank."""
    configurations: int = 0
    measured: int = 0
    failed: int = 0
    skipped: int = 0
    acceptance_failures: int = 0
    # Measured configurations that the telemetry sampler watched, and those it saw
    # other processes use the CPU during (on any rank). Not part of equality: whether
    # a run was interfered with depends on the machine, not on what the run did.
    watched: int = field(default=0, compare=False)
    interfered: int = field(default=0, compare=False)

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.acceptance_failures == 0

    def interference_sentence(self) -> str | None:
        """How many measured configurations were measured under interference, the line
        beside :meth:`sentence` (None when nothing was measured): an acceptance verdict
        on numbers that other processes disturbed is no verdict on the code."""
        if not self.measured:
            return None
        unwatched = self.measured - self.watched
        tail = (f" ({unwatched} not watched by the telemetry sampler)" if unwatched
                else "")
        if not self.interfered:
            return (f"None of the {self.measured} measured configurations was measured "
                    f"under interference{tail}.")
        return (f"⚠ {self.interfered} of {self.measured} measured configurations were "
                f"measured under interference (other processes used the CPU; their rows "
                f"are flagged){tail}: re-measure on a quiet machine, or with deep500 run "
                f"--remeasure-interfered.")

    def sentence(self) -> str:
        """The line ``deep500 run`` prints and the report shows."""
        text = (f"{self.measured} configurations measured, {self.failed} failed to run, "
                f"{self.acceptance_failures} missed an acceptance threshold")
        if self.skipped:
            text += f", {self.skipped} not applicable (skipped)"
        return text


def count_outcomes(records: list[dict]) -> Counts:
    """The :class:`Counts` of ``records`` (one run's results.jsonl), configurations told
    apart by their ``index`` (and ``session``, where records carry one)."""
    by_configuration: dict[tuple, list[dict]] = OrderedDict()
    for record in records:
        by_configuration.setdefault((record.get("session"), record.get("index")),
                                    []).append(record)
    counts = Counts(configurations=len(by_configuration))
    for group in by_configuration.values():
        kinds = {r.get("kind") for r in group}
        if "error" in kinds:
            counts.failed += 1
        elif "measurement" in kinds:
            counts.measured += 1
            telemetry = [r.get("telemetry") for r in group if r.get("kind") == "measurement"]
            counts.watched += any(isinstance(t, dict) for t in telemetry)
            counts.interfered += any(isinstance(t, dict) and bool(t.get("interfered"))
                                     for t in telemetry)
        elif "skipped" in kinds:
            counts.skipped += 1
        if any(r.get("kind") == "measurement" and r.get("passed") is False for r in group):
            counts.acceptance_failures += 1
    return counts


@dataclass
class ReportContext:
    """What every section needs besides the records: the run's manifest, whether runs
    of several seeds are shown one row each (``per_seed``) or aggregated, and the
    format written beside each PNG plot (``figure_format``: svg, pdf or None), and
    how configurations' raw samples are drawn (``samples``: violin, histogram, or None
    for not at all; :mod:`deep500.report.sample_plots`)."""
    manifest: dict
    per_seed: bool = False
    figure_format: str | None = "svg"
    samples: str | None = None

    @property
    def ci_threshold(self) -> float:
        return ci_warn_fraction(self.manifest)
