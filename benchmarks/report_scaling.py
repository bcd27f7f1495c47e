"""``deep500 report`` at scale: the time and peak memory of rebuilding the report of a
run folder with 100k records.

Target (issue 29): 100k records (1k configurations × 100 seeds, or 10 configurations
× 10k seeds) reported in at most 60 s, with a peak resident set of at most 3× the size
of ``results.jsonl``.

The run folder is made here, in a temporary folder:

1. a small operator recipe (Relu and Gemm on the reference framework, one seed) is run
   by ``deep500 run``, so the records are exactly what the operator experiment writes
   (telemetry, its series, metric samples, conditions, warnings);
2. its records are the templates of ``--configurations`` × ``--seeds`` records: each
   configuration an operator of its own shape (Relu ``64×n``, Gemm ``n×16·16×8``),
   each seed a record whose times are the template's scaled by a random factor; the
   manifest is the real run's, its recipe's ``mutable`` listing every shape and seed,
   as the recipe of such a run would;
3. ``deep500 report DIR`` runs in a child process of a small Python process that
   prints the peak resident set of its children (``getrusage(RUSAGE_CHILDREN)``),
   so nothing else this script started counts.

The last line printed is ``report of 100k records: X s, peak Y MB`` (for other counts,
the count it had). Timings depend on the machine's load: ``uptime`` is printed too.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import time

from benchmark_targets import TARGETS, add_check_option, expected_run_time
from run_time_estimates import report_scaling

RECIPE = textwrap.dedent("""
    name: report-scaling
    fixed: {dtype: float32, device: cpu, framework: reference}
    mutable:
      operator:
        - {op: Relu, shape: [64, 256]}
        - {op: Gemm, inputs: [[32, 16], [16, 8]]}
    metrics:
      WallclockTime: {reruns: 8, warmup: 2}
      FLOPs: {}
      L2Error: {}
    acceptance: ["L2Error.relative <= 1e-4"]
""")

# Runs in its own process: the report is its only child, so RUSAGE_CHILDREN's maximum
# resident set (KiB on Linux) is the report's.
_MEASURE = textwrap.dedent("""
    import json, resource, subprocess, sys, time
    start = time.perf_counter()
    done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"rc": done.returncode, "seconds": seconds,
                      "cpu_seconds": usage.ru_utime + usage.ru_stime,
                      "peak_bytes": usage.ru_maxrss * 1024,
                      "stderr": done.stderr[-4000:]}))
""")


def _deep500(*args: str) -> list[str]:
    return [sys.executable, "-m", "deep500", *args]


def template_run(folder: str) -> tuple[list[dict], dict]:
    """Run the small recipe; return its records and manifest."""
    recipe = os.path.join(folder, "template.yaml")
    with open(recipe, "w", encoding="utf-8") as handle:
        handle.write(RECIPE)
    out = os.path.join(folder, "template")
    subprocess.run(_deep500("run", recipe, "--out", out), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder)
    with open(os.path.join(out, "results.jsonl"), encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as handle:
        manifest = json.load(handle)
    return records, manifest


def _scale_metrics(record: dict, factor: float) -> None:
    for entry in record["result"]["metrics"]:
        summary = entry["summary"]
        if entry["metric"] == "WallclockTime":
            for key in ("median", "ci_low", "ci_high", "min", "max", "mean", "std"):
                if isinstance(summary.get(key), float):
                    summary[key] *= factor
            entry["samples"] = [s * factor for s in entry["samples"]]
        elif entry["metric"] == "FLOPs" and isinstance(summary.get("gflops_per_s"), float):
            summary["gflops_per_s"] /= factor


def _operator(template: dict, number: int) -> tuple[dict, dict]:
    """The configuration's operator (as the record carries it) and its recipe entry."""
    operator = json.loads(json.dumps(template["configuration"]["operator"]))
    n = 16 + number
    if operator["op_type"] == "Relu":
        operator["input_shapes"] = [[64, n]]
        operator["label"] = f"Relu 64x{n}"
        return operator, {"op": "Relu", "shape": [64, n]}
    operator["input_shapes"] = [[n, 16], [16, 8]]
    operator["label"] = f"Gemm {n}x16 × 16x8"
    return operator, {"op": "Gemm", "inputs": [[n, 16], [16, 8]]}


def write_run_folder(folder: str, templates: list[dict], manifest: dict,
                     configurations: int, seeds: int) -> str:
    """The run folder of ``configurations`` × ``seeds`` records; returns its path."""
    rng = random.Random(0)
    out = os.path.join(folder, "run")
    os.makedirs(out)
    entries = []
    with open(os.path.join(out, "results.jsonl"), "w", encoding="utf-8") as handle:
        for number in range(configurations):
            template = templates[number % len(templates)]
            operator, entry = _operator(template, number)
            entries.append(entry)
            base = 1.0 + number / configurations
            for seed in range(seeds):
                record = json.loads(json.dumps(template))
                record["configuration"]["operator"] = operator
                record["configuration"]["seed"] = seed
                record["index"] = number * seeds + seed
                record["label"] = (f"{operator['label']} | "
                                   f"{record['configuration']['framework']} | seed={seed}")
                _scale_metrics(record, base * rng.uniform(0.9, 1.1))
                handle.write(json.dumps(record) + "\n")
    total = configurations * seeds
    manifest = json.loads(json.dumps(manifest))
    manifest["recipe"]["content"]["mutable"] = {"operator": entries,
                                                "seed": list(range(seeds))}
    manifest.update(configurations=total, configurations_recorded=total, records=total,
                    measurements=total, records_by_kind={"measurement": total})
    with open(os.path.join(out, "manifest.json"), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2)
    return out


def measure_report(run_folder: str, timeout: float) -> dict:
    """Wall and CPU seconds and peak resident bytes of ``deep500 report run_folder``."""
    done = subprocess.run([sys.executable, "-c", _MEASURE,
                           *_deep500("report", run_folder)],
                          capture_output=True, text=True, timeout=timeout, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configurations", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds the report may take before it is stopped")
    parser.add_argument("--keep", metavar="DIR",
                        help="build the run folder in DIR (kept) instead of a temporary one")
    add_check_option(parser)
    args = parser.parse_args()
    total = args.configurations * args.seeds
    expected_run_time(*report_scaling(total))
    with tempfile.TemporaryDirectory(prefix="d5-report-scaling-") as scratch:
        folder = args.keep or scratch
        os.makedirs(folder, exist_ok=True)
        started = time.perf_counter()
        templates, manifest = template_run(folder)
        run_folder = write_run_folder(folder, templates, manifest, args.configurations,
                                      args.seeds)
        size = os.path.getsize(os.path.join(run_folder, "results.jsonl"))
        print(f"run folder: {args.configurations} configurations × {args.seeds} seeds = "
              f"{total} records, written in {time.perf_counter() - started:.1f} s")
        print(f"results.jsonl: {size / 1e6:.1f} MB ({size / total:.0f} bytes a record)")
        print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
        result = measure_report(run_folder, args.timeout)
        if result["rc"] != 0:
            print(f"deep500 report failed (exit {result['rc']}):\n{result['stderr']}")
            return 1
        peak = result["peak_bytes"]
        # The targets are stated for 100k records; at small counts the report's fixed
        # memory (its imports) alone is many times a small results.jsonl.
        at_target_size = total == 100_000
        TARGETS.judge("report peak <= 3x results.jsonl", peak <= 3 * size
                      if at_target_size else None)
        TARGETS.judge("report of 100k records <= 60 s", result["seconds"] <= 60
                      if at_target_size else None)
        print(f"peak / results.jsonl: {peak / size:.2f}× (target at most 3×); "
              f"CPU time {result['cpu_seconds']:.1f} s (target for the wall time: at most "
              f"60 s; on a loaded machine the wall time exceeds the CPU time)")
        count = f"{total // 1000}k" if total % 1000 == 0 else str(total)
        print(f"report of {count} records: {result['seconds']:.1f} s, "
              f"peak {peak / 1e6:.0f} MB")
    return TARGETS.exit_status(args.check)


if __name__ == "__main__":
    sys.exit(main())
