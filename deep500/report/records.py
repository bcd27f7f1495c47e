"""Reading measurement records (lines of results.jsonl) for report sections."""
from __future__ import annotations

from deep500.report.tables import fmt_number


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


def measurement_warnings(records: list[dict], describe) -> list[str]:
    return [f"{describe(r)}: {w}" for r in records
            for m in r.get("result", {}).get("metrics", []) for w in m["warnings"]]
