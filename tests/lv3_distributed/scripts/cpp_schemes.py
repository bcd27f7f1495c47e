"""Run by tests/lv3_distributed/test_cpp_allreduce.py under ``mpirun -np N``.

Trains check_schemes' MLP on the digits from the same initial weights and the same
``d5.DistributedSampler`` minibatches with four schemes, each on its own executor and
``CommunicationNetwork``:

* ``python``: ``ConsistentDecentralized`` (Deep500's ring allreduce), the reference;
* ``cpp``: ``CppConsistentDecentralized`` (the C++ ``MPI_Allreduce`` operator);
* ``dense_topk``: ``SparseTopKDecentralized(density=1.0)``;
* ``sparse``: ``SparseTopKDecentralized(density=0.1)``, for ``--sparse-steps`` steps.

Writes ``<out>/rank<R>.json``: per scheme the per-step losses and parameter
fingerprints, the largest difference of the final parameters from ``python``'s, the
recorded volume entries, the analytic traffic and the epoch's measurements.
"""
import argparse
import json
import os

import numpy as np

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.frameworks.reference.distributed import ConsistentDecentralized
from deep500.frameworks.reference.distributed.cpp_allreduce import (
    CppConsistentDecentralized, SparseTopKDecentralized)
from deep500.lv3_distributed import CommunicationNetwork, guarded_main
from deep500.utils.errors import Deep500Error

from check_schemes import fingerprint, small_model


def train(scheme_class, options: dict, steps: int, batch: int, train_set) -> dict:
    comm = CommunicationNetwork()
    base = d5ref.GradientDescent(d5ref.from_onnx(small_model()), learning_rate=0.1)
    scheme = scheme_class(base, comm, **options)
    sampler = d5.DistributedSampler(train_set, batch, comm, seed=7)
    losses, prints = [], []
    for index, minibatch in enumerate(sampler):
        if index == steps:
            break
        outputs = scheme.step(minibatch)
        losses.append(float(outputs["loss"]))
        prints.append(fingerprint(scheme.fetch_parameters()))
    return {"scheme": scheme, "losses": losses, "fingerprints": prints,
            "params": scheme.fetch_parameters(), "measured": scheme.end_epoch(),
            "analytic": scheme.analytic_traffic(len(losses)),
            "volume": {key: entry.to_dict() for key, entry in comm.volume.entries.items()},
            "consistent": scheme.consistent, "k": getattr(scheme, "k", None)}


def max_difference(a: dict, b: dict) -> float:
    return max(float(np.max(np.abs(a[name] - b[name]))) for name in a)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--sparse-steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    train_set, _ = d5.load_dataset("digits")
    runs = {
        "python": train(ConsistentDecentralized, {}, args.steps, args.batch, train_set),
        "cpp": train(CppConsistentDecentralized, {}, args.steps, args.batch, train_set),
        "dense_topk": train(SparseTopKDecentralized, {"density": 1.0}, args.steps,
                            args.batch, train_set),
        "sparse": train(SparseTopKDecentralized, {"density": 0.1}, args.sparse_steps,
                        args.batch, train_set),
    }
    try:
        SparseTopKDecentralized(d5ref.GradientDescent(d5ref.from_onnx(small_model())),
                                None, density=0.0)
        density_error = None
    except Deep500Error as error:
        density_error = str(error)
    reference = runs["python"]["params"]
    result = {"rank": runs["python"]["scheme"].rank, "size": runs["python"]["scheme"].size,
              "density_error": density_error, "schemes": {}}
    for name, run in runs.items():
        result["schemes"][name] = {
            key: run[key] for key in ("losses", "fingerprints", "measured", "analytic",
                                      "volume", "consistent", "k")}
        if name != "sparse":
            result["schemes"][name]["max_difference"] = max_difference(run["params"],
                                                                       reference)
    with open(os.path.join(args.out, f"rank{result['rank']}.json"), "w") as handle:
        json.dump(result, handle, default=float)


if __name__ == "__main__":
    with guarded_main():
        main()
