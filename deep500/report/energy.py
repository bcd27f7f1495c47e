"""What the level-0 and level-1 tables show of ``d5.Energy``: a column "Energy per
call" where a record measured it (joules per call and mean power), or "not available"
with the reasons in the table's note (the record's ``summary.status`` says which)."""
from __future__ import annotations

from deep500.report.records import metric


def has_energy(records: list[dict]) -> bool:
    return any(metric(r, "Energy") for r in records)


def fmt_joules(joules) -> str:
    if joules is None:
        return "n/a"
    for unit, scale in (("J", 1.0), ("mJ", 1e-3), ("µJ", 1e-6)):
        if abs(joules) >= scale:
            return f"{joules / scale:.3g} {unit}"
    return f"{joules / 1e-9:.3g} nJ"


def energy_text(record: dict) -> str:
    """``1.2 mJ (35 W)``, ``not available``, or ``n/a`` (not measured)."""
    entry = metric(record, "Energy")
    if entry is None:
        return "n/a"
    summary = entry.get("summary") or {}
    if not summary.get("available"):
        return "not available"
    watts = summary.get("watts")
    return fmt_joules(summary.get("joules_per_call")) + (
        f" ({watts:.3g} W)" if watts is not None else "")


def energy_note(records: list[dict]) -> str:
    """The table note's sentence on energy: what it counts, and why it is not there
    where it is not."""
    reasons = sorted({(metric(r, "Energy").get("summary") or {}).get("status", "")
                      for r in records if metric(r, "Energy")
                      and not (metric(r, "Energy").get("summary") or {}).get("available")})
    note = (" Energy per call: the RAPL package counters' joules over the measured "
            "calls (the whole package, other processes included), with the mean power.")
    if reasons:
        note += " Energy " + "; ".join(reasons) + "."
    return note
