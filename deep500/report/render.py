"""Reports from a run folder: ``report.md`` and ``report.html`` (plots embedded), both
views of ``results.jsonl`` and ``manifest.json``, so they can be rebuilt at any time
(``deep500 report DIR``), also after a crash."""
from __future__ import annotations

import base64
import html
import os

from deep500.results.files import read_manifest, run_status
from deep500.results.safe_write import write_atomically
from deep500.report import (collective_choice, dataset_latency, grid, level0, level1,
                            level2, level3, predictions, scaling)
from deep500.report.pages import fit_sections
from deep500.report.plots import check_figure_format, companion
from deep500.report.reading import records_kept_out_of_collection, report_records
from deep500.report.sample_plots import check_sample_style
from deep500.report.records import ReportContext, count_outcomes
from deep500.report.tables import Table

SECTIONS = (level0, level1, level2, dataset_latency, level3, grid, scaling, collective_choice,
            predictions)


def _records_of(section, records: list[dict]) -> list[dict]:
    """The records ``section`` shows: those of the experiments it names
    (``EXPERIMENTS``), or those of no section that names its experiments."""
    claimed = {e for s in SECTIONS for e in getattr(s, "EXPERIMENTS", ())}
    mine = getattr(section, "EXPERIMENTS", None)
    if mine is not None:
        return [r for r in records if r.get("experiment") in mine]
    return [r for r in records if r.get("experiment") not in claimed]

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 75em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }
th { background: #f0f0f0; } tr:nth-child(even) { background: #fafafa; }
img { max-width: 100%; border: 1px solid #eee; } code { background: #f4f4f4; }
.fail { color: #b00; font-weight: bold; } .ok { color: #070; font-weight: bold; }
td.warn, p.warn { background: #fff3d6; color: #8a5300; }
p.warn { padding: 0.5em; }
td { overflow-wrap: anywhere; } td.warn { min-width: 10em; } table.wide { font-size: 0.8em; }
table.keys td:first-child { white-space: nowrap; }
"""


def _run_table(manifest: dict) -> Table:
    versions = manifest.get("versions", {})
    hardware = manifest.get("hardware", {})
    threads = manifest.get("threads", {})
    rows = [
        ["Recipe", f"{manifest.get('recipe', {}).get('name')} "
                   f"({manifest.get('recipe', {}).get('path')})"],
        ["Command", " ".join(manifest.get("command_line", []))],
        ["Started", manifest.get("started")],
        ["Status", _status(manifest)],
        ["MPI ranks", manifest.get("mpi_ranks", 1)],
        ["Network", _network_text(manifest)],
        ["CPU", f"{hardware.get('cpu_model')} ({hardware.get('usable_cpus')} usable CPUs, "
                f"{hardware.get('physical_cores')} physical cores)"],
        ["GPUs", ", ".join(g["name"] for g in hardware.get("gpus", [])) or "none"],
        ["Software", ", ".join(f"{k} {v}" for k, v in versions.items() if v)],
        ["Threads", _threads_text(threads)],
        ["Git revision", manifest.get("git_revision", {}).get("deep500")],
    ]
    return Table("Run", ["", ""], rows)


def _network_text(manifest: dict) -> str:
    cluster = manifest.get("cluster")
    if not isinstance(cluster, dict):
        return "this host's own (ranks talk through shared memory; no --cluster)"
    return (f"emulated: {cluster.get('summary')}; namespaces "
            f"{', '.join(map(str, cluster.get('namespaces', [])))}; "
            f"{cluster.get('transport')}")


def cluster_banner(manifest: dict) -> str | None:
    """The line that heads a report measured on an emulated cluster
    (docs/cluster_emulation.md says what such numbers do and do not show)."""
    cluster = manifest.get("cluster")
    if not isinstance(cluster, dict):
        return None
    return (f"Emulated cluster: {cluster.get('summary')}, on one host "
            f"({cluster.get('transport')}; 'deep500 ... --cluster {cluster.get('text')}'). "
            f"Links are token buckets, not NICs: no switch contention, no RDMA; "
            f"see docs/cluster_emulation.md.")


def _threads_text(threads: dict) -> str:
    """The manifest's threads: what the recipe asked for (fixed or varied), the counts
    the configurations ran with once resolved, and the frameworks' settings."""
    if threads.get("varied"):
        asked = f"varied {threads['varied']}"
    elif threads.get("requested"):
        asked = f"requested {threads['requested']}"
    elif "resolved" in threads:  # the default: the usable CPUs shared by the ranks
        asked = "not given (usable CPUs shared by the ranks)"
    else:  # a run from before counts were resolved
        asked = "requested framework defaults"
    resolved = (f"; per configuration {', '.join(map(str, threads['resolved']))}"
                if threads.get("resolved") else "")
    return (f"{asked}{resolved}; at start {threads.get('in_force_at_start')}" + (
        f"; once loaded {threads['in_force_after_loading']}"
        if threads.get("in_force_after_loading") else ""))


def _status(manifest: dict) -> str | None:
    """The run's status as the report shows it: a manifest left ``running`` by a process
    that has ended says ``interrupted`` (:func:`deep500.results.files.run_status`)."""
    status, why = run_status(manifest)
    if not status:
        return None
    failure = manifest.get("failure")
    if isinstance(failure, dict):
        status += f" (rank {failure.get('rank')}: {failure.get('error')})"
    if why:
        status += f" ({why})"
    if manifest.get("status") != "complete" and "configurations_recorded" in manifest:
        status += (f"; {manifest['configurations_recorded']} of "
                   f"{manifest.get('configurations')} configurations recorded")
    if manifest.get("sessions"):
        status += (f"; session {manifest.get('session')} of a folder run "
                   f"{len(manifest['sessions']) + 1} times (--append), all reported")
    return status


def _fairness(manifest: dict, records=()) -> str:
    fixed = (manifest.get("recipe", {}).get("content") or {}).get("fixed", {})
    held = ", ".join(f"{k} = {v}" for k, v in fixed.items()) or "nothing beyond the defaults"
    return ("Held equal in every comparison: the same inputs (generated from the seed), "
            f"and the fixed components ({held}). Each framework is timed on its own "
            "tensors; conversions and layout changes (TensorFlow convolutions run in "
            "NHWC) happen outside the timed region of operators." + _fed_inputs(records))


def _fed_inputs(records) -> str:
    """Which dataset field feeds each graph input of an ONNX file whose inputs are not
    named as the dataset's fields (``network: {file: ..., inputs: ...}``, or a
    single-input model)."""
    said = {}
    for record in records:
        network = (record.get("configuration") or {}).get("network")
        if isinstance(network, dict) and network.get("file") and network.get("inputs"):
            said[os.path.basename(network["file"])] = network["inputs"]
    return "".join(f" The ONNX file {name} is fed by the dataset: " + ", ".join(
        f"its input {k} takes the field {v}" for k, v in sorted(inputs.items())) + "."
        for name, inputs in sorted(said.items()))


def write_reports(output_dir: str, per_seed: bool = False,
                  figure_format: str | None = "svg", samples: str | None = None) -> list[str]:
    """Write report.md and report.html for the run in ``output_dir``; return their paths.

    ``per_seed``: one row per seed instead of runs of several seeds aggregated (mean and
    95% CI); ``figure_format``: every plot is written as PNG (embedded in the HTML) and
    also in this format (``svg``, ``pdf``; ``None``: PNG only); ``samples``: draw raw
    samples of time per call as ``violin`` or ``histogram`` (``None``: not drawn)."""
    check_figure_format(figure_format)
    check_sample_style(samples)
    records = report_records(output_dir)
    with records_kept_out_of_collection():
        return _write_reports(output_dir, records, per_seed, figure_format, samples)


def _write_reports(output_dir, records, per_seed, figure_format, samples=None) -> list[str]:
    manifest = read_manifest(output_dir)
    context = ReportContext(manifest, per_seed=per_seed, figure_format=figure_format,
                            samples=samples)
    sections = fit_sections([section.build(_records_of(section, records), output_dir,
                                           context) for section in SECTIONS], output_dir)
    title = f"Deep500 report — {manifest.get('recipe', {}).get('name', output_dir)}"
    counts = count_outcomes(records)  # the same counts deep500 run prints
    verdict = counts.sentence() + "."
    noise = counts.interference_sentence()  # the line under it: can the verdict be trusted
    return [_markdown(output_dir, title, verdict + (f"\n\n{noise}" if noise else ""),
                      manifest, sections, figure_format, records),
            _html(output_dir, title, verdict, counts.ok, manifest, sections,
                  figure_format, records, noise)]


def _figure_link(output_dir, path, figure_format) -> str:
    other = companion(path, figure_format)
    if other is None or not os.path.isfile(other):
        return ""
    return f" ([{figure_format.upper()}]({os.path.relpath(other, output_dir)}))"


def _markdown(output_dir, title, verdict, manifest, sections, figure_format=None,
              records=()) -> str:
    banner = cluster_banner(manifest)
    parts = [f"# {title}", "", *([f"> **{banner}**", ""] if banner else []), verdict, "",
             _fairness(manifest, records), "", _run_table(manifest).markdown()]
    for section in sections:
        for table in section["tables"]:
            parts.append(table.markdown())
        for caption, path in section["plots"]:
            parts.append(f"![{caption}]({os.path.relpath(path, output_dir)})"
                         f"{_figure_link(output_dir, path, figure_format)}\n")
        if section["warnings"]:
            parts.append("**Measurement warnings**\n")
            parts += [f"- {w}" for w in section["warnings"]]
            parts.append("")
    return write_atomically(os.path.join(output_dir, "report.md"), "\n".join(parts))


def _html(output_dir, title, verdict, ok, manifest, sections, figure_format=None,
          records=(), noise=None) -> str:
    banner = cluster_banner(manifest)
    body = [f"<h1>{html.escape(title)}</h1>",
            *([f"<p class='warn'><strong>{html.escape(banner)}</strong></p>"]
              if banner else []),
            f"<p class='{'ok' if ok else 'fail'}'>{html.escape(verdict)}</p>",
            *([f"<p class='{'warn' if noise.startswith('⚠') else 'ok'}'>"
               f"{html.escape(noise)}</p>"] if noise else []),
            f"<p>{html.escape(_fairness(manifest, records))}</p>",
            _run_table(manifest).html()]
    for section in sections:
        body += [table.html() for table in section["tables"]]
        for caption, path in section["plots"]:
            with open(path, "rb") as handle:
                data = base64.b64encode(handle.read()).decode()
            other = companion(path, figure_format)
            link = (f" (<a href='{html.escape(os.path.relpath(other, output_dir))}'>"
                    f"{figure_format.upper()}</a>)"
                    if other is not None and os.path.isfile(other) else "")
            body.append(f"<figure><img alt='{html.escape(caption)}' "
                        f"src='data:image/png;base64,{data}'><figcaption>"
                        f"{html.escape(caption)}{link}</figcaption></figure>")
        if section["warnings"]:
            body.append("<h3>Measurement warnings</h3><ul>" + "".join(
                f"<li>{html.escape(w)}</li>" for w in section["warnings"]) + "</ul>")
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{_STYLE}</style></head><body>{''.join(body)}</body></html>")
    return write_atomically(os.path.join(output_dir, "report.html"), page)
