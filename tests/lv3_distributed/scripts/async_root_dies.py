"""Run by tests/lv3_distributed/test_async_schemes.py under ``mpirun -np N``.

``InconsistentParameterServer`` with its root failing at step 3 while the workers wait
for their parameters: ``guarded_main`` must stop every rank (no worker left waiting).
Each rank writes ``<out>/started<R>.txt`` before training.
"""
import os
import sys

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.frameworks.reference.distributed import InconsistentParameterServer
from deep500.lv3_distributed import CommunicationNetwork, guarded_main
from deep500.networks import create_model


def main(out):
    comm = CommunicationNetwork()
    train, _ = d5.load_dataset("digits")
    model = create_model("mlp", input_shape=(1, 8, 8), hidden=(16,), classes=10,
                         loss="softmax_cross_entropy", seed=3)
    scheme = InconsistentParameterServer(
        d5ref.GradientDescent(d5ref.from_onnx(model), learning_rate=0.1), comm)
    with open(os.path.join(out, f"started{comm.rank}.txt"), "w") as handle:
        handle.write("started\n")
    for index, batch in enumerate(d5.DistributedSampler(train, 8, comm, seed=7)):
        if comm.rank == scheme.root and index == 3:
            raise RuntimeError("deliberate failure of the parameter server")
        scheme.step(batch)
    scheme.end_epoch()
    print(f"rank {comm.rank} finished the epoch", flush=True)


if __name__ == "__main__":
    with guarded_main():
        main(sys.argv[1])
