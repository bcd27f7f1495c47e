"""Run by tests/lv3_distributed/test_async_schemes.py under ``mpirun -np N``.

Several epochs of a scheme (by name, from ``SCHEMES``), each ended by ``end_epoch`` as
the trainer does; with ``--unequal`` rank r takes ``steps + 2r`` steps per epoch (the
parameter server must not assume equal counts). Writes ``<out>/rank<R>.json``: per epoch
the steps taken, the measurements and the final parameters' fingerprint.
"""
import argparse
import json
import os

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.frameworks.reference.distributed import SCHEMES
from deep500.lv3_distributed import CommunicationNetwork, guarded_main
from deep500.networks import create_model

from check_schemes import fingerprint


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("scheme")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--unequal", action="store_true")
    parser.add_argument("--options", default="{}", help="JSON keyword arguments")
    args = parser.parse_args()
    comm = CommunicationNetwork()
    train, _ = d5.load_dataset("digits")
    model = create_model("mlp", input_shape=(1, 8, 8), hidden=(16,), classes=10,
                         loss="softmax_cross_entropy", seed=3)
    base = d5ref.MomentumOptimizer(d5ref.from_onnx(model), learning_rate=0.05,
                                   momentum=0.9)
    scheme = SCHEMES[args.scheme](base, comm, **json.loads(args.options))
    sampler = d5.DistributedSampler(train, 8, comm, seed=7)
    steps = args.steps + (2 * comm.rank if args.unequal else 0)
    epochs = []
    for _ in range(args.epochs):
        for index, batch in enumerate(sampler):
            if index == steps:
                break
            scheme.step(batch)
        sampler.reset()   # the next epoch, as the trainer does
        measured = scheme.end_epoch()
        epochs.append({"steps": steps, "measured": measured,
                       "params": fingerprint(scheme.fetch_parameters())})
    with open(os.path.join(args.out, f"rank{comm.rank}.json"), "w") as handle:
        json.dump({"rank": comm.rank, "size": comm.size, "epochs": epochs,
                   "analytic": scheme.analytic_traffic(steps)}, handle, default=float)
    scheme.close()   # frees the scheme's own communicator (collective)


if __name__ == "__main__":
    with guarded_main():
        main()
