"""Run by tests/frameworks/test_pytorch_distributed.py under ``mpirun -np N``.

Trains the same small MLP (ONNX) on the digits for ``--steps`` steps of
``d5.DistributedSampler`` minibatches, once per case:

* ``ddp-sgd``, ``ddp-momentum``: ``d5pt.PyTorchDistributedDataParallel`` over
  ``d5pt.GradientDescent`` / ``d5pt.MomentumOptimizer`` on a ``d5pt.from_onnx`` executor;
* ``ref-sgd``: ``d5ref.ConsistentDecentralized(d5ref.GradientDescent)`` on a
  ``d5ref.from_onnx`` executor;

then runs ``d5.test_training`` for one epoch with DDP (its Timeline written to
``<out>/ddp_timeline*.json``). Writes ``<out>/rank<R>.json``
(per case: per-step losses and parameter fingerprints, the epoch's measurements, the
analytic traffic, the volume entries, the bytes the kernel saw this process write and
read during the steps; the training run's result) and ``<out>/rank<R>-<case>.npz`` (the
final parameters).
"""
import argparse
import hashlib
import json
import os

import numpy as np

import deep500 as d5
from deep500.frameworks import pytorch as d5pt
from deep500.frameworks import reference as d5ref
from deep500.frameworks.pytorch.distributed import PyTorchDistributedDataParallel
from deep500.frameworks.reference.distributed import ConsistentDecentralized
from deep500.lv3_distributed import CommunicationNetwork, guarded_main
from deep500.lv3_distributed.timeline_metric import Timeline
from deep500.networks import create_model

CASES = {
    "ddp-sgd": lambda: (d5pt.from_onnx, lambda ex: d5pt.GradientDescent(
        ex, learning_rate=0.1), PyTorchDistributedDataParallel),
    "ddp-momentum": lambda: (d5pt.from_onnx, lambda ex: d5pt.MomentumOptimizer(
        ex, learning_rate=0.05, momentum=0.9), PyTorchDistributedDataParallel),
    "ref-sgd": lambda: (d5ref.from_onnx, lambda ex: d5ref.GradientDescent(
        ex, learning_rate=0.1), ConsistentDecentralized),
}


def small_model():
    return create_model("mlp", input_shape=(1, 8, 8), hidden=(16,), classes=10,
                        loss="softmax_cross_entropy", seed=3)


def fingerprint(arrays: dict) -> str:
    digest = hashlib.sha256()
    for name in sorted(arrays):
        digest.update(np.ascontiguousarray(arrays[name]).tobytes())
    return digest.hexdigest()


def kernel_io() -> dict:
    """This process's bytes written and read through system calls (Linux), which
    include gloo's socket traffic."""
    try:
        with open("/proc/self/io") as handle:
            fields = dict(line.split(": ") for line in handle.read().splitlines())
        return {"written": int(fields["wchar"]), "read": int(fields["rchar"])}
    except OSError:
        return {}


def run_case(name, comm, train, steps, batch):
    make_executor, make_base, scheme_class = CASES[name]()
    scheme = scheme_class(make_base(make_executor(small_model())), comm)
    sampler = d5.DistributedSampler(train, batch, comm, seed=7)
    records = []
    before = kernel_io()
    for index, minibatch in enumerate(sampler):
        if index == steps:
            break
        outputs = scheme.step(minibatch)
        records.append({"loss": float(outputs["loss"]),
                        "params": fingerprint(scheme.fetch_parameters())})
    after = kernel_io()
    measured = scheme.end_epoch()
    parameters = scheme.fetch_parameters()
    np.savez(os.path.join(OUT, f"rank{comm.rank}-{name}.npz"), **parameters)
    return {"name": scheme.name, "steps": records, "measured": measured,
            "analytic": scheme.analytic_traffic(len(records)),
            "volume": comm.volume.to_dict()["entries"],
            "kernel_io": {k: after[k] - before[k] for k in after},
            "hyperparameters": scheme.hyperparameters(), "consistent": scheme.consistent}


def run_training(comm, train, test):
    executor = d5pt.from_onnx(small_model())
    optimizer = PyTorchDistributedDataParallel(
        d5pt.MomentumOptimizer(executor, learning_rate=0.05, momentum=0.9), comm)
    sampler = d5.DistributedSampler(train, 16, comm, seed=1)
    timeline = Timeline(os.path.join(OUT, "ddp_timeline.json"), first_steps=3, every=0)
    result = d5.test_training(executor, train, test, optimizer, epochs=1, batch_size=16,
                              sampler=sampler, metrics=[d5.TestAccuracy(), timeline])
    return {"test_accuracy": result.details["statistics"]["epochs"][0]["test_accuracy"],
            "optimizer_measurements":
                result.details["statistics"]["epochs"][0]["optimizer_measurements"],
            "distributed": result.details.get("distributed")}


def main():
    global OUT
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--training", action="store_true")
    args = parser.parse_args()
    OUT = args.out
    comm = CommunicationNetwork()
    train, test = d5.load_dataset("digits")
    result = {"rank": comm.rank, "size": comm.size, "cases": {}}
    for name in args.cases.split(","):
        result["cases"][name] = run_case(name, comm, train, args.steps, args.batch)
    if args.training:
        result["training"] = run_training(comm, train, test)
    with open(os.path.join(OUT, f"rank{comm.rank}.json"), "w") as handle:
        json.dump(result, handle, default=float)


OUT = None

if __name__ == "__main__":
    with guarded_main():
        main()
