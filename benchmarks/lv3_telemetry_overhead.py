"""Cost of telemetry and the timeline on a distributed training step, under
``mpirun -np 2``.

What ``deep500 run`` adds to a distributed training when a recipe asks for it: the
telemetry sampler (``TelemetrySampler``, every ``--interval`` s, reading /proc,
getrusage and the scheme's ``communication`` probe) and the ``Timeline`` metric's
phase events (``record_timeline``: the first 5 steps and every 10th recorded). Per
model and scheme mode (blocking MPI allreduce; overlapped buckets), on the digits,
reference executor, reference SGD, batch 16 per rank, 1 thread per rank, three
variants alternate in paired rounds of ``--steps`` steps (the order rotates every
round, so drift and order effects cancel):

* ``off``: neither (the scheme's probe is registered, as always, but no sampler reads
  it);
* ``on``: the sampler and the timeline as ``deep500 run`` uses them;
* ``on, every step``: the sampler and a timeline recording every step (the worst
  case of the recorder).

A round's figure is the mean step time of the slower rank (each rank's round wall
time / steps; the ranks' steps are synchronous). The cost of a variant is the median
over rounds of its ratio to the ``off`` round next to it, minus one, with the 95%
nonparametric CI of that median (Hoefler & Belli, SC'15). Target: <= 1% of a training
step, judged on the CI (MET: all of it below 1%; NOT MET: all above; else
UNRESOLVED).

Direct costs, which a busy machine does not blur: the sampling thread's CPU time per
sample (RUSAGE_THREAD, as the record's ``sampler_cpu_s``) as a share of the interval
(the most it can take from a rank that keeps its core busy, plus one GIL hand-over per
tick), and the recorder's time per event (``TimelineRecorder.add``, timed over 10^5
calls) times the events of a recorded step, as a share of the step.

Last line: ``telemetry + timeline cost: X% of a step ...: MET|NOT MET|UNRESOLVED``, X
the largest median cost of the ``on`` variant over models and modes, the verdict over
all of them (MET only if every row is).

Run:  python benchmarks/lv3_telemetry_overhead.py [--rounds 15] [--steps 150]
        [--interval 0.05] [--models N] [--smoke]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import deep500 as d5  # noqa: E402
from deep500.frameworks import reference as d5ref  # noqa: E402
from deep500.lv3_distributed import guarded_main, in_mpi_world, mpi_fork  # noqa: E402
from deep500.networks import create_model  # noqa: E402
from deep500.utils.statistics import median_ci  # noqa: E402
from deep500.utils.telemetry import TelemetrySampler  # noqa: E402
from benchmark_targets import TARGETS, add_check_option, expected_run_time  # noqa: E402

MODELS = {"mlp 64-128-64-10 (distributed.yaml)": (128, 64),
          "mlp 64-512-512-10": (512, 512)}
MODES = {"blocking": {}, "overlapped": {"overlap": True, "bucket_bytes": 1 << 16,
                                        "compute_only_every": 0}}
VARIANTS = ("off", "on", "on, every step")
BATCH = 16
TARGET = 0.01


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=150, help="steps per round")
    parser.add_argument("--interval", type=float, default=0.05, help="sampler interval, s")
    parser.add_argument("--models", type=int, default=len(MODELS),
                        help="measure only the first N models")
    parser.add_argument("--smoke", action="store_true", help="3 rounds of 30 steps, the "
                        "first model only")
    add_check_option(parser)
    return parser.parse_args()


def verdict(low: float, high: float) -> str:
    if high <= TARGET:
        return "MET"
    if low > TARGET:
        return "NOT MET"
    return "UNRESOLVED"


def timeline_event_seconds(calls: int = 100_000) -> float:
    """Seconds per ``TimelineRecorder.add`` of a recorded step (the scheme's call site:
    two clock readings and the add)."""
    from deep500.lv3_distributed.timeline import COMPUTE, TimelineRecorder, _clock
    recorder = TimelineRecorder(capacity=calls, first_steps=1, every=0)
    recorder.begin_step()
    add = recorder.add
    started = _clock()
    for _ in range(calls):
        t0 = _clock()
        add("update", COMPUTE, t0, _clock())
    return (_clock() - started) / calls


def one_round(comm, scheme, batches, steps: int, variant: str, interval: float):
    """(slower rank's mean step seconds, sampler CPU s per sample or None, events)."""
    sampler, recorder = None, None
    if variant != "off":
        recorder = scheme.record_timeline(capacity=100_000, first_steps=5,
                                          every=1 if variant == "on, every step" else 10)
        sampler = TelemetrySampler(interval_s=interval, threads=1, mpi_job=True)
    comm.comm.Barrier()
    if sampler is not None:
        sampler.start()  # as the runner: started before the measured work
    started = time.perf_counter()
    for i in range(steps):
        scheme.step(batches[i % len(batches)])
    seconds = time.perf_counter() - started
    per_sample = events = None
    if sampler is not None:
        summary = sampler.stop()
        per_sample = summary["sampler_cpu_s"] / max(1, summary["samples"] - 2)
        events = scheme.stop_timeline().count
    slowest = max(comm.comm.allgather(seconds / steps))
    return slowest, per_sample, events


def main(args) -> int:
    comm = d5.CommunicationNetwork()
    if comm.size != 2:
        print("lv3_telemetry_overhead: run it as a plain script; it starts 2 ranks itself")
        return 2
    train, _ = d5.load_dataset("digits", normalize="standardize")
    rounds, steps = (3, 30) if args.smoke else (args.rounds, args.steps)
    models = dict(list(MODELS.items())[:1 if args.smoke else args.models])
    lead = comm.rank == 0
    if lead:
        print(f"# 2 ranks, reference executor, SGD, batch {BATCH} per rank, 1 thread per "
              f"rank, MPI allreduce; sampler every {args.interval * 1e3:g} ms; timeline "
              f"first 5 steps + every 10th; {rounds} paired rounds of {steps} steps")
        print(f"{'model':38s} {'mode':>10s} {'step ms':>8s} {'variant':>15s} "
              f"{'cost':>8s} {'95% CI':>19s} {'verdict':>10s} {'sampler µs/sample':>18s}")
    worst, direct = [], []
    event_s = timeline_event_seconds()
    for name, hidden in models.items():
        for mode, options in MODES.items():
            proto = create_model("mlp", input_shape=(1, 8, 8), hidden=hidden, classes=10,
                                 loss="softmax_cross_entropy", seed=0)
            executor = d5ref.from_onnx(proto)
            base = d5ref.GradientDescent(executor, learning_rate=0.01)
            scheme = d5ref.ConsistentDecentralized(base, comm, algorithm="mpi", **options)
            sampler = d5.DistributedSampler(train, BATCH, comm, seed=0)
            batches = [batch for _, batch in zip(range(20), sampler)]
            started = time.perf_counter()
            for i in range(10):  # warm-up: buffers, buckets, caches
                scheme.step(batches[i % len(batches)])
            if lead and not worst and not direct and mode == next(iter(MODES)):
                step_s = (time.perf_counter() - started) / 10
                total = len(models) * len(MODES) * rounds * len(VARIANTS) * steps * step_s
                expected_run_time(total, f"{len(models)} models x {len(MODES)} modes x "
                                  f"{rounds} rounds x {len(VARIANTS)} variants x {steps} "
                                  f"steps at the first configuration's warm-up step of "
                                  f"{step_s * 1e3:.1f} ms; the larger model's steps are "
                                  f"slower")
            times = {v: [] for v in VARIANTS}
            per_sample, events_per_step = [], []
            for r in range(rounds):
                order = VARIANTS[r % 3:] + VARIANTS[:r % 3]
                for variant in order:
                    seconds, cost, events = one_round(comm, scheme, batches, steps,
                                                      variant, args.interval)
                    times[variant].append(seconds)
                    if variant == "on, every step":
                        events_per_step.append(events / steps)
                    if cost is not None:
                        per_sample.append(cost)
            scheme.close()
            if not lead:
                continue
            off = np.asarray(times["off"])
            events = float(np.median(events_per_step)) if events_per_step else 0.0
            share = np.median(per_sample) / args.interval if per_sample else float("nan")
            direct.append((name, mode, share, events * event_s / float(np.median(off))))
            print(f"{name:38s} {mode:>10s} {np.median(off) * 1e3:8.3f} {'off':>15s}")
            for variant in VARIANTS[1:]:
                ratios = np.asarray(times[variant]) / off - 1.0
                cost = float(np.median(ratios))
                low, high, _ = median_ci(ratios)
                if variant == "on":
                    worst.append((cost, low, high))
                print(f"{'':38s} {'':>10s} {np.median(times[variant]) * 1e3:8.3f} "
                      f"{variant:>15s} {cost:+8.2%} [{low:+8.2%}, {high:+8.2%}] "
                      f"{verdict(low, high):>10s} "
                      f"{np.median(per_sample) * 1e6 if per_sample else float('nan'):18.1f}")
    comm.close()
    if lead and direct:
        print(f"# direct costs: timeline {event_s * 1e9:.0f} ns per event")
        for name, mode, share, timeline_share in direct:
            print(f"{name:38s} {mode:>10s} sampler thread {share:6.2%} of a core; "
                  f"timeline {timeline_share:6.3%} of a step when every step is recorded")
    if lead and worst:
        cost, low, high = max(worst)
        verdicts = {verdict(lo, hi) for _, lo, hi in worst}
        overall = TARGETS.record("telemetry + timeline cost",
                                 "NOT MET" if "NOT MET" in verdicts else
                                 "UNRESOLVED" if "UNRESOLVED" in verdicts else "MET")
        print(f"telemetry + timeline cost: {cost:+.2%} of a step (largest median; 95% CI "
              f"[{low:+.2%}, {high:+.2%}]; target <= 1% on every row): {overall}")
    return TARGETS.exit_status(args.check) if lead else 0


if __name__ == "__main__":
    arguments = parse()
    if not in_mpi_world():
        mpi_fork(2)
    with guarded_main():
        sys.exit(main(arguments))
