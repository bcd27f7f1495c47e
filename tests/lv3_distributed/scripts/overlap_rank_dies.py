"""Run by tests/lv3_distributed/test_overlap.py under ``mpirun -np 2``.

``ConsistentDecentralized(algorithm="mpi", overlap=True)`` with small buckets; at step 3
rank 1 fails before its backward pass while rank 0 is inside its overlapped step (its
buckets' ``MPI_Iallreduce`` started, waiting for them): ``guarded_main`` must stop every
rank. Each rank appends a line to ``<out>/steps<R>.txt`` after every step it finished
(what was measured before the failure stays on disk).
"""
import os
import sys

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.lv3_distributed import CommunicationNetwork, guarded_main
from deep500.networks import create_model


def main(out):
    comm = CommunicationNetwork()
    train, _ = d5.load_dataset("digits")
    model = create_model("mlp", input_shape=(1, 8, 8), hidden=(32, 16), classes=10,
                         loss="softmax_cross_entropy", seed=3)
    executor = d5ref.from_onnx(model)
    scheme = d5ref.ConsistentDecentralized(d5ref.GradientDescent(executor, learning_rate=0.1),
                                           comm, algorithm="mpi", overlap=True,
                                           bucket_bytes=512)
    if comm.rank == 1:
        run = executor.inference_and_backprop

        def failing(inputs, y="loss", **kwargs):
            if scheme.step_count == 3:
                raise RuntimeError("deliberate failure of rank 1 in an overlapped step")
            return run(inputs, y, **kwargs)
        executor.inference_and_backprop = failing
    log = os.path.join(out, f"steps{comm.rank}.txt")
    for index, batch in enumerate(d5.DistributedSampler(train, 8, comm, seed=7)):
        scheme.step(batch)
        with open(log, "a") as handle:
            handle.write(f"step {index} done\n")
    print(f"rank {comm.rank} finished the epoch", flush=True)


if __name__ == "__main__":
    with guarded_main():
        main(sys.argv[1])
