"""Overhead of Deep500's level-0 measurement against PyTorch's own benchmark timer.

For every operator size of the quickstart recipe, the same PyTorch call (the closure
``d5pt.native_operator(...).native_call`` returns, on prepared tensors) is timed by

  * baseline: ``torch.utils.benchmark.Timer.blocked_autorange`` (loops of many calls,
    per-call time = block time / calls, median over blocks), and
  * Deep500:  ``d5.test_op_forward`` with ``d5.WallclockTime`` (every call timed on its
    own with ``perf_counter_ns``, median over calls),

alternating the two for several rounds, with the same thread count. Overhead is the
Deep500 median over the Timer median, minus one. Target: median overhead <= 1%.

Run:  python benchmarks/lv0_overhead.py [--rounds 5] [--threads 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import deep500 as d5  # noqa: E402
import deep500.frameworks.pytorch as d5pt  # noqa: E402
from deep500.recipe import load_recipe  # noqa: E402
from deep500.recipe.runner import make_inputs  # noqa: E402
from deep500.utils.threads import set_thread_counts  # noqa: E402


def measure_size(spec, threads: int, rounds: int, seconds: float):
    from torch.utils.benchmark import Timer
    op = d5pt.native_operator(spec.op_type, **spec.attributes)
    inputs = make_inputs(spec, "float32", 0)
    call, _ = op.native_call(inputs)
    timer = Timer(stmt="call()", globals={"call": call}, num_threads=threads,
                  label="lv0_overhead", description=spec.label)
    baseline_medians, deep500_medians = [], []
    per_call = timer.timeit(3).median  # sizes the Deep500 rerun count to ~`seconds`
    reruns = int(min(max(seconds / max(per_call, 1e-9), 20), 20000))
    for _ in range(rounds):
        baseline_medians.append(timer.blocked_autorange(min_run_time=seconds).median)
        # The same call through the level-0 validation path the recipes use.
        result = d5.test_op_forward(op, inputs, metrics=[d5.WallclockTime(reruns, warmup=2)])
        deep500_medians.append(result["WallclockTime"].summary["median"])
    baseline = statistics.median(baseline_medians)
    measured = statistics.median(deep500_medians)
    return baseline, measured, reruns


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default=os.path.join(REPO, "recipes", "quickstart.yaml"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.2,
                        help="time per measurement and method in each round")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    # Wide intervals are visible in the round-to-round spread; keep the table readable.
    warnings.simplefilter("ignore", d5.UnstableMeasurementWarning)
    set_thread_counts(args.threads)
    specs = []
    for configuration in load_recipe(args.recipe).configurations():
        if configuration["operator"] not in specs:
            specs.append(configuration["operator"])
    print(f"Baseline: torch.utils.benchmark.Timer.blocked_autorange; measured: "
          f"d5.test_op_forward + d5.WallclockTime; {args.threads} threads, "
          f"{args.rounds} alternating rounds, median of round medians")
    print(f"{'operator':<44} {'Timer':>11} {'Deep500':>11} {'reruns':>7} {'overhead':>9}")
    overheads = []
    for spec in specs:
        baseline, measured, reruns = measure_size(spec, args.threads, args.rounds,
                                                  args.seconds)
        overhead = measured / baseline - 1.0
        overheads.append(overhead)
        print(f"{spec.label:<44} {baseline * 1e6:>9.1f}µs {measured * 1e6:>9.1f}µs "
              f"{reruns:>7} {overhead:>+8.2%}")
    median = float(np.median(overheads))
    print(f"median overhead: {median:+.2%} (target <= +1.00%): "
          f"{'MET' if median <= 0.01 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
