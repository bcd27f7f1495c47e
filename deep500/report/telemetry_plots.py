"""Per-rank telemetry over time: the figures of the local-parallelism study.

Each rank's record carries the telemetry sampler's series of its measurement window
(``telemetry_series``, :meth:`deep500.utils.telemetry.TelemetrySampler.series`: at most
64 points, rates exact over each interval). For every configuration one figure draws,
per rank against seconds since the first rank's window opened (the ranks' windows
are aligned by their ``started_unix``):

* CPU % of the rank's process (100 = one core busy; its threads and children);
* resident set size (MiB);
* threads of the process;
* context switches per second (voluntary + involuntary);
* bytes per second sent and received through the rank's CommunicationNetwork (the
  ``communication`` probe a scheme registers while it trains; drawn as 0 before the
  scheme exists and after training, where no scheme sent anything; absent for runs
  without the probe).
"""
from __future__ import annotations

import os

from deep500.report.plots import line_panels

MIB = 1 << 20
PANELS = ("CPU % (100 = one core)", "RSS (MiB)", "threads", "context switches / s",
          "bytes / s sent and received (MB/s)")


def _panel_values(series: dict) -> list[list]:
    """The five panels' y values of one rank's series, in the order of PANELS."""
    probes = series.get("probes") or {}
    sent = probes.get("communication.bytes_sent") or [None] * len(series["t"])
    received = probes.get("communication.bytes_received") or [None] * len(series["t"])
    # Not read (no scheme measuring yet, or training over): nothing sent by one.
    traffic = [((s or 0.0) + (r or 0.0)) / 1e6 for s, r in zip(sent, received)] \
        if "communication.bytes_sent" in probes else [None] * len(series["t"])
    switches = [None if v is None or i is None else v + i
                for v, i in zip(series.get("voluntary_per_s") or [None] * len(series["t"]),
                                series.get("involuntary_per_s") or [None] * len(series["t"]))]
    return [[None if c is None else 100.0 * c for c in series["own_cpu_cores"]],
            [None if b is None else b / MIB for b in series["rss_bytes"]],
            list(series["threads"]), switches, traffic]


def rank_series(records: list[dict]) -> dict[int, tuple[list, list[list]]]:
    """``{rank: (seconds, panel values)}`` of the records (one configuration, one record
    per rank) that carry a series, seconds counted from the earliest window start."""
    with_series = [r for r in records if (r.get("telemetry_series") or {}).get("t")]
    if not with_series:
        return {}
    starts = [r["telemetry_series"].get("started_unix") or 0.0 for r in with_series]
    origin = min(starts)
    out = {}
    for record, start in zip(with_series, starts):
        series = record["telemetry_series"]
        out[record.get("rank", 0)] = ([start - origin + t for t in series["t"]],
                                      _panel_values(series))
    return out


def telemetry_plots(records: list[dict], output_dir: str, label, also: str | None,
                    prefix: str = "level3", limit: int = 24) -> list[tuple[str, str]]:
    """One figure per configuration (records grouped by session and index; ``label``
    names a configuration from its rank-0 record) with a series per rank; at most
    ``limit`` figures. Returns ``[(caption, path)]``."""
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        groups.setdefault((record.get("session"), record["index"]), []).append(record)
    plots = []
    for key in sorted(groups, key=lambda k: (str(k[0]), k[1])):
        group = sorted(groups[key], key=lambda r: r.get("rank", 0))
        per_rank = rank_series(group)
        if not per_rank:
            continue
        name = label(group[0])
        panels = []
        for index, title in enumerate(PANELS):
            panels.append((title, title.split(" (")[0],
                           {f"rank {rank}": (xs, values[index])
                            for rank, (xs, values) in sorted(per_rank.items())}))
        session = "" if key[0] in (None, 0) else f"s{key[0]}_"
        path = line_panels(os.path.join(output_dir, "plots",
                                        f"{prefix}_telemetry_{session}{key[1]}.png"),
                           f"Telemetry per rank over time — {name}", panels,
                           xlabel="seconds", also=also)
        plots.append((f"CPU, memory, threads, context switches and bytes on the wire "
                      f"per rank over time: {name}", path))
        if len(plots) >= limit:
            break
    return plots
