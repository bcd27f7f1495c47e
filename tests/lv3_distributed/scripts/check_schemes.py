"""Run by tests/lv3_distributed/test_schemes.py under ``mpirun -np N``.

Trains a small MLP on the digits with a reference distributed scheme (by name, from
``d5ref.distributed.SCHEMES``, or ``d5.DistributedOptimizer``) wrapping a reference optimizer, for ``--steps`` steps of
``d5.DistributedSampler`` minibatches, and writes ``<out>/rank<R>.json`` (per step: the
SHA-256 of the fused parameters and the loss; the epoch's optimizer measurements; the
communication volume; the scheme's analytic traffic) and ``<out>/rank<R>.npz`` (the final
parameters). The test compares ranks with each other and with one process.
"""
import argparse
import hashlib
import json
import os

import numpy as np

import deep500 as d5
from deep500.networks import create_model
from deep500.frameworks import reference as d5ref
from deep500.frameworks.reference.distributed import SCHEMES
from deep500.lv3_distributed import CommunicationNetwork, guarded_main

BASES = {"sgd": (d5ref.GradientDescent, {"learning_rate": 0.1}),
         "momentum": (d5ref.MomentumOptimizer, {"learning_rate": 0.05, "momentum": 0.9}),
         "adam": (d5ref.AdamOptimizer, {"learning_rate": 0.01})}


def small_model():
    """The MLP every test of the schemes trains (also built by the single-process
    comparison in the test)."""
    return create_model("mlp", input_shape=(1, 8, 8), hidden=(16,),
                                    classes=10, loss="softmax_cross_entropy", seed=3)


def fingerprint(arrays: dict) -> str:
    digest = hashlib.sha256()
    for name in sorted(arrays):
        digest.update(np.ascontiguousarray(arrays[name]).tobytes())
    return digest.hexdigest()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("scheme")
    parser.add_argument("--base", default="sgd", choices=sorted(BASES))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--options", default="{}", help="JSON keyword arguments")
    args = parser.parse_args()
    comm = CommunicationNetwork()
    train, _ = d5.load_dataset("digits")
    executor = d5ref.from_onnx(small_model())
    base_class, hyper = BASES[args.base]
    base = base_class(executor, **hyper)
    scheme_class = SCHEMES.get(args.scheme) or getattr(d5, args.scheme)
    scheme = scheme_class(base, comm, **json.loads(args.options))
    sampler = d5.DistributedSampler(train, args.batch, comm, seed=7)
    steps = []
    for index, batch in enumerate(sampler):
        if index == args.steps:
            break
        outputs = scheme.step(batch)
        steps.append({"loss": float(outputs["loss"]),
                      "params": fingerprint(scheme.fetch_parameters())})
    measured = scheme.end_epoch()
    analytic = scheme.analytic_traffic(len(steps))
    result = {"rank": comm.rank, "size": comm.size, "scheme": scheme.name,
              "consistent": scheme.consistent, "steps": steps, "measured": measured,
              "analytic": analytic, "volume": comm.volume.to_dict(),
              "indices": [sampler.epoch_order(0)[:len(steps) * args.batch * comm.size]
                          .tolist()]}
    with open(os.path.join(args.out, f"rank{comm.rank}.json"), "w") as handle:
        json.dump(result, handle, default=float)
    np.savez(os.path.join(args.out, f"rank{comm.rank}.npz"), **scheme.fetch_parameters())
    scheme.close()
    comm.close()


if __name__ == "__main__":
    with guarded_main():
        main()
