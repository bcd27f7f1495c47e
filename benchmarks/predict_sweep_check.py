"""``deep500 predict --sweep link_bandwidth=...`` against an emulated cluster: the step
time the sweep predicts at each link rate, and the step time ``deep500 run --np 2
--cluster nodes=2,rate=R`` measures there (issue 28, item 7; docs/cluster_emulation.md).

Needs root (network namespaces and tc). Steps:

1. **Recipe**: ``recipes/distributed.yaml``'s fixed settings (digits, reference SGD,
   one thread per rank, seed 0) with a wide MLP, 64-1024-1024-10 (``--hidden``; 4.5 MB
   of float32 gradients, so that the allreduce takes 10-100 ms between 0.5 and 5
   Gbit/s and the rate axis is tested, not the compute), ``ConsistentDecentralized``
   with ``--algorithm`` (ring), ``--batch`` 16 per rank, ``--epochs``.
2. **Machine**: one calibration on the emulated cluster at ``--calibration-rate``
   (1gbit): ``deep500 calibrate --np 2 --cluster nodes=2,rate=1gbit`` (``--quick`` in
   the smoke run), or ``--machine FILE`` calibrated at that rate.
3. **Predicted**: ``deep500 predict RECIPE --machine FILE --ranks 2 --sweep
   link_bandwidth=...`` (compute profiled here, on one rank), read from its JSON. The
   link_bandwidth axis is the bandwidth large messages get (8/β of a ping-pong), so an
   emulated rate R is swept as the payload TCP carries at R: R·1448/1514 (a 1500-byte
   MTU frame carries 1448 bytes of payload in 1514 bytes on the wire; the per-node
   emulation reaches this ceiling, docs/cluster_emulation.md). The calibration's own
   B₀ is printed beside the ceiling at its rate.
4. **Measured**: per rate, ``deep500 run --np 2 --cluster nodes=2,rate=R RECIPE``; a
   step's time is the slower rank's ``optimizer.step`` (``synchronous_step_times``, each
   rank's first step left out), the rate's figure the median over steps. Beside it,
   the per-step compute, communication and update of the scheme's phase times (the
   slower rank's mean), to show which part a miss comes from.

Printed: a table rate | swept link bandwidth | predicted parts | predicted ms |
measured ms | ratio, and last ``sweep check on the emulated cluster: median error X%,
worst Y%`` (|predicted/measured − 1| over the rates). No target is asserted: the
figure says how far the what-if's link axis can be trusted on this emulation.

Run (as root):  python benchmarks/predict_sweep_check.py [--cluster-rates 0.5gbit,1gbit,5gbit]
        [--epochs 3] [--machine FILE --calibration-rate 1gbit] [--keep DIR] [--smoke]
``--smoke``: a quick calibration, the first rate only, one epoch (66-106 s on a 2-core
machine, by its load).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from deep500.lv3_distributed.cluster import parse_cluster, require_privileges  # noqa: E402
from deep500.lv3_distributed.distributed_training import synchronous_step_times  # noqa: E402
from deep500.recipe.sweep_axes import base_link_bandwidth  # noqa: E402
from deep500.results.files import read_results  # noqa: E402
from deep500.utils.errors import Deep500Error  # noqa: E402
from deep500.utils.machine import load_machine  # noqa: E402
from benchmark_targets import expected_run_time  # noqa: E402
from run_time_estimates import predict_sweep_check  # noqa: E402

DEEP500 = [sys.executable, "-m", "deep500"]
TCP_PAYLOAD = 1448 / 1514   # payload per frame byte: 1500-byte MTU, TCP timestamps
DISTRIBUTED_RECIPE = os.path.join(REPO, "recipes", "distributed.yaml")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cluster-rates", default="0.5gbit,1gbit,5gbit",
                        help="link rates to emulate and predict (tc units)")
    parser.add_argument("--calibration-rate", default="1gbit", help="the rate the "
                        "machine is calibrated at (or --machine was calibrated at)")
    parser.add_argument("--machine", help="machine file calibrated on nodes=2 at "
                        "--calibration-rate (default: calibrate here)")
    parser.add_argument("--hidden", default="1024,1024", help="the MLP's hidden widths")
    parser.add_argument("--batch", type=int, default=16, help="samples per rank per step")
    parser.add_argument("--algorithm", default="ring", help="ConsistentDecentralized's "
                        "allreduce algorithm")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--keep", metavar="DIR", help="keep the recipe, machine, sweep "
                        "JSON and plot, and run folders here")
    parser.add_argument("--smoke", action="store_true", help="quick calibration, the "
                        "first rate only, one epoch")
    return parser.parse_args()


def write_recipe(folder: str, args) -> str:
    """The distributed recipe's fixed settings with the wide MLP and one scheme."""
    with open(DISTRIBUTED_RECIPE) as f:
        fixed = dict(yaml.safe_load(f)["fixed"])
    fixed.update({"network": {"model": "mlp", "hidden": [int(h) for h in
                                                         args.hidden.split(",")]},
                  "batch_size": args.batch, "epochs": 1 if args.smoke else args.epochs,
                  "scheme": {"scheme": "ConsistentDecentralized",
                             "algorithm": args.algorithm}})
    recipe = {"name": "predict-sweep-check", "experiment": "distributed", "fixed": fixed,
              "description": "benchmarks/predict_sweep_check.py: one scheme, measured at "
                             "each emulated link rate"}
    path = os.path.join(folder, "recipe.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(recipe, f, sort_keys=False)
    return path


def _run(command: list, what: str, env=None) -> str:
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed (exit {done.returncode}): {' '.join(command)}\n"
                         f"{(done.stdout + done.stderr)[-3000:]}")
    return done.stdout


def calibrate(folder: str, rate: str, quick: bool) -> str:
    out = os.path.join(folder, "machine.yaml")
    _run(DEEP500 + ["calibrate", "--np", "2", "--cluster", f"nodes=2,rate={rate}", "--out",
                    out, "--quiet"] + (["--quick"] if quick else []), "calibration")
    return out


def predict(folder: str, recipe: str, machine: str, bandwidths) -> list[dict]:
    """The sweep's points, in the order of ``bandwidths``."""
    out = os.path.join(folder, "sweep.json")
    values = ",".join(f"{b:.6g}" for b in bandwidths)
    _run(DEEP500 + ["predict", recipe, "--machine", machine, "--ranks", "2", "--sweep",
                    f"link_bandwidth={values}", "--json", out, "--plot",
                    os.path.join(folder, "sweep.png")], "deep500 predict --sweep")
    with open(out) as f:
        (workload,) = json.load(f)["workloads"]
    points = {p["link_bandwidth"]: p for p in workload["points"]}
    return [points[min(points, key=lambda v: abs(v / b - 1))] for b in bandwidths]


def measure(folder: str, recipe: str, rate: str) -> dict:
    """The median synchronous step (s) at ``rate`` and the slower rank's mean compute,
    communication and update per step (s)."""
    out = os.path.join(folder, f"run-{rate}")
    env = dict(os.environ, DEEP500_DB=os.path.join(folder, "results.db"))
    _run(DEEP500 + ["run", "--np", "2", "--cluster", f"nodes=2,rate={rate}", recipe,
                    "--out", out, "--quiet"], f"deep500 run at rate={rate}", env=env)
    for record in read_results(out):
        details = (record.get("result") or {}).get("details", {}).get("distributed")
        if not details:
            continue
        result = {"step_s": float(np.median(synchronous_step_times(details["ranks"])))}
        for phase in ("compute", "communication", "update"):
            result[phase] = max(
                sum(e["optimizer_measurements"]["phase_times"][phase] for e in r["epochs"])
                / max(sum(e["steps"] for e in r["epochs"]), 1) for r in details["ranks"])
        return result
    raise SystemExit(f"deep500 run at rate={rate} wrote no distributed record in {out}")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:9.2f}"


def check(folder: str, args) -> int:
    rates = [r.strip() for r in args.cluster_rates.split(",") if r.strip()]
    bits = {r: parse_cluster(f"nodes=2,rate={r}").rate_bits for r in rates}
    calibration_bits = parse_cluster(f"nodes=2,rate={args.calibration_rate}").rate_bits
    if args.smoke:
        rates = rates[:1]
    expected_run_time(*predict_sweep_check(len(rates), 1 if args.smoke else args.epochs,
                                           calibrate=not args.machine))
    recipe = write_recipe(folder, args)
    machine_path = args.machine or calibrate(folder, args.calibration_rate, args.smoke)
    machine = load_machine(machine_path)
    b0 = base_link_bandwidth(machine)
    print(f"# machine: {machine.name} ({machine.source})")
    print(f"# calibrated large-message bandwidth B0 = {b0 / 1e9:.3f} Gbit/s at "
          f"rate={args.calibration_rate} (TCP payload ceiling "
          f"{calibration_bits * TCP_PAYLOAD / 1e9:.3f}); rate R is swept as R x 1448/1514")
    bandwidths = [bits[r] * TCP_PAYLOAD for r in rates]
    predicted = predict(folder, recipe, machine_path, bandwidths)
    print(f"# mlp 64-{args.hidden.replace(',', '-')}-10 on digits, ConsistentDecentralized"
          f"({args.algorithm}), batch {args.batch}/rank, 2 ranks, "
          f"{1 if args.smoke else args.epochs} epoch(s); "
          f"{predicted[0]['gradient_bytes'] / 1e6:.2f} MB of gradients")
    print(f"{'rate':>8} {'swept Gb/s':>10} {'compute':>9} {'comm':>9} {'wait':>9} "
          f"{'update':>9} {'predicted':>9} {'measured':>9} {'ratio':>6}   measured "
          f"compute / comm / update (ms)")
    errors = []
    for rate, bandwidth, point in zip(rates, bandwidths, predicted):
        measured = measure(folder, recipe, rate)
        ratio = point["step_s"] / measured["step_s"]
        errors.append(abs(ratio - 1))
        print(f"{rate:>8} {bandwidth / 1e9:>10.3f} {_ms(point['compute_s'])} "
              f"{_ms(point['exposed_communication_s'])} {_ms(point['straggler_s'])} "
              f"{_ms(point['update_s'])} {_ms(point['step_s'])} {_ms(measured['step_s'])} "
              f"{ratio:>6.3f}   {measured['compute'] * 1e3:.2f} / "
              f"{measured['communication'] * 1e3:.2f} / {measured['update'] * 1e3:.2f}",
              flush=True)
    print("# times in ms; predicted parts: compute, exposed communication, wait for the "
          "slower rank, update")
    print(f"sweep check on the emulated cluster: median error "
          f"{float(np.median(errors)) * 100:.1f}%, worst {max(errors) * 100:.1f}%")
    return 0


def main() -> int:
    args = parse()
    try:
        require_privileges()
    except Deep500Error as error:
        print(f"predict_sweep_check: {error}", file=sys.stderr)
        return 2
    try:
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            return check(args.keep, args)
        with tempfile.TemporaryDirectory(prefix="deep500-sweep-check-") as folder:
            return check(folder, args)
    except Deep500Error as error:   # a bad rate, a machine file that cannot be used
        print(f"predict_sweep_check: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
