"""Weak scaling of data-parallel SGD: ``d5ref.ConsistentDecentralized`` wrapping
``d5ref.GradientDescent`` on 1 rank and on N ranks (default 2), each rank with the same
local batch, so ideally a step takes as long on N ranks as on one (efficiency
t1 / tN = 1) while N times as many samples are processed.

What runs: the model zoo's MLP (default 784-512-512-10 on 4096 seeded synthetic 1x28x28
images held in memory, a 2.7 MB float32 gradient; ``--model lenet`` for LeNet-5) built from ONNX with
the same seeded weights on every rank, trained by the NumPy reference executor with
``d5.DistributedSampler`` minibatches of ``--batch`` samples per rank; each step is the
scheme's: forward and backpropagation (``compute``), Deep500's ring allreduce of the
fused gradient (``communication``), the SGD update (``update``); loading the minibatch
is timed as ``data``; ``other`` is the rest of a step (packing the gradient into the
fusion buffer, the optimizer's events). One intra-op thread per rank
(``OMP_NUM_THREADS=1`` and the BLAS limits set before NumPy loads), so N ranks use N
cores: run with N no larger than the cores.

Method: one ``mpirun -np N`` world (started by ``mpi_fork`` when run as a plain script)
measures both sides in alternating rounds, so a slow moment of a shared machine hits
both alike. A round of 1 rank: rank 0 trains ``--steps`` steps on its own (its scheme
over ``MPI.COMM_SELF``, the same code path with p = 1) while the other ranks wait
without spinning (``Ibarrier`` tested every 0.5 ms). A round of N ranks: after a
``Barrier``, every rank trains ``--steps`` steps over the world; the round's time per
step is the slowest rank's. Warm-up rounds first; the garbage collector is off in
timed rounds. Printed: per side the median time per step over rounds with the
interquartile range, the per-phase breakdown (median over rounds of seconds per step;
N ranks: the slowest rank's), samples per second, and the weak-scaling efficiency
t1 / tN as the median of the per-round ratios (paired rounds) with its IQR. No target:
what two ranks on two cores can reach depends on the machine (memory bandwidth shared
by the ranks, MPI's shared-memory copies).

Run:  python benchmarks/lv3_scaling.py [--np 2] [--model mlp|lenet] [--batch 64]
        [--steps 20] [--rounds 9] [--smoke]
      (or: mpirun -np 2 python benchmarks/lv3_scaling.py ...)
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_variable] = "1"

import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import deep500 as d5  # noqa: E402
from deep500.frameworks import reference as d5ref  # noqa: E402
from deep500.lv3_distributed import (CommunicationNetwork, guarded_main,  # noqa: E402
                                     mpi_fork)
from deep500.networks import create_model  # noqa: E402
from deep500.utils.threads import set_thread_counts  # noqa: E402
from benchmark_targets import expected_run_time  # noqa: E402
from run_time_estimates import lv3_scaling  # noqa: E402

PHASES = ("data", "compute", "communication", "update", "other")


def say(comm, *args) -> None:
    if comm.Get_rank() == 0:
        print(*args, flush=True)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


class Side:
    """One side of the comparison: a scheme over ``network`` training its own replica
    with its own sampler, measured step by step."""

    def __init__(self, args, network: CommunicationNetwork, train):
        model = create_model(args.model, input_shape=tuple(train.sample_shape), classes=10,
                             loss="softmax_cross_entropy", seed=0, **args.model_options)
        executor = d5ref.from_onnx(model)
        base = d5ref.GradientDescent(executor, learning_rate=args.learning_rate)
        self.scheme = d5ref.ConsistentDecentralized(base, network)
        self.sampler = d5.DistributedSampler(train, args.batch, network, seed=0)
        self.network = network
        self.gradient_bytes = self.scheme.fused().nbytes

    def batch(self) -> dict:
        try:
            return next(self.sampler)
        except StopIteration:
            self.sampler.reset()
            return next(self.sampler)

    def run(self, steps: int) -> dict:
        """Seconds per step of this rank: total and per phase."""
        before = dict(self.scheme.phase_times)
        data = 0.0
        clock = time.perf_counter
        gc.disable()
        try:
            start = clock()
            for _ in range(steps):
                loaded = clock()
                batch = self.batch()
                data += clock() - loaded
                self.scheme.step(batch)
            total = clock() - start
        finally:
            gc.enable()
        times = {p: (self.scheme.phase_times[p] - before[p]) / steps
                 for p in PHASES if p not in ("data", "other")}
        step = total / steps
        return {"step": step, "data": data / steps, **times,
                "other": step - data / steps - sum(times.values())}


def in_memory(dataset) -> d5.NumpyDataset:
    """The samples generated once, so that loading a minibatch is one copy."""
    everything = dataset[np.arange(len(dataset))]
    return d5.NumpyDataset(everything[dataset.input_node], everything[dataset.label_node],
                           classes=dataset.classes, name=dataset.name)


def wait_quietly(comm) -> None:
    """Join a barrier without spinning on a core (MPICH's blocking calls poll)."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.0005)


def slowest(comm, measured: dict) -> dict:
    """Each value's maximum over the ranks of ``comm``."""
    names = sorted(measured)
    local = np.array([measured[n] for n in names])
    out = np.empty_like(local)
    from mpi4py import MPI
    comm.Allreduce(local, out, op=MPI.MAX)
    return dict(zip(names, out.tolist()))


def measure(comm, alone: Side | None, together: Side, args) -> tuple[list, list]:
    """``--rounds`` paired rounds (after ``--warmup``): 1 rank, then all ranks."""
    ones, alls = [], []
    for round_ in range(args.warmup + args.rounds):
        if comm.Get_rank() == 0:
            one = alone.run(args.steps)
            comm.Ibarrier().Wait()
        else:
            wait_quietly(comm)
        comm.Barrier()
        every = slowest(comm, together.run(args.steps))
        if round_ >= args.warmup:
            alls.append(every)
            if comm.Get_rank() == 0:
                ones.append(one)
    return ones, alls


def _summary(rounds: list[dict]) -> dict:
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


def report(comm, ones, alls, args, gradient_bytes: int) -> None:
    p = comm.Get_size()
    say(comm, f"{'ranks':>5} {'time/step':>10} {'IQR of rounds':>22} "
        + " ".join(f"{name:>13}" for name in PHASES) + f" {'samples/s':>10}")
    for ranks, rounds in ((1, ones), (p, alls)):
        steps = [r["step"] for r in rounds]
        low, high = np.percentile(steps, [25, 75])
        median = _summary(rounds)
        say(comm, f"{ranks:>5} {_ms(median['step']):>10} "
            f"{'[' + _ms(low) + ', ' + _ms(high) + ']':>22} "
            + " ".join(f"{_ms(median[name]):>13}" for name in PHASES)
            + f" {ranks * args.batch / median['step']:>10.0f}")
    ratios = [one["step"] / every["step"] for one, every in zip(ones, alls)]
    low, high = np.percentile(ratios, [25, 75])
    bandwidth = 2 * (p - 1) / p * gradient_bytes / _summary(alls)["communication"]
    say(comm, f"\nweak-scaling efficiency t1/t{p} = {statistics.median(ratios):.3f} "
        f"(median of {len(ratios)} paired rounds; IQR [{low:.3f}, {high:.3f}])")
    say(comm, f"allreduce of the {gradient_bytes / 1e6:.2f} MB gradient: "
        f"{_ms(_summary(alls)['communication'])} per step, bus bandwidth "
        f"{bandwidth / 1e9:.2f} GB/s (2(p-1)/p x n / t)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=2, help="ranks when started without "
                        "mpirun (mpi_fork)")
    parser.add_argument("--model", choices=("mlp", "lenet"), default="mlp")
    parser.add_argument("--hidden", type=int, nargs="+", default=[512, 512],
                        help="MLP hidden layer widths")
    parser.add_argument("--batch", type=int, default=64, help="local batch per rank")
    parser.add_argument("--steps", type=int, default=20, help="steps per round")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--smoke", action="store_true", help="a small MLP, few steps")
    args = parser.parse_args()
    if args.smoke:
        args.model, args.hidden, args.batch = "mlp", [64], 16
        args.steps, args.rounds, args.warmup = 3, 2, 1
    args.model_options = {"hidden": tuple(args.hidden)} if args.model == "mlp" else {}
    mpi_fork(args.np)

    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    with guarded_main(comm):
        if comm.Get_rank() == 0:
            expected_run_time(*lv3_scaling(args.model, args.batch, args.steps,
                                           args.rounds, args.warmup))
        set_thread_counts(1)
        p = comm.Get_size()
        train = in_memory(d5.load_dataset("synthetic", shape=(1, 28, 28),
                                          train_samples=4096, test_samples=16)[0])
        world = CommunicationNetwork(comm)
        alone = Side(args, CommunicationNetwork(MPI.COMM_SELF), train) \
            if comm.Get_rank() == 0 else None
        together = Side(args, world, train)
        label = (f"mlp({', '.join(map(str, args.hidden))})" if args.model == "mlp"
                 else "lenet")
        say(comm, f"# {platform.platform()}, {os.cpu_count()} cores, {p} ranks, "
            f"{MPI.Get_library_version().splitlines()[0].strip()}, numpy {np.__version__}, "
            f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
        say(comm, f"\n== Weak scaling of ConsistentDecentralized(GradientDescent), 1 -> {p} "
            f"ranks: {label} on synthetic 1x28x28, local batch {args.batch}, "
            f"{together.gradient_bytes / 1e6:.2f} MB gradient, ring allreduce; "
            f"{args.steps} steps per round, medians over {args.rounds} rounds ==")
        ones, alls = measure(comm, alone, together, args)
        if comm.Get_rank() == 0:  # rank 0 holds both sides' rounds
            report(comm, ones, alls, args, together.gradient_bytes)
        world.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
