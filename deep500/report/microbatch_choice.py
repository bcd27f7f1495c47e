"""The micro-batch sizes ``microbatch: auto`` chose for a memory budget, set against
every fixed size: the convolutions' time and workspace by the measured per-convolution
table (modelled: sums over convolutions measured alone), and the whole network's
measured time and peak memory where the recipe also ran that fixed size."""
from __future__ import annotations

from collections import Counter

from deep500.report.records import summary
from deep500.report.tables import Table, fmt_time
from deep500.utils.byte_sizes import format_bytes

# what differs between an auto row and the fixed-size rows it is compared with
_CHOICE_KEYS = ("microbatch", "memory_budget", "memory_policy")


def _choice(record: dict) -> dict | None:
    return record.get("result", {}).get("details", {}).get("microbatch")


def _context(record: dict) -> tuple:
    c = record["configuration"]
    return tuple(sorted((k, repr(v)) for k, v in c.items() if k not in _CHOICE_KEYS))


def _network(record: dict) -> str:
    c = record["configuration"]
    return f"{c['network']['label']} b={c['batch_size']} {c['mode']}"


def _measured(record: dict | None) -> list:
    if record is None:
        return ["not run", "not run", "—"]
    return [fmt_time(summary(record, "WallclockTime", "median")),
            format_bytes(summary(record, "PeakMemory", "peak_bytes")),
            summary(record, "PeakMemory", "measured_by") or "—"]


def _histogram(sizes: dict, batch: int, count: int) -> str:
    """'16 ×3, 4 ×2' over every convolution (those left out keep the batch)."""
    counts = Counter(sizes.values())
    counts[batch] += count - len(sizes)
    return ", ".join(f"{size} ×{n}" for size, n in sorted(counts.items(), reverse=True)
                     if n)


def microbatch_tables(measured: list[dict]) -> list[Table]:
    auto = [r for r in measured if _choice(r) and r.get("rank", 0) == 0]
    if not auto:
        return []
    fixed = {}
    for record in measured:
        c = record["configuration"]
        if not _choice(record) and record.get("rank", 0) == 0:
            fixed[(_context(record), c.get("microbatch") or c["batch_size"])] = record
    comparison = Table(
        "Level 1 — micro-batch sizes chosen for a memory budget",
        ["Network", "Executor", "Micro-batch", "Conv. time (modelled)",
         "Conv. workspace (modelled)", "Within budget", "Network time", "Peak memory",
         "Peak memory measured by"],
        note=("microbatch: auto measures each convolution alone at each size (time: "
              "median run; workspace: peak memory less the output's bytes) and chooses "
              "a size per convolution minimising the summed time with the workspace "
              "within the budget (Oyama et al., CLUSTER 2018): summed over the "
              "convolutions under policy 'division' (an exact 0-1 ILP), the largest one "
              "under 'reuse'. The modelled columns apply the same table to every fixed "
              "size; network time and peak memory are the whole network's, measured, "
              "where the recipe ran that size."))
    per_conv = Table("Level 1 — micro-batch size chosen per convolution",
                     ["Convolution"] + [f"{r['configuration']['executor']}, "
                                        f"{format_bytes(_choice(r)['budget_bytes'])}, "
                                        f"{_choice(r)['policy']}" for r in auto])
    for record in auto:
        c, choice = record["configuration"], _choice(record)
        batch, context = c["batch_size"], _context(record)
        for row in choice["fixed"]:
            comparison.rows.append(
                [_network(record), c["executor"], f"{row['size']} (every convolution)",
                 fmt_time(row["seconds"]), format_bytes(row["workspace_bytes"]),
                 "yes" if row["fits"] else "no"] +
                _measured(fixed.get((context, row["size"]))))
        comparison.rows.append(
            [_network(record), c["executor"],
             f"auto ≤ {format_bytes(choice['budget_bytes'])}, {choice['policy']}: "
             f"{_histogram(choice['sizes'], batch, len(choice['profile']))}",
             fmt_time(choice["seconds"]), format_bytes(choice["workspace_bytes"]),
             "yes" if choice["workspace_bytes"] <= choice["budget_bytes"] else "no"] +
            _measured(record))
    names = list(dict.fromkeys(n for r in auto for n in _choice(r)["profile"]))
    for name in names:
        per_conv.rows.append([name] + [
            _choice(r)["sizes"].get(name, r["configuration"]["batch_size"])
            if name in _choice(r)["profile"] else "—" for r in auto])
    return [comparison, per_conv]
