"""Overhead of Deep500's level-0 timing against PyTorch's own benchmark timer.

For every operator size of the quickstart recipe, the same PyTorch call (the closure
``d5pt.native_operator(...).native_call`` returns, on prepared tensors) is timed by

  * baseline: ``torch.utils.benchmark.Timer.timeit(k)`` — max(k/100, 2) warm-up calls,
    then one loop of k calls, time per call = loop time / k;
  * Deep500:  ``d5.test_op_forward`` with ``d5.WallclockTime(reruns=k)`` — every call
    timed on its own with ``perf_counter_ns`` and bracketed by the metric protocol, the
    path recipes use, after the same warm-up; time per call = mean of the k samples.

Both see the same thread count. The two alternate in paired rounds of ~25 ms each (the
order flips every round, so drift and order effects cancel); each round gives a ratio
Deep500 / Timer of the mean time per call, and the overhead of a size is the median
ratio minus one. Means, not medians, are compared because the overhead is extra time per
call: the Timer only yields loop means. Target: median overhead over sizes <= 1%.

The absolute cost per measured call is also printed: both methods timing an empty call.

Run:  python benchmarks/lv0_overhead.py [--rounds 30] [--threads 2]
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
from deep500.recipe.experiments.operators import make_inputs  # noqa: E402
from deep500.utils.threads import set_thread_counts  # noqa: E402


class _Call(d5.CustomOp):
    """Wraps a prepared call so test_op_forward times exactly it."""
    framework = "pytorch"

    def __init__(self, call, op_type):
        super().__init__()
        self.call = call
        self.op_type = op_type

    def native_call(self, inputs):
        return self.call, lambda result: ()


def paired_ratios(call, op_type: str, threads: int, rounds: int, round_seconds: float):
    """Per round: (Deep500 mean per call, Timer mean per call)."""
    from torch.utils.benchmark import Timer
    timer = Timer(stmt="call()", globals={"call": call}, num_threads=threads)
    per_call = timer.timeit(5).mean
    calls = int(min(max(round_seconds / max(per_call, 1e-9), 5), 200000))
    measured = _Call(call, op_type)
    pairs = []
    for index in range(rounds):
        def deep500_round():
            # The same warm-up as Timer.timeit does before its loop.
            metric = d5.WallclockTime(reruns=calls, warmup=max(calls // 100, 2))
            return d5.test_op_forward(measured, [], metrics=[metric])[
                "WallclockTime"].summary["mean"]
        if index % 2:
            baseline = timer.timeit(calls).mean
            ours = deep500_round()
        else:
            ours = deep500_round()
            baseline = timer.timeit(calls).mean
        pairs.append((ours, baseline))
    return pairs, calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default=os.path.join(REPO, "recipes", "quickstart.yaml"))
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--round-seconds", type=float, default=0.025)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    # Run-to-run spread shows in the rounds; keep the table readable.
    warnings.simplefilter("ignore", d5.UnstableMeasurementWarning)
    set_thread_counts(args.threads)
    specs = []
    for configuration in load_recipe(args.recipe).configurations():
        if configuration["operator"] not in specs:
            specs.append(configuration["operator"])
    print("Baseline: torch.utils.benchmark.Timer.timeit; measured: d5.test_op_forward + "
          f"d5.WallclockTime; {args.threads} threads; {args.rounds} paired rounds per size")

    empty, _ = paired_ratios(lambda: None, "empty", args.threads, args.rounds,
                             args.round_seconds)
    ours_empty = statistics.median(p[0] for p in empty)
    timer_empty = statistics.median(p[1] for p in empty)
    print(f"empty call: Deep500 {ours_empty * 1e9:.0f} ns, Timer {timer_empty * 1e9:.0f} ns "
          f"per call (cost of the measuring itself: {(ours_empty - timer_empty) * 1e9:+.0f} ns)")
    print(f"{'operator':<34} {'Timer':>10} {'Deep500':>10} {'calls':>6} {'overhead':>9} "
          f"{'IQR of rounds':>16}")
    overheads = []
    for spec in specs:
        op = d5pt.native_operator(spec.op_type, **spec.attributes)
        call, _ = op.native_call(make_inputs(spec, "float32", 0))
        pairs, calls = paired_ratios(call, spec.op_type, args.threads, args.rounds,
                                     args.round_seconds)
        ratios = np.array([ours / base for ours, base in pairs])
        overhead = float(np.median(ratios)) - 1.0
        low, high = np.percentile(ratios, [25, 75]) - 1.0
        overheads.append(overhead)
        print(f"{spec.label:<34} {statistics.median(p[1] for p in pairs) * 1e6:>8.1f}µs "
              f"{statistics.median(p[0] for p in pairs) * 1e6:>8.1f}µs {calls:>6} "
              f"{overhead:>+8.2%} [{low:+.1%}, {high:+.1%}]")
    median = float(np.median(overheads))
    print(f"median overhead over sizes: {median:+.2%} (target <= +1.00%): "
          f"{'MET' if median <= 0.01 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
