"""Per-layer time models against measurement: for MLP, LeNet and ResNet-20 on the
reference and PyTorch executors, each ONNX node's measured forward and backward time
(``OperatorTimes`` with backprop) against three models:

* **roofline**: max(FLOPs / peak, bytes / bandwidth) (``cost_model.roofline_time``)
  plus one fixed per-node overhead per direction and executor (the median time of the
  nodes with the smallest roofline times, ``layer_profile.fit_overhead``); printed
  for reference, it is not one of the two models of the last line;
* **analytic** (calibrated): per operator type and direction, t = o + s·max(compute,
  bytes / bandwidth), compute being the measured seconds of the node's matrix
  products at their own sizes (``gemm_rate.GemmRate``, NumPy's; with
  ``--torch-gemm`` PyTorch's nodes get torch.matmul's) for Conv/Gemm/MatMul and
  FLOPs / peak otherwise; o and s fitted by least absolute error on the training
  profiles, each profile's nodes relative to its pass time
  (``layer_profile.fit_calibration``);
* **learned**: gradient boosting on operator shape features, the GEMM's sizes and
  measured time, and the network's working set (``learned_model``);
* **mlp**: the same features, targets and weights, one multilayer perceptron per
  operator type (``per_kernel_mlp``, Catalán's per-kernel networks); printed beside
  the two, with its median on the line before the target line.

Split (leave-one-model-out): each evaluated model (MLP, LeNet, ResNet-20 at batch
``--batch``) is predicted by models fitted only on profiles of *other* networks: the
two other evaluated models and auxiliary networks that are never evaluated (MLPs of
other widths and inputs, LeNet on 3×32×32, WRN-10-1 and WRN-10-2), each at the
training batch sizes (``--train-batches``) and at ``--batch``. So no layer of the
evaluated model, at any batch size, is in its training set. The GEMM times are an
isolated BLAS call per product size, not a measurement of any network.

Measurement: ``--rounds`` rounds, each profiling every network, batch and executor in
turn (``--reruns`` timed runs after ``--warmup``, a node's median over them); a node's
time is then the smallest of its rounds (``--merge min``, the round least disturbed by
other jobs on a shared machine: contention only adds time) or their median
(``layer_profile.merge_profiles``). Interleaving the rounds keeps a burst of load from
falling on one network only.

Error: the time-weighted error of Catalán's thesis, Σ|pred − meas| / Σ meas over the
nodes of a step, forward, backward, and both together ("step"); and the relative error
of the step time. The table lists the step's weighted error per model × executor; the
line before the last says, per model × executor, whether the 10 % target is met and by
which model. Last line: ``per-layer model weighted error: analytic X%, learned Y%``,
each the median over model × executor of the step's weighted error (forward and
backward nodes together).

Machine: ``--machine FILE`` (from ``deep500 calibrate``), else measured here: GEMM
FLOP/s as the best of a few float32 1024³ NumPy matmuls (at ``--threads``, the
threads the executors get) and memory bandwidth from a NumPy triad a = b + s·c on 32 MB
arrays (3 arrays of traffic counted, as STREAM does). The GEMM times per size are
always measured here.

Run:  python benchmarks/lv1_layer_models.py [--machine FILE] [--batch 8] [--reruns 7]
        [--rounds 5] [--smoke]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from benchmark_targets import TARGETS, add_check_option, expected_run_time
import run_time_estimates

# Whose matrix product each executor's GEMM times come from (gemm_rate.GemmRate) with
# --torch-gemm; without it NumPy's for both.
LIBRARY = {"reference": "numpy", "pytorch": "torch"}
EVALUATED = [("mlp", "mlp", {}), ("lenet", "lenet", {}), ("resnet20", "resnet20", {})]
AUXILIARY = [("mlp-3x32x32", "mlp", dict(input_shape=(3, 32, 32), hidden=(256, 128))),
             ("lenet-3x32x32", "lenet", dict(input_shape=(3, 32, 32))),
             ("wrn10-1", "wide_resnet", dict(depth=10, width=1)),
             ("wrn10-2", "wide_resnet", dict(depth=10, width=2)),
             # MLPs of other widths and inputs: the region of small fully connected
             # layers (and of networks whose weights fit in L2) that the evaluated MLP
             # lies in, covered on both sides without its own layer shapes.
             ("mlp-32-32", "mlp", dict(hidden=(32, 32))),
             ("mlp-64", "mlp", dict(hidden=(64,))),
             ("mlp-96-48", "mlp", dict(hidden=(96, 48))),
             ("mlp-24x24-160-80", "mlp", dict(input_shape=(1, 24, 24), hidden=(160, 80))),
             ("mlp-192", "mlp", dict(hidden=(192,))),
             ("mlp-256-32-32", "mlp", dict(hidden=(256, 32, 32))),
             ("mlp-512-256", "mlp", dict(hidden=(512, 256))),
             ("mlp-1024", "mlp", dict(hidden=(1024,)))]


class MeasuredMachine:
    """The two numbers the roofline needs, measured here with NumPy."""

    def __init__(self, quick: bool = False):
        n = 256 if quick else 1024
        a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
        a @ a
        best = min(_timed(lambda: a @ a) for _ in range(3 if quick else 5))
        self.gemm = 2 * n ** 3 / best
        m = (1 << 20) if quick else (8 << 20)      # float32 elements: 4 or 32 MB
        b = np.ones(m, np.float32)
        c = np.ones(m, np.float32)
        out = np.empty(m, np.float32)

        def triad():
            np.multiply(c, np.float32(3.0), out=out)
            np.add(out, b, out=out)
        triad()
        # Counted as STREAM's triad (read b, c; write a): 3 arrays; NumPy's two passes
        # actually move 5 (a written, read back, written), so this is what NumPy
        # elementwise code achieves, the rate the executors' elementwise nodes see.
        best = min(_timed(triad) for _ in range(5))
        self.memory_bandwidth = 3 * 4 * m / best

    def peak_flops(self, threads: int = 1, kind: str = "gemm") -> float:
        return self.gemm


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _executors(only_reference: bool):
    import deep500.frameworks.reference as d5ref
    found = [("reference", d5ref.from_onnx)]
    if not only_reference:
        try:
            import deep500.frameworks.pytorch as d5pt
            found.append(("pytorch", d5pt.from_onnx))
        except ImportError:
            print("# PyTorch not installed: reference executor only")
    return found


def _limit_threads(threads: int) -> int:
    """Run NumPy's BLAS and PyTorch on ``threads`` threads (threadpoolctl, which
    scikit-learn brings; torch.set_num_threads)."""
    import threadpoolctl
    threadpoolctl.threadpool_limits(threads)
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:
        pass
    return threads


def profile_all(networks, batches, executors, reruns, warmup, rounds=1,
                statistic="median"):
    """Profiles of every network × batch × executor: ``rounds`` rounds of each in turn,
    merged per node by ``statistic`` over the rounds (``merge_profiles``)."""
    from deep500.lv1_network.layer_profile import measure_profile, merge_profiles
    from deep500.networks import create_model
    from deep500.recipe.experiments.networks import make_inputs
    cases = []
    for label, name, kwargs in networks:
        for batch in batches:
            model = create_model(name, batch_size=batch, loss="softmax_cross_entropy",
                                 **kwargs)
            inputs = make_inputs(model, batch, 0, 10)
            for executor_name, factory in executors:
                cases.append((label, batch, executor_name, model, factory(model), inputs))
    runs = {}
    for _ in range(rounds):
        for label, batch, executor_name, model, executor, inputs in cases:
            runs.setdefault((label, batch, executor_name), []).append(measure_profile(
                model, executor, inputs, reruns=reruns, warmup=warmup, name=label,
                executor_name=executor_name, batch=batch))
    return [merge_profiles(found, statistic) for found in runs.values()]


def _evaluate(test, train, machine, threads, gemm_rate):
    """The three models' reports (``layer_profile.compare``) on one evaluated profile,
    each fitted on ``train`` only; and the roofline's overhead."""
    from deep500.lv1_network.layer_profile import (analytic_prediction,
                                                   calibrated_prediction, compare,
                                                   fit_calibration, fit_overhead)
    from deep500.lv1_network.learned_model import LearnedLayerModel
    overhead = fit_overhead(train, machine, threads)
    calibration = fit_calibration(train, machine, threads, gemm_rate)
    learned = LearnedLayerModel(gemm_rate=gemm_rate).fit(train)
    mlp = LearnedLayerModel(gemm_rate=gemm_rate, regressor="per_kernel_mlp").fit(train)
    reports = {
        "roofline": compare(test, analytic_prediction(test, machine, threads, overhead)),
        "analytic": compare(test, calibrated_prediction(test, machine, calibration, threads,
                                                        gemm_rate)),
        "learned": compare(test, learned.predict(test)),
        "mlp": compare(test, mlp.predict(test))}
    return reports, overhead


def _print_case(label, executor_name, batch, reports, overhead, worst):
    any_report = reports["analytic"]
    print(f"\n{label} (batch {batch}) on {executor_name}: measured "
          f"forward {any_report['forward']['measured_s'] * 1e3:.3f} ms, "
          f"backward {any_report['backward']['measured_s'] * 1e3:.3f} ms; roofline "
          f"overhead per node fwd {overhead['forward'] * 1e6:.1f} µs, "
          f"bwd {overhead['backward'] * 1e6:.1f} µs")
    print(f"  {'model':9s} {'direction':9s} {'weighted':>9s} {'step':>8s} {'pred ms':>9s}")
    for model_name, report in reports.items():
        for direction in ("forward", "backward"):
            r = report[direction]
            print(f"  {model_name:9s} {direction:9s} {r['weighted_error']:9.1%} "
                  f"{r['step_error']:8.1%} {r['predicted_s'] * 1e3:9.3f}")
        r = report["step"]
        print(f"  {model_name:9s} {'step':9s} {r['weighted_error']:9.1%} "
              f"{r['step_error']:8.1%}")
    for model_name in ("analytic", "learned"):
        for direction in ("forward", "backward"):
            rows = reports[model_name][direction]["worst"][:worst]
            text = ", ".join(f"{n} ({t}) {p * 1e6:.0f} vs {m * 1e6:.0f} µs"
                             for n, t, p, m in rows)
            print(f"  worst {model_name} {direction}: {text}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--machine", help="machine file (default: measured here)")
    parser.add_argument("--batch", type=int, default=8, help="evaluated batch size")
    parser.add_argument("--train-batches", default="4,16",
                        help="extra batch sizes of the training profiles")
    parser.add_argument("--reruns", type=int, default=7,
                        help="timed runs per profile and round")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds over all profiles (median per node over rounds)")
    parser.add_argument("--merge", choices=("min", "median"), default="min",
                        help="per node over the rounds: the least disturbed round (min, "
                             "default) or the median")
    parser.add_argument("--torch-gemm", action="store_true",
                        help="time the PyTorch executor's GEMM sizes with torch.matmul "
                             "(default: NumPy's, as for the reference executor)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--worst", type=int, default=3, help="worst layers printed")
    parser.add_argument("--threads", type=int, default=1,
                        help="BLAS/OpenMP threads of NumPy and PyTorch (default 1)")
    parser.add_argument("--target", type=float, default=0.10,
                        help="weighted error a model must reach (default 0.10)")
    parser.add_argument("--smoke", action="store_true",
                        help="MLP and LeNet, reference executor, tiny batches, 1 run")
    add_check_option(parser)
    args = parser.parse_args()
    if min(args.reruns, args.rounds, args.batch) < 1 or args.warmup < 0:
        parser.error("--reruns, --rounds and --batch must be at least 1, --warmup at least 0")

    from deep500.lv0_operators.gemm_rate import GemmRate

    evaluated, auxiliary = EVALUATED, AUXILIARY
    train_batches = [int(b) for b in args.train_batches.split(",") if b]
    if args.smoke:
        evaluated, auxiliary = EVALUATED[:2], AUXILIARY[:2]
        args.batch, train_batches, args.reruns, args.warmup, args.rounds = 2, [4], 1, 1, 1
    executors = _executors(only_reference=args.smoke)
    batches = sorted({args.batch, *train_batches})
    expected_run_time(*run_time_estimates.lv1_layer_models(
        len(evaluated + auxiliary), len(evaluated), len(batches), len(executors),
        args.rounds, args.reruns, args.warmup))
    threads = _limit_threads(args.threads)
    if args.machine:
        from deep500.utils.machine import load_machine
        machine = load_machine(args.machine)
        print(f"# machine: {args.machine}")
    else:
        machine = MeasuredMachine(quick=args.smoke)
        print(f"# machine measured here (no machine file given), {threads} thread(s): "
              f"GEMM {machine.gemm / 1e9:.1f} GFLOP/s (NumPy float32 matmul), "
              f"triad {machine.memory_bandwidth / 1e9:.1f} GB/s")
    t0 = time.perf_counter()
    profiles = profile_all(evaluated + auxiliary, batches, executors, args.reruns,
                           args.warmup, args.rounds, args.merge)
    print(f"# {len(profiles)} profiles measured in {time.perf_counter() - t0:.1f} s "
          f"(batches {batches}, {args.rounds} round(s) of {args.reruns} timed runs each, "
          f"per node the {args.merge} over rounds of the median over runs)")
    # Every product size timed once, up front (per executor: --torch-gemm).
    gemm_rates = {name: GemmRate(library=LIBRARY[name] if args.torch_gemm else "numpy")
                  for name, _ in executors}
    t0 = time.perf_counter()
    for profile in profiles:
        for cost in profile.costs.values():
            for direction in ("forward", "backward"):
                gemm_rates[profile.executor].seconds(cost.gemms(direction))
    print(f"# GEMM sizes timed in {time.perf_counter() - t0:.1f} s (float32, best of 5): "
          + ", ".join(f"{len(rate.to_dict()['times'])} with {rate.library} for {name}"
                      for name, rate in gemm_rates.items()))

    table = []
    for executor_name, _ in executors:
        for label, _, _ in evaluated:
            test = next(p for p in profiles if p.model == label and p.batch == args.batch
                        and p.executor == executor_name)
            train = [p for p in profiles if p.model != label and p.executor == executor_name]
            reports, overhead = _evaluate(test, train, machine, threads,
                                          gemm_rates[executor_name])
            _print_case(label, executor_name, args.batch, reports, overhead, args.worst)
            table.append((label, executor_name,
                          {k: r["step"]["weighted_error"] for k, r in reports.items()}))

    print(f"\nstep weighted error per model × executor (batch {args.batch}, "
          "leave-one-model-out):")
    print(f"  {'model':10s} {'executor':10s} {'roofline':>9s} {'analytic':>9s} "
          f"{'learned':>9s} {'mlp':>9s}")
    for label, executor_name, errors in table:
        print(f"  {label:10s} {executor_name:10s} {errors['roofline']:9.1%} "
              f"{errors['analytic']:9.1%} {errors['learned']:9.1%} {errors['mlp']:9.1%}")
    print("per-kernel MLP against gradient boosting (same features): median step "
          f"weighted error mlp {np.median([e['mlp'] for _, _, e in table]):.1%}, "
          f"learned {np.median([e['learned'] for _, _, e in table]):.1%}")
    verdicts = []
    for label, executor_name, errors in table:
        met = [m for m in ("analytic", "learned") if errors[m] <= args.target]
        TARGETS.judge(f"{label}/{executor_name} weighted error", bool(met))
        verdicts.append(f"{label}/{executor_name} "
                        + (f"met ({', '.join(met)})" if met else "MISSED"))
    print(f"target weighted error <= {args.target:.0%}: " + "; ".join(verdicts))
    analytic = [errors["analytic"] for _, _, errors in table]
    learned = [errors["learned"] for _, _, errors in table]
    print(f"per-layer model weighted error: analytic {np.median(analytic):.1%}, "
          f"learned {np.median(learned):.1%}")
    return TARGETS.exit_status(args.check)


if __name__ == "__main__":
    sys.exit(main())
