"""Overlapping the gradient allreduce with backprop: exposed communication, blocking
against overlapped, measured under ``mpirun -np 2`` and predicted by the simulator.

Per model (the distributed recipe's MLP 64-128-64-10 and a wide MLP 64-1024-1024-1024-10,
whose 8.7 MB of gradients make communication matter and whose last layers finish
backprop while the first ones still compute), on the digits, reference
executor, reference SGD, batch 16 per rank, one thread per rank:

* **Measured**: ``d5ref.ConsistentDecentralized(algorithm="mpi")`` blocking (one
  ``MPI_Allreduce`` of the fused gradients after backprop) and with ``overlap=True``
  (one ``MPI_Iallreduce`` per ``--bucket-bytes`` bucket, started during backprop). The
  two alternate for ``--rounds`` rounds of ``--steps`` steps (so that a change in the
  machine's load hits both). Each round's figure is the scheme's
  ``exposed_communication``: median step time (forward to averaged gradients) minus the
  median compute-only time of forward and backprop (the method of the Intel MPI
  Benchmarks' non-blocking tests; the overlapped scheme times a compute-only pass
  before every 4th step, the blocking one its compute phase), over the two ranks: the
  slower rank's step minus the slower rank's compute (``exposed_over_ranks``: a
  rank's own difference would count its wait for the other as communication); a
  model's figure is the median over rounds.
* **Predicted**: ``d5.simulate_training(profile, machine, 2, algorithm="ring",
  overlap=False/True, bucket_bytes=...)`` from a ``d5.measure_step_profile`` taken by
  each rank at the same time (both cores busy, as in training) and the machine file
  ``--machine FILE`` or a quick ``deep500 calibrate --np 2 --quick`` run first. No
  target: the numbers side by side.

Last line: ``overlap hides X% of communication``, X = 1 − exposed overlapped / exposed
blocking, the median over the overlapped rows. On a 2-core machine both ranks compute on both cores
and MPICH progresses a collective only inside MPI calls (``MPI_Test`` after each node's
backward), so there is little room to hide anything; the figure is what it is.

Options: ``--models`` (``mlp``, ``wide``, ``lenet``: LeNet-5 on 3x32x32 synthetic
images, whose 236 KB of fully connected gradients come first in backprop and whose
convolutions, most of the compute, come after; default ``mlp,wide``), ``--batch``,
``--algorithms mpi,ring`` (``MPI_Iallreduce``; Deep500's non-blocking ring) and
``--progress calls,thread`` (MPI progresses in the hooks' ``MPI_Test`` calls; a
background thread also tests every 0.5 ms). Each overlapped mode is a row beside its
blocking twin; the last line's X is the median over the overlapped rows.

Run:  python benchmarks/lv3_overlap.py [--machine FILE] [--steps 40] [--rounds 3]
        [--bucket-bytes 1048576] [--smoke] [--cluster nodes=2,rate=1gbit]
        [--models lenet] [--batch 64] [--algorithms mpi,ring] [--progress calls,thread]

With ``--cluster`` (as root) the ranks run on an emulated cluster
(docs/cluster_emulation.md): communication then takes a link's time and leaves the
cores free, so overlap can hide it.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import deep500 as d5  # noqa: E402
from deep500.frameworks import reference as d5ref  # noqa: E402
from deep500.lv3_distributed import guarded_main, in_mpi_world, mpi_fork  # noqa: E402
from deep500.lv3_distributed.exposed_communication import exposed_over_ranks  # noqa: E402
from deep500.lv3_distributed.gradient_buckets import DEFAULT_BUCKET_BYTES  # noqa: E402
from deep500.networks import create_model  # noqa: E402

# key: (label, create_model arguments, dataset, its options)
MODELS = {
    "mlp": ("mlp 64-128-64-10 (distributed.yaml)",
            {"name": "mlp", "input_shape": (1, 8, 8), "hidden": (128, 64)},
            "digits", {"normalize": "standardize"}),
    "wide": ("mlp 64-1024-1024-1024-10 (wide)",
             {"name": "mlp", "input_shape": (1, 8, 8), "hidden": (1024, 1024, 1024)},
             "digits", {"normalize": "standardize"}),
    "lenet": ("lenet-5 3x32x32 (synthetic)",
              {"name": "lenet", "input_shape": (3, 32, 32)}, "synthetic",
              {"shape": (3, 32, 32)}),
}
BATCH = 16


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--machine", help="machine file (default: calibrate here)")
    parser.add_argument("--steps", type=int, default=40, help="steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bucket-bytes", type=int, default=DEFAULT_BUCKET_BYTES)
    parser.add_argument("--batch", type=int, default=BATCH, help="samples per rank per "
                        "step (default %(default)s)")
    parser.add_argument("--algorithms", default="mpi", help="comma-separated: mpi "
                        "(MPI_Iallreduce) and/or ring (Deep500's non-blocking ring)")
    parser.add_argument("--progress", default="calls", help="comma-separated overlap "
                        "progress modes: calls (MPI_Test after each backward node) and/or "
                        "thread (a background thread tests too)")
    parser.add_argument("--models", default="mlp,wide", help="comma-separated model keys "
                        f"({', '.join(MODELS)}) or 'all' (default %(default)s)")
    parser.add_argument("--smoke", action="store_true", help="quick calibration, 12 steps, "
                        "1 round")
    parser.add_argument("--cluster", metavar="SPEC", help="run the 2 ranks on an emulated "
                        "cluster (nodes=2,rate=1gbit; needs root; docs/cluster_emulation.md), "
                        "calibrated on it")
    return parser.parse_args()


def model(arguments: dict):
    return create_model(**arguments, classes=10, loss="softmax_cross_entropy", seed=0)


def exposed(comm, train, arguments, algorithm: str, overlap, steps: int,
            bucket_bytes: int, batch: int) -> float:
    """One round: this scheme's exposed communication over both ranks
    (``exposed_over_ranks``).
    ``overlap``: False (blocking) or the overlap's progress mode."""
    executor = d5ref.from_onnx(model(arguments))
    base = d5ref.GradientDescent(executor, learning_rate=0.1)
    options = {"overlap": True, "bucket_bytes": bucket_bytes, "progress": overlap,
               "compute_only_every": 4} if overlap else {}
    scheme = d5ref.ConsistentDecentralized(base, comm, algorithm=algorithm, **options)
    sampler = d5.DistributedSampler(train, batch, comm, seed=0)
    done = 0
    while done < steps:
        for batch in sampler:
            scheme.step(batch)
            done += 1
            if done == steps:
                break
    measured = scheme.end_epoch()
    scheme.close()
    return exposed_over_ranks(comm.comm.allgather(measured))


def profile(train, arguments, name, batch: int) -> d5.StepProfile:
    proto = model(arguments)
    executor = d5ref.from_onnx(proto)
    optimizer = d5ref.GradientDescent(executor, learning_rate=0.1)
    sampler = d5.ShuffleSampler(train, batch, seed=0)
    inputs = next(iter(sampler))
    return d5.measure_step_profile(proto, executor, optimizer, inputs, reruns=20,
                                   warmup=5, batch=batch, threads=1, name=name,
                                   executor_name="reference")


def main(args) -> int:
    comm = d5.CommunicationNetwork()
    if comm.size != 2:
        print("lv3_overlap: run it as a plain script; it starts 2 ranks itself")
        return 2
    machine = d5.load_machine(args.machine)
    steps, rounds = (12, 1) if args.smoke else (args.steps, args.rounds)
    algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    keys = list(MODELS) if args.models == "all" else args.models.split(",")
    progress_modes = [m.strip() for m in args.progress.split(",") if m.strip()]
    lead = comm.rank == 0
    if lead:
        print(f"# 2 ranks, reference executor, SGD, batch {args.batch} per rank, 1 thread "
              f"per rank; overlap: buckets of {args.bucket_bytes} B; {rounds} round(s) of "
              f"{steps} steps; machine {machine.name}")
        print(f"{'model':36s} {'allreduce':>9s} {'mode':>14s} {'exposed ms':>11s} "
              f"{'predicted ms':>13s} {'pred. step ms':>14s}")
    hidden_fractions = []
    for key in keys:
        name, arguments, dataset, dataset_options = MODELS[key]
        train, _ = d5.load_dataset(dataset, **dataset_options)
        step_profile = profile(train, arguments, name, args.batch)
        for algorithm in algorithms:
            modes = [False, *progress_modes]
            measured = {mode: [] for mode in modes}
            for _ in range(rounds):
                for mode in modes:
                    measured[mode].append(exposed(comm, train, arguments, algorithm, mode,
                                                  steps, args.bucket_bytes, args.batch))
            model_algorithm = "ring" if algorithm == "mpi" else algorithm
            predicted = {overlap: d5.simulate_training(step_profile, machine, 2,
                                                       algorithm=model_algorithm,
                                                       overlap=overlap,
                                                       bucket_bytes=args.bucket_bytes)
                         for overlap in (False, True)}
            medians = {mode: float(np.median(values)) for mode, values in measured.items()}
            for mode in progress_modes:
                if medians[False] > 0:
                    hidden_fractions.append(1.0 - medians[mode] / medians[False])
            if lead:
                for mode in modes:
                    p = predicted[bool(mode)]
                    label = f"overlap/{mode}" if mode else "blocking"
                    print(f"{name:36s} {algorithm:>9s} {label:>14s} "
                          f"{medians[mode] * 1e3:11.3f} "
                          f"{p.exposed_communication_s * 1e3:13.3f} {p.step_s * 1e3:14.3f}"
                          f"   rounds: {', '.join(f'{v * 1e3:.3f}' for v in measured[mode])}"
                          + (f"; {p.buckets} buckets" if mode else ""), flush=True)
    comm.close()
    if lead:
        hidden = float(np.median(hidden_fractions)) if hidden_fractions else float("nan")
        print(f"overlap hides {hidden * 100:.0f}% of communication")
    return 0


def calibrate(folder: str, cluster: str | None) -> str:
    out = os.path.join(folder, "machine.yaml")
    subprocess.run([sys.executable, "-m", "deep500", "calibrate", "--np", "2", "--out",
                    out, "--quiet", "--quick",
                    *(["--cluster", cluster] if cluster else [])], check=True)
    return out


def _expected_run_time(args) -> None:
    from benchmark_targets import expected_run_time
    from run_time_estimates import lv3_overlap
    steps, rounds = (12, 1) if args.smoke else (args.steps, args.rounds)
    keys = list(MODELS) if args.models == "all" else args.models.split(",")
    seconds, basis, _ = lv3_overlap(
        keys, len([a for a in args.algorithms.split(",") if a.strip()]),
        len([m for m in args.progress.split(",") if m.strip()]), rounds, steps,
        args.batch, calibrate=not args.machine)
    if args.cluster:
        basis += "; the link's time per step on the emulated cluster not counted"
    expected_run_time(seconds, basis)


if __name__ == "__main__":
    arguments = parse()
    if not in_mpi_world():
        _expected_run_time(arguments)
        import contextlib
        from deep500.lv3_distributed.cluster import emulated_cluster, parse_cluster
        with tempfile.TemporaryDirectory() as folder:
            # Calibrated once, before the ranks start (on the cluster's own link with
            # --cluster); they read the file.
            machine = arguments.machine or calibrate(folder, arguments.cluster)
            with (emulated_cluster(parse_cluster(arguments.cluster), progress=True)
                  if arguments.cluster else contextlib.nullcontext()):
                mpi_fork(2, program=[os.path.abspath(__file__), *sys.argv[1:],
                                     "--machine", machine])
    with guarded_main():
        sys.exit(main(arguments))
