"""Run by tests/lv3_distributed/test_distributed_training.py under ``mpirun -np N``:
``d5.test_training`` on every rank with a distributed sampler and a reference scheme;
rank 0 writes ``<out>/result.json`` (the result with every rank's statistics and the
global figures), every rank ``<out>/analytic<R>.json`` (its scheme's analytic traffic for
one epoch)."""
import argparse
import json
import os

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.lv3_distributed import CommunicationNetwork, guarded_main
from deep500.networks import create_model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("scheme")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--options", default="{}")
    args = parser.parse_args()
    comm = CommunicationNetwork()
    train, test = d5.load_dataset("digits")
    model = create_model("mlp", input_shape=(1, 8, 8), hidden=(32,), classes=10,
                         loss="softmax_cross_entropy", seed=1)
    executor = d5ref.from_onnx(model)
    base = d5ref.MomentumOptimizer(executor, learning_rate=0.05, momentum=0.9)
    scheme = d5ref.SCHEMES[args.scheme](base, comm, **json.loads(args.options))
    sampler = d5.DistributedSampler(train, 16, comm, seed=3)
    result = d5.test_training(executor, train, test, scheme, args.epochs, 16,
                              metrics=[d5.TestAccuracy(), d5.TrainingAccuracy()],
                              sampler=sampler, network_output="output")
    with open(os.path.join(args.out, f"analytic{comm.rank}.json"), "w") as handle:
        json.dump(scheme.analytic_traffic(len(sampler)), handle)
    if comm.rank == 0:
        with open(os.path.join(args.out, "result.json"), "w") as handle:
            json.dump(result.to_dict(), handle, default=str)


if __name__ == "__main__":
    with guarded_main():
        main()
