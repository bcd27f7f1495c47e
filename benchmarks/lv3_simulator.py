"""The training-step simulator against measured training: ``d5.simulate_training``
predicts the step time of ``recipes/distributed.yaml``'s model (the zoo MLP 64-128-64-10
on the digits, reference executor, reference SGD, one thread per rank) trained by
``ConsistentDecentralized`` with each allreduce algorithm, and ``deep500 run`` measures
it, on 1 and on 2 ranks.

1. **Machine**: ``--machine FILE``, else ``deep500 calibrate --np 2`` here (ping-pong,
   exchange, γ, bandwidth, peaks, and Deep500's per-call allreduce overhead when the
   calibration measures it).
2. **Profile**, no MPI traffic: ``d5.measure_step_profile`` at every batch size per
   rank: each ONNX node's forward and backward time (``OperatorTimes``), the compute
   outside the nodes, the fusion copy, the update, and whole steps of the scheme over
   a one-rank communicator (``MPI_COMM_SELF``: its software overhead around the parts
   joins the compute outside the nodes; their spread prices the wait). As
   the ranks of a run share this host, a rank's compute depends on how many ranks
   compute beside it (shared L3 cache and memory bandwidth): the 1-rank rows are
   predicted from a profile measured alone (this process), the 2-rank rows from one
   measured by 2 ranks at once under ``mpirun -np 2`` (each rank profiles, none
   communicates; rank 0's profile is used), in lockstep: a ``Barrier`` before every
   timed step (``measure_step_profile(..., sync=)``), as synchronous training starts
   the ranks' steps together, so that their phases contend for the shared caches and
   core at the same moments (out of step, the 2-rank compute was 3–4% faster than in
   training, and the 2-rank rows 5–15% under). The simulator itself prices
   communication only from the machine file.
3. **Measured**: a recipe of experiment ``distributed`` with the distributed recipe's
   fixed settings, ``--epochs`` epochs, the batch sizes and (on 2 ranks) every
   algorithm, run by ``deep500 run --np 1`` and ``deep500 run --np 2``. A step's time
   is the slowest rank's ``optimizer.step`` (``synchronous_step_times``, each rank's
   first step left out); a configuration's, the median over its steps.
4. **Predicted**: ``d5.simulate_training(profile, machine, ranks, algorithm=...)``,
   blocking communication, fp32 on the wire (the scheme as it runs), with the profile
   measured at that many ranks per host. The machine's in-context allreduce table
   (``software.allreduce_in_context``, the allreduce timed between compute bursts) is
   measured again in every round, by the 2 ranks that profiled, right after the
   profile: this host switches, for seconds to minutes, between coherence states in
   which the same allreduce differs up to 6x (docs/performance_models.md), and a
   table from the calibration minutes before may describe another state than the
   round's training runs in. The rest of the machine (α, β, γ, δ, o) is the
   calibration's.

5. **Rounds**: steps 2–4 are repeated ``--rounds`` times (default 5), and each
   configuration's predicted and measured times are the medians over the rounds. This
   host is a shared virtual machine: a burst of other work (or of memory reclaim)
   lasting seconds moved single configurations by up to 80% in single-round runs;
   a configuration's error is the median over rounds of each round's predicted /
   measured ratio (a round's profile and measurement are minutes apart at most),
   which three undisturbed rounds out of five decide (Hoefler & Belli, "Scientific
   Benchmarking of Parallel Computing Systems", SC 2015: report medians over repeated
   runs, not a single run). The printed times are the medians over rounds.

Printed: per configuration the predicted parts (compute, exposed communication, wait
for the slowest rank, update), predicted and measured step time and their ratio; last,
``simulator step-time error: X%``, the median absolute relative error over the
configurations. Target: X ≤ 10%.

Run:  python benchmarks/lv3_simulator.py [--machine FILE] [--batches 16,64]
        [--algorithms ring,mpi,...] [--epochs 3] [--rounds 5] [--smoke]

**On an emulated cluster** (as root; docs/cluster_emulation.md), where communication
takes a link's time: ``--cluster [rate=1gbit,...]`` runs three models (an MLP, LeNet,
ResNet-20) × ``--nodes`` (default 1,2,4; one rank per node) × {blocking, overlapped}
× {fp32, bf16 on the wire}, each node count calibrated on its cluster, profiled by as
many ranks at once and measured by ``deep500 run --np N --cluster ...``
(``simulator_cluster.py`` says how; ``simulator_cluster_cases.py`` what). Its last line
is ``simulator step-time error: median X%, worst Y%, ranking tau Z``.

Run:  python benchmarks/lv3_simulator.py --cluster [rate=...] [--nodes 1,2,4]
        [--models mlp,lenet,resnet20] [--steps 30] [--rounds 3]
        [--calibration quick|full|both] [--keep DIR] [--smoke]
        [--check]  (exit 1 when the last line misses a target)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import yaml  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import deep500 as d5  # noqa: E402
from deep500.lv3_distributed import allreduce_names  # noqa: E402
from deep500.lv3_distributed.distributed_training import synchronous_step_times  # noqa: E402
from deep500.results.files import read_results  # noqa: E402
from deep500.lv3_distributed.calibration import Plan  # noqa: E402
from benchmark_targets import TARGETS, add_check_option, expected_run_time  # noqa: E402
import run_time_estimates  # noqa: E402

DISTRIBUTED_RECIPE = os.path.join(REPO, "recipes", "distributed.yaml")


def recipe_settings() -> dict:
    """The fixed settings of recipes/distributed.yaml (model, data, optimizer, seed)."""
    with open(DISTRIBUTED_RECIPE) as f:
        fixed = dict(yaml.safe_load(f)["fixed"])
    fixed.pop("epochs", None)
    fixed.pop("batch_size", None)
    return fixed


def calibrate(folder: str, smoke: bool) -> str:
    out = os.path.join(folder, "machine.yaml")
    command = [sys.executable, "-m", "deep500", "calibrate", "--np", "2", "--out", out,
               "--quiet"] + (["--quick"] if smoke else [])
    subprocess.run(command, check=True)
    return out


def profile(settings: dict, batch: int, reruns: int, sync=None,
            name: str = "mlp (distributed.yaml)") -> d5.StepProfile:
    """The measured step profile of the recipe's model at ``batch`` per rank."""
    from deep500.datasets import load_dataset
    from deep500.recipe.experiments.networks import executor_factory
    from deep500.recipe.experiments.training import (OptimizerSpec, build_network,
                                                     make_optimizer)
    from deep500.recipe.experiments.networks import parse_network
    dataset = dict(settings["dataset"])
    train, _ = load_dataset(dataset.pop("name"), **dataset)
    configuration = {"network": parse_network(settings["network"], "network", REPO),
                     "seed": settings.get("seed", 0), "loss": settings["loss"]}
    model = build_network(configuration, train)
    executor = executor_factory("reference")(model, "cpu")
    optimizer = make_optimizer(OptimizerSpec({**settings["optimizer"],
                                              "implementation": "reference"}),
                               "reference", executor)
    # Real minibatches of the training set, in turn, as the training loop feeds them.
    sampler = d5.ShuffleSampler(train, batch, seed=settings.get("seed", 0))
    inputs = [minibatch for _, minibatch in zip(range(32), sampler)]
    # The whole step as training runs it: the scheme over a one-rank communicator.
    from mpi4py import MPI
    from deep500.frameworks.reference.distributed import SCHEMES
    from deep500.lv3_distributed import CommunicationNetwork
    scheme = SCHEMES["ConsistentDecentralized"](optimizer, CommunicationNetwork(MPI.COMM_SELF))
    loss = scheme.loss

    def step(minibatch):
        return float(np.asarray(scheme.step(minibatch)[loss]))
    return d5.measure_step_profile(model, executor, optimizer, inputs, reruns=reruns,
                                   warmup=5, batch=batch, threads=1,
                                   name=name, executor_name="reference",
                                   step=step, sync=sync)


def profile_on_ranks(folder: str, ranks: int, batches, reruns: int,
                     context_repeats: int) -> tuple:
    """({batch: StepProfile} measured by ``ranks`` ranks at once (rank 0's), the
    in-context allreduce samples measured right after by the same ranks)."""
    out = os.path.join(folder, f"profiles-np{ranks}.json")
    from deep500.lv3_distributed.mpi_launch import mpirun_executable
    subprocess.run([mpirun_executable(), "-np", str(ranks), sys.executable,
                    os.path.abspath(__file__), "--profile-worker", out,
                    "--batches", ",".join(map(str, batches)), "--reruns", str(reruns),
                    "--context-repeats", str(context_repeats)],
                   check=True)
    with open(out) as f:
        saved = json.load(f)
    return ({int(b): d5.StepProfile.from_dict(p) for b, p in saved["profiles"].items()},
            {name: {int(n): seconds for n, seconds in by_size.items()}
             for name, by_size in saved["in_context"].items()})


def profile_worker(out: str, batches, reruns: int, context_repeats: int) -> int:
    """Under mpirun: every rank profiles at once; rank 0 writes its profiles."""
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    settings = recipe_settings()
    profiles = {}
    for batch in batches:
        world.Barrier()
        profiles[batch] = profile(settings, batch, reruns, sync=world.Barrier).to_dict()
    from deep500.lv3_distributed.calibration.software import measure_allreduce_in_context
    in_context = measure_allreduce_in_context(world, context_repeats, progress=False)
    if world.Get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"profiles": profiles, "in_context": in_context}, f)
    return 0


def with_round_in_context(machine, samples: dict, ranks: int):
    """``machine`` with its in-context allreduce table (``software.allreduce_in_context``)
    from this round's samples: this host switches coherence states for seconds to
    minutes (docs/performance_models.md), so the calibration's table, taken minutes
    before, may describe another state than the round's training runs in."""
    from deep500.lv3_distributed.calibration.software import in_context_table
    from deep500.utils.machine import machine_to_dict
    data = machine_to_dict(machine)
    software = dict(data.get("software") or {})
    software["allreduce_in_context"] = {
        "method": "measured in this round by benchmarks/lv3_simulator.py, as deep500 "
                  "calibrate measures it", "ranks": int(ranks),
        "algorithms": in_context_table(samples, ranks, machine)}
    data["software"] = software
    return d5.load_machine(data)


def measure(folder: str, settings: dict, ranks: int, batches, algorithms, epochs: int,
            tag: str = ""):
    """{(ranks, batch, algorithm): median step seconds} from one ``deep500 run``
    (``tag`` names its recipe and output folder apart from other rounds')."""
    recipe = {"name": f"simulator-{ranks}", "experiment": "distributed",
              "fixed": {**settings, "epochs": epochs},
              "mutable": {"batch_size": list(batches),
                          "scheme": [{"scheme": "ConsistentDecentralized", "algorithm": a}
                                     for a in algorithms]}}
    path = os.path.join(folder, f"np{ranks}{tag}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(recipe, f)
    out = os.path.join(folder, f"np{ranks}{tag}")
    env = dict(os.environ, DEEP500_DB=os.path.join(folder, "results.db"))
    subprocess.run([sys.executable, "-m", "deep500", "run", "--np", str(ranks), path,
                    "--out", out], check=True, env=env, stdout=subprocess.DEVNULL)
    measured = {}
    for record in read_results(out):
        details = (record.get("result") or {}).get("details", {}).get("distributed")
        if not details:
            continue
        configuration = record["configuration"]
        steps = synchronous_step_times(details["ranks"])
        measured[(ranks, configuration["batch_size"],
                   configuration["scheme"]["algorithm"])] = float(np.median(steps))
    return measured


def _cluster_expected_run_time(args, simulator_cluster) -> None:
    """The sweep's own estimate (``simulator_cluster_cases.runtime_estimate``: launches,
    configurations, steps at the link's rate, calibrations) of the arguments passed on,
    as the line every benchmark starts with."""
    import dataclasses

    from deep500.utils.threads import usable_cpu_count
    from simulator_cluster_cases import CASES, runtime_estimate
    sweep = simulator_cluster.options(args)
    rate = simulator_cluster.cluster_fields(args.cluster).get("rate")
    cases = [dataclasses.replace(CASES[key], rate=rate) if rate else CASES[key]
             for key in sweep["keys"]]
    seconds = runtime_estimate(cases, sweep["nodes"], sweep["rounds"], sweep["steps"],
                               sweep["reruns"], sweep["calibrations"], usable_cpu_count())
    expected_run_time(seconds, f"{len(cases)} models x nodes {sweep['nodes']} x "
                      f"{sweep['rounds']} rounds of {sweep['steps']} steps, "
                      f"{' and '.join(sweep['calibrations'])} calibrations: launches, "
                      f"configurations and steps at the link's rate, per-part times "
                      f"measured on this machine (simulator_cluster_cases.py); under a "
                      f"load of 4-6 runs took 1.0-1.6x this (docs/cluster_emulation.md)")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--machine", help="machine file (default: calibrate here)")
    parser.add_argument("--batches", default="16,64", help="batch sizes per rank")
    parser.add_argument("--algorithms", default=",".join(allreduce_names()),
                        help="allreduce algorithms measured on 2 ranks")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--reruns", type=int, default=None, help="profiled steps "
                        "(default 60; with --cluster 30)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of profile + "
                        "measurement; each configuration's figures are the medians over "
                        "rounds (default 5; with --cluster 3)")
    parser.add_argument("--smoke", action="store_true", help="quick calibration, 1 epoch, "
                        "batch 16, ring and mpi only; with --cluster: the MLP on 1 and 2 "
                        "nodes, 8 steps, 1 round")
    add_check_option(parser)
    cluster = parser.add_argument_group("on an emulated cluster (as root)")
    cluster.add_argument("--cluster", nargs="?", const="", metavar="SPEC",
                         help="run the sweep on emulated clusters; SPEC: tc fields other "
                              "than nodes (rate=1gbit gives every model that rate; "
                              "default: each model's own)")
    cluster.add_argument("--nodes", default="1,2,4", help="node counts, one rank each")
    cluster.add_argument("--models", default="all", help="comma-separated: mlp, "
                         "lenet, resnet20, or all")
    cluster.add_argument("--steps", type=int, default=30, help="steps per configuration")
    cluster.add_argument("--calibration", choices=("quick", "full", "both"),
                         default="quick", help="deep500 calibrate with or without --quick "
                         "(both: predict with each, the table with the quick one)")
    cluster.add_argument("--keep", metavar="DIR", help="keep calibrations, recipes, "
                         "results and simulator-cluster.json here (calibrations found "
                         "here are reused)")
    parser.add_argument("--profile-worker", metavar="OUT", help=argparse.SUPPRESS)
    parser.add_argument("--cluster-profile-worker", metavar="OUT", help=argparse.SUPPRESS)
    parser.add_argument("--context-repeats", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cluster_profile_worker or args.cluster is not None:
        import simulator_cluster
        if args.cluster_profile_worker:
            return simulator_cluster.profile_worker(
                args.cluster_profile_worker, args.models.split(","), int(args.nodes),
                args.steps, args.reruns)
        _cluster_expected_run_time(args, simulator_cluster)
        return simulator_cluster.main(args)
    if args.profile_worker:
        return profile_worker(args.profile_worker,
                              [int(b) for b in args.batches.split(",")], args.reruns,
                              args.context_repeats)
    batches = [16] if args.smoke else [int(b) for b in args.batches.split(",")]
    algorithms = (["ring", "mpi"] if args.smoke
                  else [a.strip() for a in args.algorithms.split(",") if a.strip()])
    epochs = 1 if args.smoke else args.epochs
    rounds = 1 if args.smoke else args.rounds or 5
    expected_run_time(*run_time_estimates.lv3_simulator(
        len(batches), len(algorithms), epochs, rounds, calibrate=not args.machine,
        quick=args.smoke))
    settings = recipe_settings()
    predicted, measured = {}, {}   # (ranks, batch, algorithm) -> [seconds per round]
    parts = {}
    with tempfile.TemporaryDirectory(prefix="deep500-simulator-") as folder:
        machine = args.machine or calibrate(folder, args.smoke)
        machine = d5.load_machine(machine)
        print(f"# machine: {machine.name} ({machine.source})")
        reruns = 20 if args.smoke else args.reruns or 60
        for r in range(rounds):
            on_two, in_context = profile_on_ranks(
                folder, 2, batches, reruns, Plan.make(quick=args.smoke).context_repeats)
            profiles = {1: {b: profile(settings, b, reruns) for b in batches}, 2: on_two}
            machines = {1: machine, 2: with_round_in_context(machine, in_context, 2)}
            for ranks, by_batch in profiles.items():
                for b, p in by_batch.items():
                    print(f"# round {r + 1}: profile, {ranks} rank(s) at once, batch {b}: "
                          f"forward {_ms(p.forward_s)} ms, backward {_ms(p.backward_s)} ms, "
                          f"other compute {_ms(p.other_compute_s)} ms, update "
                          f"{_ms(p.update_s)} ms, fusion {_ms(p.fusion_s)} ms, gradients "
                          f"{p.gradient_bytes} B")
            this_round = measure(folder, settings, 1, batches, ["ring"], epochs, f"-r{r}")
            this_round.update(measure(folder, settings, 2, batches, algorithms, epochs,
                                      f"-r{r}"))
            for key, seconds in this_round.items():
                ranks, batch, algorithm = key
                step = d5.simulate_training(profiles[ranks][batch], machines[ranks], ranks,
                                            algorithm=algorithm)
                measured.setdefault(key, []).append(seconds)
                predicted.setdefault(key, []).append(step.step_s)
                parts.setdefault(key, []).append(step)
            print(f"# round {r + 1}: measured (ms) " + ", ".join(
                f"{k[0]}x{k[1]} {k[2] if k[0] > 1 else '-'} {v[-1] * 1e3:.3f}"
                for k, v in sorted(measured.items())))
    print(f"{'ranks':>5} {'batch':>5} {'algorithm':>18} {'compute':>8} {'comm':>8} "
          f"{'wait':>8} {'update':>8} {'predicted':>9} {'measured':>9} {'pred/meas':>9}"
          "   (ms; medians over rounds)")
    errors = []
    for key in sorted(measured):
        ranks, batch, algorithm = key
        seconds = float(np.median(measured[key]))
        step_s = float(np.median(predicted[key]))
        # The round whose prediction is the median one gives the printed parts.
        step = sorted(parts[key], key=lambda s: s.step_s)[(len(parts[key]) - 1) // 2]
        # Each round's prediction against the same round's measurement (its profile was
        # taken minutes apart at most, under the same conditions), median over rounds.
        ratio = float(np.median(np.asarray(predicted[key]) / np.asarray(measured[key])))
        errors.append(abs(ratio - 1))
        label = algorithm if ranks > 1 else "(none)"
        print(f"{ranks:>5} {batch:>5} {label:>18} {_ms(step.compute_s)} "
              f"{_ms(step.exposed_communication_s)} {_ms(step.straggler_s)} "
              f"{_ms(step.update_s)} {_ms(step_s)} {_ms(seconds)} {ratio:9.2f}")
    if not errors:
        print("no configuration was measured")
        return 1
    worst = max(errors)
    median = float(np.median(errors))
    print(f"# {len(errors)} configurations; worst |pred/meas - 1| = {worst:.1%}; target "
          f"median <= 10%: {TARGETS.judge('simulator step-time error', median <= 0.10)}")
    print(f"simulator step-time error: {median * 100:.1f}%")
    return TARGETS.exit_status(args.check)


if __name__ == "__main__":
    sys.exit(main())
