"""Run by tests/lv3_distributed/test_overlap.py under ``mpirun -np N``.

Trains the small MLP of ``check_schemes.py`` (or, with ``--model lenet``, a small
LeNet) on the digits with ``ConsistentDecentralized`` (or ``--scheme NAME``, another
reference scheme) (options as JSON, e.g.
``{"algorithm": "mpi", "overlap": true, "bucket_bytes": 512}``) on the reference or
PyTorch executor, and writes ``<out>/rank<R>.json`` (per step the SHA-256 of the
parameters; the epoch's measurements) and ``<out>/rank<R>.npz`` (final parameters).
"""
import argparse
import json
import os

import numpy as np

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.lv3_distributed import CommunicationNetwork, guarded_main
from deep500.networks import create_model

from check_schemes import BASES, fingerprint, small_model


def model(name):
    if name == "mlp":
        return small_model()
    return create_model("lenet", input_shape=(1, 8, 8), classes=10,
                        loss="softmax_cross_entropy", seed=3)


def executor_for(kind, onnx_model):
    if kind == "reference":
        return d5ref.from_onnx(onnx_model)
    from deep500.frameworks import pytorch as d5pt
    return d5pt.from_onnx(onnx_model)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--executor", default="reference", choices=("reference", "pytorch"))
    parser.add_argument("--model", default="mlp", choices=("mlp", "lenet"))
    parser.add_argument("--base", default="momentum", choices=sorted(BASES))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--options", default="{}", help="JSON keyword arguments")
    parser.add_argument("--scheme", default="ConsistentDecentralized")
    args = parser.parse_args()
    comm = CommunicationNetwork()
    train, _ = d5.load_dataset("digits")
    executor = executor_for(args.executor, model(args.model))
    base_class, hyper = BASES[args.base]
    scheme = getattr(d5ref, args.scheme)(base_class(executor, **hyper), comm,
                                         **json.loads(args.options))
    sampler = d5.DistributedSampler(train, args.batch, comm, seed=7)
    steps = []
    for index, batch in enumerate(sampler):
        if index == args.steps:
            break
        scheme.step(batch)
        steps.append(fingerprint(scheme.fetch_parameters()))
    measured = scheme.end_epoch()
    with open(os.path.join(args.out, f"rank{comm.rank}.json"), "w") as handle:
        json.dump({"rank": comm.rank, "steps": steps, "measured": measured,
                   "hyperparameters": scheme.hyperparameters()}, handle, default=float)
    np.savez(os.path.join(args.out, f"rank{comm.rank}.npz"), **scheme.fetch_parameters())
    scheme.close()
    comm.close()


if __name__ == "__main__":
    with guarded_main():
        main()
