"""``deep500 compare A B``: how much slower or faster each configuration of run B is than
the same configuration of run A, with a distribution-free confidence interval.

Matching: a configuration of A and one of B match when their configurations are equal
(the same canonical key, :func:`deep500.store.database.configuration_key`) and they were
measured on the same rank. Configurations found on one side only are listed as such.
Where a run folder holds one configuration more than once (``deep500 run --append``),
the latest measurement is compared.

The ratio: the Hodges–Lehmann estimate of the shift between the log-samples of B and A
(the median of all m·n differences log b_j − log a_i; Hodges & Lehmann, "Estimates of
location based on rank tests", Ann. Math. Statist. 34, 1963), ratio = exp(shift). Under
the scale model (B's times are A's times times a constant c) it estimates c, which is
then the ratio of the medians B/A. Its confidence interval is Moses's distribution-free
interval (Moses, in Walker & Lev, "Statistical Inference", 1953; Bauer, "Constructing
confidence sets using rank statistics", JASA 67, 1972; Hollander & Wolfe,
"Nonparametric Statistical Methods", §4.3): [D_(k), D_(mn+1−k)] of the ordered
differences, where k is the largest integer with P(U ≤ k − 1) ≤ α/2 for the
Mann–Whitney statistic U under the null hypothesis. The law of U is computed exactly
(the Gaussian binomial coefficient [m+n choose m]_q, exact integers) when m·n·min(m, n)
is at most :data:`EXACT_LIMIT`, and otherwise from its normal approximation with a
continuity correction (close to exact for m, n ≥ 10). Ties among the samples (timers
with coarse resolution) make the interval approximate.

Significance: B differs from A when the interval excludes 1 (the two-sided Mann–Whitney
test at level 1 − confidence rejects equal distributions).

``--fail-above T`` (``5%`` or ``0.05``) follows asv (``asv compare --factor``, which flags
a change only when it is both larger than the factor and statistically significant) and
pytest-benchmark (``--benchmark-compare-fail=median:5%``, ratio of medians above the
threshold): a configuration fails when B is significantly slower (the interval lies
above 1) and the estimated ratio exceeds 1 + T. A configuration measured under
interference, or with too few samples for an interval, is not judged; two runs with no
configuration in common are an error. The exit statuses are :mod:`deep500.store.gate`'s.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field

import numpy as np

from deep500.store.database import Database, StoreError, column, configuration_key, \
    mapping, timing
from deep500.store.gate import NOTHING_IN_COMMON, check_common, gate_status, gate_summary, \
    not_judged_reason
from deep500.utils.statistics import _normal_quantile

# Largest m·n·min(m, n) for the exact law of U (a few tenths of a second at most).
EXACT_LIMIT = 2_000_000
# Largest m·n for which all pairwise differences are sorted in memory.
_DIRECT_LIMIT = 4_000_000


# -- the statistics ---------------------------------------------------------------------

def mann_whitney_counts(m: int, n: int) -> list[int]:
    """Number of arrangements of m + n distinct values giving each U = 0..m·n (their sum
    is C(m+n, m)): the coefficients of the Gaussian binomial [m+n choose m]_q =
    ∏_{i=1..m} (1 − q^{n+i}) / (1 − q^i) (Andrews, "The Theory of Partitions", 1976,
    Thm. 3.1; Mann & Whitney, Ann. Math. Statist. 18, 1947)."""
    m, n = min(m, n), max(m, n)
    poly = [1]
    for i in range(1, m + 1):
        degree = len(poly) - 1 + n
        product = poly + [0] * n  # times (1 − q^{n+i}), truncated at the final degree
        for k in range(n + i, len(product)):
            product[k] -= poly[k - n - i]
        quotient = product[:degree + 1]  # divided by (1 − q^i): c_k = p_k + c_{k−i}
        for k in range(i, len(quotient)):
            quotient[k] += quotient[k - i]
        poly = quotient
    return poly


def moses_rank(m: int, n: int, confidence: float = 0.95) -> tuple[int, float, str] | None:
    """(k, coverage, method): the interval [D_(k), D_(mn+1−k)] of the sorted pairwise
    differences covers the shift with probability ``coverage`` ≥ ``confidence``; method
    is 'exact' or 'normal'. None when no interval reaches ``confidence`` (too few
    samples: for 95%, m = n = 3)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if m < 1 or n < 1:
        return None
    half = (1.0 - confidence) / 2.0
    if m * n * min(m, n) <= EXACT_LIMIT:
        counts = mann_whitney_counts(m, n)
        total = sum(counts)
        below, k = 0, 0  # below: arrangements with U <= k - 1
        while k < len(counts) and below + counts[k] <= half * total:
            below += counts[k]
            k += 1
        if k == 0:
            return None
        return k, 1.0 - 2.0 * below / total, "exact"
    sigma = math.sqrt(m * n * (m + n + 1) / 12.0)
    z = _normal_quantile(1.0 - half)
    k = int(math.floor(m * n / 2.0 + 0.5 - z * sigma))
    if k < 1:
        return None
    tail = 0.5 * (1.0 + math.erf((k - 0.5 - m * n / 2.0) / sigma / math.sqrt(2.0)))
    return k, 1.0 - 2.0 * tail, "normal"


def kth_difference(x: np.ndarray, y: np.ndarray, k: int) -> float:
    """The k-th smallest (1-based) of the m·n differences y_j − x_i, for sorted ``x``
    and ``y``, without forming them: bisection on the value, counting the differences
    at most d with one binary search per x_i (O(m log n) per step)."""
    def count(d):
        return int(np.searchsorted(y, x + d, side="right").sum())
    lo, hi = float(y[0] - x[-1]), float(y[-1] - x[0])
    if k >= x.size * y.size:
        return hi
    if count(lo) >= k:
        return lo
    hi += (abs(hi) + 1.0) * 1e-9  # x_i + hi, rounded, still reaches every y_j
    for _ in range(2000):  # invariant: count(lo) < k <= count(hi)
        mid = lo + (hi - lo) / 2.0
        if mid <= lo or mid >= hi:
            break
        if count(mid) >= k:
            hi = mid
        else:
            lo = mid
    j = np.searchsorted(y, x + hi, side="right") - 1
    valid = j >= 0
    return float((y[j[valid]] - x[valid]).max())


def _order_statistics(x: np.ndarray, y: np.ndarray, ranks: list[int]) -> list[float]:
    if x.size * y.size <= _DIRECT_LIMIT:
        differences = (y[None, :] - x[:, None]).ravel()
        positions = sorted({r - 1 for r in ranks})
        part = np.partition(differences, positions)
        return [float(part[r - 1]) for r in ranks]
    return [kth_difference(x, y, r) for r in ranks]


def ratio_interval(a, b, confidence: float = 0.95) -> dict:
    """The ratio B/A of two samples of positive times and its confidence interval (see
    the module docstring): ``{ratio, ci_low, ci_high, coverage, method, n_a, n_b}``;
    ``ci_low``/``ci_high`` are None when there are too few samples for ``confidence``."""
    x = np.sort(np.log(np.asarray(a, dtype=np.float64)))
    y = np.sort(np.log(np.asarray(b, dtype=np.float64)))
    if x.size == 0 or y.size == 0 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise StoreError("a ratio needs at least one positive, finite sample on each side")
    m, n = x.size, y.size
    total = m * n
    middle = [(total + 1) // 2, total // 2 + 1]
    rank = moses_rank(m, n, confidence)
    ranks = middle + ([rank[0], total + 1 - rank[0]] if rank else [])
    values = _order_statistics(x, y, ranks)
    result = {"ratio": math.exp((values[0] + values[1]) / 2.0), "ci_low": None,
              "ci_high": None, "coverage": None, "method": None, "n_a": m, "n_b": n}
    if rank:
        result.update(ci_low=math.exp(values[2]), ci_high=math.exp(values[3]),
                      coverage=rank[1], method=rank[2])
    return result


def verdict(interval: dict) -> str:
    """'slower', 'faster', 'same' (the interval holds 1) or 'too few samples'."""
    if interval["ci_low"] is None:
        return "too few samples"
    if interval["ci_low"] > 1.0:
        return "slower"
    if interval["ci_high"] < 1.0:
        return "faster"
    return "same"


def parse_threshold(text: str) -> float:
    """``5%`` or ``0.05`` → 0.05. A plain number above 1 is refused (``5`` is not read
    as 500%)."""
    value_text = str(text).strip()
    percent = value_text.endswith("%")
    try:
        value = float(value_text[:-1] if percent else value_text)
    except ValueError:
        value = math.nan
    if percent:
        value /= 100.0
    if not math.isfinite(value) or value <= 0 or (not percent and value > 1):
        raise StoreError(f"--fail-above {text!r}: give a slowdown as a percentage or a "
                         f"fraction, e.g. 5% or 0.05")
    return value


# -- runs ---------------------------------------------------------------------------

@dataclass
class Run:
    """A run to compare: where it came from and its measurements by (key, rank)."""
    name: str
    folder: str
    run_id: int | None
    manifest: dict
    measurements: dict = field(default_factory=dict)
    repeated: dict = field(default_factory=dict)  # (key, rank) -> times measured

    @property
    def host(self) -> str:
        hardware = mapping(self.manifest.get("hardware"))
        return f"{hardware.get('hostname')} ({hardware.get('cpu_model')})"

    def describe(self) -> dict:
        revisions = mapping(self.manifest.get("git_revision"))
        return {"name": self.name, "folder": self.folder, "run_id": self.run_id,
                "recipe": mapping(self.manifest.get("recipe")).get("name"),
                "started": self.manifest.get("started"),
                "status": self.manifest.get("status"),
                "git_revision": revisions.get("working_directory") or revisions.get("deep500"),
                "host": self.host}


def _collect(run: Run, records: list[dict]) -> Run:
    for record in records:
        if record.get("kind") != "measurement":
            continue
        measured = timing(record)
        if measured is None or not measured["samples"]:
            continue
        key = (configuration_key(record.get("configuration") or {}),
               column(record.get("rank", 0)))
        label = record.get("label")
        run.repeated[key] = run.repeated.get(key, 0) + 1
        run.measurements[key] = {**measured,
                                 "label": label if isinstance(label, str) and label else key[0],
                                 "interfered": bool(mapping(record.get("telemetry"))
                                                    .get("interfered"))}
    return run


_RUN_ID = re.compile(r"^-?\d+$")


def load_run(spec: str, database: str | None = None) -> Run:
    """The run ``spec`` names: a run folder (read directly, the database is not needed)
    or a run id of the database (negative: counted from the latest, -1 the latest).
    Raises StoreError saying which when it is neither."""
    from deep500.results.files import (RunFolderError, check_run_folder,
                                        iter_checked_records, read_manifest)
    if os.path.isdir(spec):
        try:
            check_run_folder(spec, records=False)
            manifest, records = read_manifest(spec), list(iter_checked_records(spec))
        except RunFolderError as exc:
            raise StoreError(str(exc)) from None
        return _collect(Run(spec, os.path.realpath(spec), None, manifest), records)
    if not _RUN_ID.match(str(spec).strip()):
        raise StoreError(f"{spec!r} is neither a run folder nor a run id; give the folder "
                         f"'deep500 run' wrote or an id from 'deep500 runs'")
    with Database(database, create=False) as db:
        run = db.run(int(spec))
        return _collect(Run(f"#{run['id']}", run["folder"], run["id"],
                            db.manifest(run["id"])), db.records(run["id"]))


# -- the comparison -----------------------------------------------------------------

@dataclass
class Comparison:
    a: Run
    b: Run
    confidence: float
    fail_above: float | None
    rows: list = field(default_factory=list)
    only_a: list = field(default_factory=list)
    only_b: list = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(row["fails"] for row in self.rows)

    @property
    def not_judged(self) -> int:
        return sum(bool(row["not_judged"]) for row in self.rows)

    def to_dict(self) -> dict:
        return {"a": self.a.describe(), "b": self.b.describe(),
                "confidence": self.confidence, "fail_above": self.fail_above,
                "method": "Hodges-Lehmann ratio of log-samples, Moses/Mann-Whitney CI",
                "fail_rule": "significantly slower (CI above 1) and ratio > 1 + fail_above",
                "not_judged_rule": "measured under interference on either side, or too "
                                   "few samples for a confidence interval",
                "rows": self.rows, "only_a": self.only_a, "only_b": self.only_b,
                "failed": self.failed, "not_judged": self.not_judged,
                "exit_status": gate_status(self) if self.rows else NOTHING_IN_COMMON}


def compare_runs(a: Run, b: Run, confidence: float = 0.95,
                 fail_above: float | None = None) -> Comparison:
    """Match the configurations of ``a`` and ``b`` and compare each pair (module
    docstring)."""
    result = Comparison(a, b, confidence, fail_above)
    ranks = {rank for _, rank in list(a.measurements) + list(b.measurements)}
    for key, mine in a.measurements.items():
        theirs = b.measurements.get(key)
        label = mine["label"] + (f" [rank {key[1]}]" if len(ranks) > 1 else "")
        if theirs is None:
            result.only_a.append(label)
            continue
        # a zero time (a timer's resolution) has no logarithm: it is left out
        positive = [[s for s in side["samples"] if s > 0] for side in (mine, theirs)]
        if all(positive):
            interval = ratio_interval(positive[0], positive[1], confidence)
        else:
            interval = {"ratio": None, "ci_low": None, "ci_high": None, "coverage": None,
                        "method": None, "n_a": len(positive[0]), "n_b": len(positive[1])}
        change = verdict(interval)
        # a difference measured while other processes used the CPU may be theirs
        interfered = [side for side, m in (("A", mine), ("B", theirs))
                      if m.get("interfered")]
        unjudged = not_judged_reason(change, interfered)
        result.rows.append({
            "label": label, "configuration_key": key[0], "rank": key[1],
            "metric": mine["metric"], "unit": mine["unit"],
            "a": {"median": float(np.median(mine["samples"])), "n": len(mine["samples"]),
                  "times_measured": a.repeated[key]},
            "b": {"median": float(np.median(theirs["samples"])),
                  "n": len(theirs["samples"]), "times_measured": b.repeated[key]},
            **interval, "verdict": change, "interfered": interfered,
            "not_judged": unjudged,
            "fails": bool(fail_above is not None and unjudged is None
                          and change == "slower" and interval["ratio"] > 1.0 + fail_above)})
    result.only_b = [m["label"] + (f" [rank {k[1]}]" if len(ranks) > 1 else "")
                     for k, m in b.measurements.items() if k not in a.measurements]
    return result


def format_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(seconds) >= scale or unit == "ns":
            return f"{seconds / scale:.3g} {unit}"
    return str(seconds)


def format_table(comparison: Comparison) -> str:
    """The comparison as a text table, then the configurations found on one side."""
    a, b = comparison.a, comparison.b
    lines = [f"A: {_run_line(a)}", f"B: {_run_line(b)}"]
    if a.host != b.host:
        lines.append(f"note: A ran on {a.host}, B on {b.host}: the ratios compare the "
                     f"machines too")
    level = f"{comparison.confidence:.0%}"
    header = ["configuration", "A median", "B median", f"B/A [{level} CI]", "change"]
    rows = []
    for row in comparison.rows:
        interval = (f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
                    if row["ci_low"] is not None else "[—]")
        change = row["verdict"] + (f" > {comparison.fail_above:.0%}: FAIL"
                                   if row["fails"] else "")
        if row.get("interfered"):
            change += f" (⚠ interference in {' and '.join(row['interfered'])})"
        repeated = max(row["a"]["times_measured"], row["b"]["times_measured"])
        label = row["label"] + (f" (latest of {repeated})" if repeated > 1 else "")
        metric = "" if row["metric"] == "WallclockTime" else f" ({row['metric']})"
        rows.append([label + metric,
                     f"{format_time(row['a']['median'])} (n={row['a']['n']})",
                     f"{format_time(row['b']['median'])} (n={row['b']['n']})",
                     f"{row['ratio']:.3f} {interval}" if row["ratio"] is not None
                     else "—", change])
    if rows:
        widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
        lines.append("")
        lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
        lines.append("  ".join("-" * w for w in widths))
        lines.extend("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)
    else:
        lines.append("\nno configuration measured in both runs")
    for side, labels in (("A", comparison.only_a), ("B", comparison.only_b)):
        if labels:
            lines.append(f"\nonly in {side} ({len(labels)}): " + "; ".join(labels))
    counts = {v: sum(r["verdict"] == v for r in comparison.rows)
              for v in ("slower", "faster", "same", "too few samples")}
    lines.append("\n" + ", ".join(f"{c} {v}" for v, c in counts.items() if c) +
                 f" (Hodges–Lehmann ratio, {level} Moses/Mann–Whitney CI; significant "
                 f"when the CI excludes 1)")
    lines.extend(gate_summary(comparison))
    return "\n".join(lines)


def _run_line(run: Run) -> str:
    info = run.describe()
    revision = str(info["git_revision"] or "no git revision")[:12]
    return (f"{info['name']}  {info['recipe']}  {info['started']}  {revision}  "
            f"{info['status']}  {info['folder']}")


def compare_command(a: str, b: str, database: str | None = None,
                    fail_above: str | None = None, confidence: float = 0.95,
                    as_json: bool = False, out=None) -> int:
    """``deep500 compare``: print the comparison (table or JSON) and return the exit
    status of :func:`deep500.store.gate.gate_status` (StoreError, exit status 2, when
    the runs have no configuration in common)."""
    import sys
    out = out or sys.stdout
    threshold = parse_threshold(fail_above) if fail_above is not None else None
    if not 0.0 < confidence < 1.0:
        raise StoreError(f"--confidence {confidence}: a probability between 0 and 1, "
                         f"e.g. 0.95")
    comparison = compare_runs(load_run(a, database), load_run(b, database), confidence,
                              threshold)
    check_common(comparison)
    if as_json:
        out.write(json.dumps(comparison.to_dict(), indent=2) + "\n")
    else:
        out.write(format_table(comparison) + "\n")
    return gate_status(comparison)


def compare_with_baseline(baseline: Run, output_dir: str, fail_above: float | None = None,
                          confidence: float = 0.95, out=None) -> int:
    """The end of ``deep500 run --baseline RUN``: compare the run just written to
    ``output_dir`` (B) with ``baseline`` (A, loaded by :func:`load_run` before the run
    started, so that a bad baseline stops it before any work), print the table, and
    return the exit status of :func:`deep500.store.gate.gate_status`."""
    import sys
    out = out or sys.stdout
    comparison = compare_runs(baseline, load_run(output_dir), confidence, fail_above)
    check_common(comparison)
    out.write(f"\nCompared with the baseline {baseline.name}:\n{format_table(comparison)}\n")
    return gate_status(comparison)
