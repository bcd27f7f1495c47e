"""Run by tests/lv3_distributed/test_mpi_profiling.py, as one MPI process (a singleton
world) with a PMPI interposer preloaded: ``d5.test_training`` of a small MLP on the
digits under ``d5.DistributedOptimizer`` for one epoch with ``d5.MPIProfiling()``;
writes the metric's summary and the epoch's step count as JSON to the path given."""
import json
import sys

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.lv3_distributed import CommunicationNetwork, guarded_main
from deep500.lv3_distributed.mpi_profiling import MPIProfiling
from deep500.networks import create_model


def main(out):
    comm = CommunicationNetwork()
    MPIProfiling.off()   # set-up is outside the measured phase
    train, test = d5.load_dataset("digits")
    batch = 64
    model = create_model("mlp", input_shape=(1, 8, 8), hidden=(16,), classes=10,
                         loss="softmax_cross_entropy", seed=3)
    executor = d5ref.from_onnx(model)
    optimizer = d5.DistributedOptimizer(d5ref.GradientDescent(executor, learning_rate=0.1),
                                        comm)
    profiling = MPIProfiling()
    sampler = d5.DistributedSampler(train, batch, comm, seed=7)
    result = d5.test_training(executor, train, test, optimizer, epochs=1,
                              batch_size=batch, metrics=[profiling], sampler=sampler,
                              seed=7)
    summary = next(m for m in result.metrics if m.metric == "MPIProfiling").summary
    with open(out, "w") as handle:
        json.dump({"summary": summary, "steps": result.outputs.epochs[0].steps}, handle)
    comm.close()


if __name__ == "__main__":
    with guarded_main():
        main(sys.argv[1])
