"""Per-layer time models against measurement: for MLP, LeNet and ResNet-20 on the
reference and PyTorch executors, each ONNX node's measured forward and backward time
(``OperatorTimes`` with backprop) against

* the **analytic** model: roofline max(FLOPs / peak, bytes / bandwidth)
  (``deep500.lv0_operators.cost_model``) plus a fixed per-node overhead per direction
  and executor, the median time of the nodes with the smallest roofline times in the
  training profiles (``layer_profile.fit_overhead``);
* the **learned** model: gradient boosting on operator shape features
  (``deep500.lv1_network.learned_model``).

Split (leave-one-model-out): each evaluated model (MLP, LeNet, ResNet-20 at batch
``--batch``) is predicted by models fitted only on profiles of *other* networks: the
two other evaluated models and auxiliary networks that are never evaluated (an MLP
with other widths on 3×32×32, LeNet on 3×32×32, WRN-10-1 and WRN-10-2), each at the
training batch sizes (``--train-batches``) and at ``--batch``. So no layer of the
evaluated model, at any batch size, is in its training set.

Error: the time-weighted error of Catalán's thesis, Σ|pred − meas| / Σ meas over the
nodes of a step, forward, backward, and both together ("step"); and the relative error
of the step time. Last line: ``per-layer model weighted error: analytic X%, learned Y%``,
each the median over model × executor of the step's weighted error (forward and
backward nodes together).

Machine: ``--machine FILE`` (from ``deep500 calibrate``), else measured here: GEMM
FLOP/s as the best of a few float32 1024³ NumPy matmuls (at ``--threads``, the
threads the executors get) and memory bandwidth from a NumPy triad a = b + s·c on 32 MB
arrays (3 arrays of traffic counted, as STREAM does).

Run:  python benchmarks/lv1_layer_models.py [--machine FILE] [--batch 8] [--reruns 5]
        [--smoke]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

EVALUATED = [("mlp", "mlp", {}), ("lenet", "lenet", {}), ("resnet20", "resnet20", {})]
AUXILIARY = [("mlp-3x32x32", "mlp", dict(input_shape=(3, 32, 32), hidden=(256, 128))),
             ("lenet-3x32x32", "lenet", dict(input_shape=(3, 32, 32))),
             ("wrn10-1", "wide_resnet", dict(depth=10, width=1)),
             ("wrn10-2", "wide_resnet", dict(depth=10, width=2))]


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


def profile_all(networks, batches, executors, reruns, warmup):
    from deep500.lv1_network.layer_profile import measure_profile
    from deep500.networks import create_model
    from deep500.recipe.experiments.networks import make_inputs
    profiles = []
    for label, name, kwargs in networks:
        for batch in batches:
            model = create_model(name, batch_size=batch, loss="softmax_cross_entropy",
                                 **kwargs)
            inputs = make_inputs(model, batch, 0, 10)
            for executor_name, factory in executors:
                profiles.append(measure_profile(
                    model, factory(model), inputs, reruns=reruns, warmup=warmup,
                    name=label, executor_name=executor_name, batch=batch))
    return profiles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--machine", help="machine file (default: measured here)")
    parser.add_argument("--batch", type=int, default=8, help="evaluated batch size")
    parser.add_argument("--train-batches", default="4,16",
                        help="extra batch sizes of the training profiles")
    parser.add_argument("--reruns", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--worst", type=int, default=3, help="worst layers printed")
    parser.add_argument("--threads", type=int, default=1,
                        help="BLAS/OpenMP threads of NumPy and PyTorch (default 1)")
    parser.add_argument("--smoke", action="store_true",
                        help="MLP and LeNet, reference executor, tiny batches, 1 run")
    args = parser.parse_args()

    from deep500.lv1_network.layer_profile import (analytic_prediction, compare,
                                                   fit_overhead)
    from deep500.lv1_network.learned_model import LearnedLayerModel

    evaluated, auxiliary = EVALUATED, AUXILIARY
    train_batches = [int(b) for b in args.train_batches.split(",") if b]
    if args.smoke:
        evaluated, auxiliary = EVALUATED[:2], AUXILIARY[:2]
        args.batch, train_batches, args.reruns, args.warmup = 2, [4], 1, 1
    executors = _executors(only_reference=args.smoke)
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
    batches = sorted({args.batch, *train_batches})
    t0 = time.perf_counter()
    profiles = profile_all(evaluated + auxiliary, batches, executors, args.reruns,
                           args.warmup)
    print(f"# {len(profiles)} profiles measured in {time.perf_counter() - t0:.1f} s "
          f"(batches {batches}, {args.reruns} timed runs each)")

    analytic_errors, learned_errors = [], []
    for executor_name, _ in executors:
        for label, _, _ in evaluated:
            test = next(p for p in profiles if p.model == label and p.batch == args.batch
                        and p.executor == executor_name)
            train = [p for p in profiles if p.model != label and p.executor == executor_name]
            overhead = fit_overhead(train, machine, threads)
            analytic = compare(test, analytic_prediction(test, machine, threads, overhead))
            learned = compare(test, LearnedLayerModel().fit(train).predict(test))
            analytic_errors.append(analytic["step"]["weighted_error"])
            learned_errors.append(learned["step"]["weighted_error"])
            print(f"\n{label} (batch {args.batch}) on {executor_name}: measured "
                  f"forward {analytic['forward']['measured_s'] * 1e3:.3f} ms, "
                  f"backward {analytic['backward']['measured_s'] * 1e3:.3f} ms; "
                  f"overhead per node fwd {overhead['forward'] * 1e6:.1f} µs, "
                  f"bwd {overhead['backward'] * 1e6:.1f} µs")
            print(f"  {'model':9s} {'direction':9s} {'weighted':>9s} {'step':>8s} "
                  f"{'pred ms':>9s}")
            for model_name, report in (("analytic", analytic), ("learned", learned)):
                for direction in ("forward", "backward"):
                    r = report[direction]
                    print(f"  {model_name:9s} {direction:9s} {r['weighted_error']:9.1%} "
                          f"{r['step_error']:8.1%} {r['predicted_s'] * 1e3:9.3f}")
                r = report["step"]
                print(f"  {model_name:9s} {'step':9s} {r['weighted_error']:9.1%} "
                      f"{r['step_error']:8.1%}")
            for model_name, report in (("analytic", analytic), ("learned", learned)):
                for direction in ("forward", "backward"):
                    rows = report[direction]["worst"][:args.worst]
                    text = ", ".join(f"{n} ({t}) {p * 1e6:.0f} vs {m * 1e6:.0f} µs"
                                     for n, t, p, m in rows)
                    print(f"  worst {model_name} {direction}: {text}")
    print(f"\nper-layer model weighted error: analytic {np.median(analytic_errors):.1%}, "
          f"learned {np.median(learned_errors):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
