"""``benchmarks/lv3_simulator.py --cluster``: the training-step simulator against
training on an emulated cluster (docs/cluster_emulation.md), where communication takes
a network link's time: every model × node count × {blocking, overlapped} × {fp32, bf16
on the wire} of ``simulator_cluster_cases`` (one rank per node).

1. **Machine**: ``deep500 calibrate --np N --cluster nodes=N,rate=R [--quick]`` once per
   node count N > 1 and link rate R, before the rounds (the ping-pong and exchange of
   ranks 0 and 1 over the link, γ, the per-call overhead o and the in-context allreduce
   table on N ranks). ``--calibration quick|full|both`` (default quick:
   docs/cluster_emulation.md compares the two; ``both`` predicts with each, the table
   and the last line with the quick one, and prints the full one's errors).
2. **Profile** (``d5.measure_step_profile``): N ranks in a cluster of N nodes profile
   every model at once, in lockstep (a ``Barrier`` before every timed step, as synchronous
   training starts its steps together), none communicating; rank 0's profile is used.
   With more ranks than cores the profile thus holds what sharing the cores costs a
   rank's compute, including the ranks that wait in the ``Barrier``: MPICH's ch4:ofi
   polls its sockets while it waits, on a core another rank could compute on.
3. **Measured**: ``deep500 run --np N --cluster nodes=N,rate=R`` (one rank: ``--np 1``,
   no network) of one recipe per model with all its configurations, ``--steps`` steps
   each. A step's time is the slowest rank's ``optimizer.step`` (each rank's first step
   left out); a configuration's, the median over its steps.
4. **Predicted**: ``d5.simulate_training(profile, machine, N, algorithm=...,
   overlap=..., comm_dtype=..., bucket_bytes=...)`` with the algorithm that ran
   (Deep500's ring in both modes, the non-blocking one when overlapped): the ranks'
   compute from the N-rank profile, the allreduce from the N-node machine file with the
   o and in-context factor the calibration measured for that algorithm.
5. **Rounds**: 2–4 are repeated ``--rounds`` times; a configuration's error is the median
   over rounds of each round's predicted / measured (Hoefler & Belli, SC 2015).

Printed: per configuration the predicted parts, predicted and measured step and their
ratio, rows with more ranks than cores marked ``oversubscribed``; what oversubscription
does (the CPU a rank burns while it waits in ``MPI_Barrier`` for a sleeping rank 0,
each model's profiled compute on N ranks against one, and the measured step minus
predicted compute and update, i.e. the measured exposed communication, against the
prediction); the error median, worst and Kendall τ of predicted against measured
ordering with and without those rows. Last line, over the rows that are not
oversubscribed when the others distort (their median error is over the 5% target),
else over all: ``simulator step-time error: median X%, worst Y%, ranking tau Z``.
Targets: median ≤ 5%, worst ≤ 10%, τ ≥ 0.9.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil
import yaml

import deep500 as d5
from deep500.lv3_distributed.distributed_training import synchronous_step_times
from deep500.results.files import read_results
from deep500.utils.threads import usable_cpu_count
from simulator_cluster_cases import (ALGORITHMS, CASES, WIRE, cluster_spec, configurations,
                                     gradient_share, mode_of, recipe, runtime_estimate,
                                     settings)
from simulator_cluster_report import report

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lv3_simulator.py")
SMOKE = {"models": ["mlp"], "nodes": [1, 2], "steps": 8, "rounds": 1, "reruns": 9}
RERUNS, ROUNDS = 30, 3   # profiled steps per model (3 rounds of 10), rounds


def cluster_fields(text: str) -> dict:
    """``--cluster``'s fields other than ``nodes`` (the sweep's), e.g. ``rate=1gbit``."""
    fields = {}
    for part in (text or "").split(","):
        if part.strip():
            name, _, value = part.partition("=")
            fields[name.strip()] = value.strip()
    if "nodes" in fields:
        raise SystemExit("lv3_simulator --cluster: leave nodes= out; give --nodes 1,2,4")
    return fields


def calibrate(folder: str, nodes: int, rate: str, extra: dict, kind: str) -> str:
    """A machine file of ``nodes`` nodes at ``rate``, ``kind`` "quick" or "full"
    (reused when ``folder`` has it)."""
    out = os.path.join(folder, f"machine-np{nodes}-{rate}-{kind}.yaml")
    if os.path.exists(out):
        print(f"# machine np{nodes} {rate} {kind}: reusing {out}")
        return out
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "deep500", "calibrate", "--np", str(nodes),
                    "--cluster", cluster_spec(nodes, rate, extra).text(), "--out", out,
                    "--quiet"] + (["--quick"] if kind == "quick" else []), check=True)
    print(f"# machine np{nodes} {rate}: calibrated {kind} in "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    return out


def profiles_on_nodes(folder: str, nodes: int, cases: dict, steps: int, reruns: int,
                      extra: dict, tag: str) -> tuple:
    """({model: StepProfile} profiled by ``nodes`` ranks at once, one per node (the
    slowest rank's: ``slowest_rank``), {model: the slowest rank's excess over the
    fastest}, the CPU a rank burns while it waits: ``waiting_cpu``)."""
    from deep500.lv3_distributed.cluster import emulated_cluster
    from deep500.lv3_distributed.mpi_launch import run_under_mpirun
    out = os.path.join(folder, f"profiles-np{nodes}{tag}.json")
    program = [SCRIPT, "--cluster-profile-worker", out, "--models", ",".join(cases),
               "--nodes", str(nodes), "--steps", str(steps), "--reruns", str(reruns)]
    if nodes == 1:
        status = run_under_mpirun(1, program)
    else:
        # The profile sends nothing but Barriers: any of the rates will do.
        with emulated_cluster(cluster_spec(nodes, next(iter(cases.values())).rate, extra)):
            status = run_under_mpirun(nodes, program)
    if status != 0:
        raise SystemExit(f"lv3_simulator --cluster: profiling on {nodes} ranks failed "
                         f"(exit status {status})")
    with open(out) as f:
        saved = json.load(f)
    chosen, spread = {}, {}
    for key in saved["profiles"]:
        chosen[key], spread[key] = slowest_rank(
            [d5.StepProfile.from_dict(ranks[key]) for ranks in saved["rank_profiles"]])
    return chosen, spread, saved["waiting_cpu"]


def waiting_cpu(world, seconds: float = 0.5):
    """CPU seconds per second of the ranks that wait in ``MPI_Barrier`` while rank 0
    sleeps ``seconds`` (their median; None on one rank): 1.0 when MPI polls without
    pause, 0 when it blocks. Collective."""
    world.Barrier()
    if world.Get_rank() == 0:
        time.sleep(seconds)
    cpu, wall = time.process_time(), time.perf_counter()
    world.Barrier()
    share = (time.process_time() - cpu) / (time.perf_counter() - wall)
    shares = world.gather(share if world.Get_rank() else None, root=0)
    waiting = [s for s in shares or () if s is not None]
    return float(np.median(waiting)) if waiting else None


def profile_worker(out: str, keys, nodes: int, steps: int, reruns: int) -> int:
    """Under mpirun: every rank profiles every model at once; rank 0 writes every
    rank's."""
    from mpi4py import MPI
    from lv3_simulator import profile
    world = MPI.COMM_WORLD
    polling = waiting_cpu(world)
    profiles = {}
    for key in keys:
        case = CASES[key]
        world.Barrier()
        profiles[key] = profile(settings(case, nodes, steps), case.batch, reruns,
                                sync=world.Barrier, name=case.label).to_dict()
    ranks = world.gather(profiles)
    if world.Get_rank() == 0:
        with open(out, "w") as f:
            json.dump({"profiles": profiles, "rank_profiles": ranks,
                       "waiting_cpu": polling}, f)
    return 0


def slowest_rank(profiles: list) -> tuple:
    """(the profile of the rank whose median whole step is the longest, by how much it
    is longer than the fastest rank's) of one model's per-rank profiles: a synchronous
    step waits for its slowest rank, and on this host's vCPUs one rank's compute ran
    10–25% slower than the other's for seconds at a time (docs/cluster_emulation.md)."""
    medians = [float(np.median(p.step_samples)) if p.step_samples else
               sum(l.forward_s + l.backward_s for l in p.layers) + p.other_compute_s
               for p in profiles]
    slowest = int(np.argmax(medians))
    return profiles[slowest], medians[slowest] / min(medians) - 1.0


def cpu_times() -> tuple:
    """(steal, total) CPU seconds of the host since boot (``psutil.cpu_times``; guest
    time is inside user time on Linux and not added twice)."""
    times = psutil.cpu_times()
    total = sum(v for k, v in times._asdict().items() if k not in ("guest", "guest_nice"))
    return getattr(times, "steal", 0.0), total


def steal_share(before: tuple, after: tuple) -> float:
    """The share of the CPU time between two ``cpu_times`` that the hypervisor gave
    to other guests (steal): the virtual cores were ready and did not run."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


def measure(folder: str, case, nodes: int, steps: int, extra: dict, tag: str) -> tuple:
    """({(mode, dtype): median step seconds}, {(mode, dtype): the slowest rank's median
    compute-only forward and backward pass in the run}, steal share) of one ``deep500
    run`` of a model."""
    path = os.path.join(folder, f"{case.key}-np{nodes}{tag}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(recipe(case, nodes, steps), f)
    out = os.path.join(folder, f"{case.key}-np{nodes}{tag}")
    cluster = (["--cluster", cluster_spec(nodes, case.rate, extra).text()]
               if nodes > 1 else [])
    env = dict(os.environ, DEEP500_DB=os.path.join(folder, "results.db"))
    before = cpu_times()
    done = subprocess.run([sys.executable, "-m", "deep500", "run", "--np", str(nodes),
                           *cluster, path, "--out", out, "--quiet"], env=env,
                          stdout=subprocess.DEVNULL)
    steal = steal_share(before, cpu_times())
    if done.returncode != 0:   # what was measured is still read; the rest is missing
        print(f"# deep500 run of {path} exited with status {done.returncode}", flush=True)
        if not os.path.isdir(out):
            return {}, {}, steal
    measured, compute = {}, {}
    for record in read_results(out):
        details = (record.get("result") or {}).get("details", {}).get("distributed")
        if details:
            key = mode_of(record["configuration"]["scheme"])
            measured[key] = float(np.median(synchronous_step_times(details["ranks"])))
            passes = [run_compute(rank) for rank in details["ranks"]]
            if passes and all(p is not None for p in passes):
                compute[key] = max(passes)
    return measured, compute, steal


def run_compute(rank: dict) -> float | None:
    """A rank's median compute-only forward and backward pass over its epochs
    (``compute_only_seconds_median``: blocking, every step's; overlapped, the scheme's
    compute-only passes), None without one."""
    values = [e["optimizer_measurements"]["compute_only_seconds_median"]
              for e in rank.get("epochs", [])
              if "compute_only_seconds_median" in (e.get("optimizer_measurements") or {})]
    return float(np.median(values)) if values else None


def at_run_speed(profile, run_compute_s: float | None):
    """``profile`` with every time scaled so that its forward and backward pass and the
    compute outside the nodes last what the run's own compute-only passes did (None:
    no such pass, no profile). The host's speed drifts by up to 1.5x between minutes
    (docs/cluster_emulation.md); a prediction at the run's speed leaves the simulator's
    communication, overlap and wait to be judged apart from that drift, as trace-driven
    simulators (dPRO, Lumos) take their compute from the run they replay."""
    if not run_compute_s or profile.compute_s <= 0:
        return None
    scale = run_compute_s / profile.compute_s
    return dataclasses.replace(
        profile, other_compute_s=profile.other_compute_s * scale,
        update_s=profile.update_s * scale, fusion_s=profile.fusion_s * scale,
        step_samples=[x * scale for x in profile.step_samples],
        layers=[dataclasses.replace(layer, forward_s=layer.forward_s * scale,
                                    backward_s=layer.backward_s * scale)
                for layer in profile.layers])


def predict(profile, machine, nodes: int, case, mode: str, dtype: str):
    return d5.simulate_training(profile, machine, nodes, algorithm=ALGORITHMS[mode],
                                overlap=mode == "overlapped", comm_dtype=dtype,
                                bucket_bytes=case.bucket_bytes)


def options(args) -> dict:
    """The sweep's settings from the command line (``--smoke``: ``SMOKE``)."""
    smoke = args.smoke
    keys = (SMOKE["models"] if smoke else list(CASES) if args.models == "all"
            else [k.strip() for k in args.models.split(",") if k.strip()])
    unknown = [k for k in keys if k not in CASES]
    if unknown:
        raise SystemExit(f"lv3_simulator --cluster: unknown models {unknown}; "
                         f"the models are {', '.join(CASES)}")
    nodes = SMOKE["nodes"] if smoke else sorted({int(n) for n in args.nodes.split(",")})
    if not any(n > 1 for n in nodes):
        raise SystemExit("lv3_simulator --cluster: give a node count > 1 in --nodes")
    return {"keys": keys, "nodes": nodes,
            "steps": SMOKE["steps"] if smoke else args.steps,
            "rounds": SMOKE["rounds"] if smoke else args.rounds or ROUNDS,
            "reruns": SMOKE["reruns"] if smoke else args.reruns or RERUNS,
            "calibrations": (["quick"] if smoke else ["quick", "full"]
                             if args.calibration == "both" else [args.calibration])}


def main(args) -> int:
    from deep500.lv3_distributed.cluster import require_privileges
    from deep500.utils.errors import Deep500Error
    try:
        require_privileges()
    except Deep500Error as error:
        print(f"lv3_simulator --cluster: {error}", file=sys.stderr)
        return 2
    o = options(args)
    extra = cluster_fields(args.cluster)
    rate = extra.pop("rate", None)   # given: one rate for every model
    cases = {key: dataclasses.replace(CASES[key], rate=rate) if rate else CASES[key]
             for key in o["keys"]}
    cores = usable_cpu_count()
    estimate = runtime_estimate(cases.values(), o["nodes"], o["rounds"], o["steps"],
                                o["reruns"], o["calibrations"], cores)
    print(f"# simulator on the emulated cluster: nodes {o['nodes']}, {cores} cores, "
          f"{o['rounds']} round(s) of {o['steps']} steps per configuration, "
          f"{' and '.join(o['calibrations'])} calibration; about "
          f"{max(1, round(estimate / 60))} minutes; {_load()}", flush=True)
    for case in cases.values():
        print(f"# model {case.key}: {case.label}, batch {case.batch} per rank, "
              f"{case.gradient_bytes / 1e6:.2f} MB of gradients, link {case.rate} "
              f"(allreduce about {gradient_share(case):.0%} of a 2-node step), bucket "
              f"{case.bucket_bytes >> 10} KiB")
    print("# one node: blocking fp32 only (without communication the other "
          "configurations run the same step); algorithms, measured and given to the "
          "simulator: " + ", ".join(f"{m} {a}" for m, a in ALGORITHMS.items()))
    keep = args.keep
    if keep:
        os.makedirs(keep, exist_ok=True)
    with (tempfile.TemporaryDirectory(prefix="deep500-simulator-cluster-") if not keep
          else contextlib.nullcontext(keep)) as folder:
        started = time.perf_counter()
        machines = {(n, r, kind): d5.load_machine(calibrate(folder, n, r, extra, kind))
                    for kind in o["calibrations"] for n in o["nodes"] if n > 1
                    for r in sorted({c.rate for c in cases.values()})}
        # This sweep's profiles, recipes and runs, apart from a kept folder's others.
        work = os.path.join(folder, time.strftime("sweep-%Y%m%d-%H%M%S"))
        os.makedirs(work)
        rows = sweep(work, o, cases, extra, machines)
        with open(os.path.join(work, "simulator-cluster.json"), "w") as f:
            json.dump({"options": {**o, "cluster": args.cluster, "cores": cores},
                       "rows": rows}, f, indent=1)
        print(f"# took {(time.perf_counter() - started) / 60:.1f} minutes (estimated "
              f"{estimate / 60:.1f}); {_load()}")
    status = report(rows, cores, o["calibrations"])
    from benchmark_targets import TARGETS
    return TARGETS.exit_status(args.check, status)


def _load() -> str:
    """The host's load, which shares the cores with the ranks."""
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def sweep(folder: str, o: dict, cases: dict, extra: dict, machines: dict) -> list:
    """Every round: profile and measure each node count, predict each configuration.
    Returns one row per configuration with its rounds."""
    rows = {}
    kinds = o["calibrations"]
    for r in range(o["rounds"]):
        for nodes in o["nodes"]:
            started = time.perf_counter()
            profiles, spread, polling = profiles_on_nodes(folder, nodes, cases, o["steps"],
                                                          o["reruns"], extra, f"-r{r}")
            print(f"# round {r + 1}: {nodes} node(s) profiled in "
                  f"{time.perf_counter() - started:.0f} s" + (
                      "; slowest rank's step over the fastest's: " + ", ".join(
                          f"{k} +{v:.0%}" for k, v in spread.items()) if nodes > 1
                      else ""), flush=True)
            for key, case in cases.items():
                started = time.perf_counter()
                measured, compute, steal = measure(folder, case, nodes, o["steps"], extra,
                                                   f"-r{r}")
                for mode, dtype in configurations(nodes):
                    # One node has no link: any machine file prices its (local) step.
                    machine = machines.get((nodes, case.rate, kinds[0]),
                                           next(iter(machines.values())))
                    steps = {kind: predict(profiles[key], machines.get(
                        (nodes, case.rate, kind), next(iter(machines.values()))), nodes,
                        case, mode, dtype) for kind in kinds}
                    at_speed = at_run_speed(profiles[key], compute.get((mode, dtype)))
                    in_run = (predict(at_speed, machine, nodes, case, mode, dtype).step_s
                              if at_speed is not None else None)
                    row = rows.setdefault((nodes, key, mode, dtype), {
                        "nodes": nodes, "model": key, "mode": mode, "wire": WIRE[dtype],
                        "rate": case.rate if nodes > 1 else "-", "rounds": []})
                    row["rounds"].append({
                        "measured_s": measured.get((mode, dtype)),
                        "predicted": steps[kinds[0]].to_dict(),
                        "predicted_by_calibration": {k: s.step_s for k, s in steps.items()},
                        "waiting_cpu": polling, "steal": steal,
                        "predicted_at_run_speed_s": in_run,
                        "run_compute_s": compute.get((mode, dtype))})
                print(f"# round {r + 1}: {nodes} node(s), {key}: measured (ms) " + ", ".join(
                    f"{m}/{WIRE[d]} {measured[(m, d)] * 1e3:.1f}" if (m, d) in measured
                    else f"{m}/{WIRE[d]} missing" for m, d in configurations(nodes))
                    + f" (launch {time.perf_counter() - started:.0f} s, steal "
                      f"{steal:.1%})", flush=True)
    return list(rows.values())
