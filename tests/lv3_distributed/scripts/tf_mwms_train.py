"""Run by tests/frameworks/test_tensorflow_distributed.py under ``mpirun -np N``.

Starts TensorFlow's MultiWorkerMirroredStrategy on the MPI ranks before any other
TensorFlow work, then, on the same strategy:

* ``steps``: ``d5tf.TensorFlowMultiWorkerMirrored(d5tf.GradientDescent)`` on a small MLP
  (ONNX) for ``--steps`` steps of ``d5.DistributedSampler`` minibatches (seed 7), with
  each step's loss and parameter fingerprint, the epoch's measurements and the
  analytic traffic; the final parameters in ``<out>/rank<R>-steps.npz``;
* ``training``: ``d5.test_training`` of a fresh network (momentum SGD) on the digits
  for ``--epochs`` epochs, with each epoch's test accuracy and the distributed summary.

Writes ``<out>/rank<R>.json``.
"""
import argparse
import hashlib
import json
import os
import time

import numpy as np

import deep500 as d5
from deep500.lv3_distributed import CommunicationNetwork, guarded_main
from deep500.networks import create_model


def small_model(hidden=(16,)):
    return create_model("mlp", input_shape=(1, 8, 8), hidden=hidden, classes=10,
                        loss="softmax_cross_entropy", seed=3)


def fingerprint(arrays: dict) -> str:
    digest = hashlib.sha256()
    for name in sorted(arrays):
        digest.update(np.ascontiguousarray(arrays[name]).tobytes())
    return digest.hexdigest()


def run_steps(d5tf, comm, train, steps, batch, out):
    from deep500.frameworks.tensorflow.distributed import TensorFlowMultiWorkerMirrored
    executor = d5tf.from_onnx(small_model())
    initial = {n: executor.network.fetch_tensor(n) for n in executor.network.get_params()}
    scheme = TensorFlowMultiWorkerMirrored(d5tf.GradientDescent(executor, learning_rate=0.1),
                                           comm)
    records = []
    for index, minibatch in enumerate(d5.DistributedSampler(train, batch, comm, seed=7)):
        if index == steps:
            break
        outputs = scheme.step(minibatch)
        records.append({"loss": float(outputs["loss"]),
                        "params": fingerprint(scheme.fetch_parameters())})
    measured = scheme.end_epoch()
    np.savez(os.path.join(out, f"rank{comm.rank}-steps.npz"), **scheme.fetch_parameters())
    np.savez(os.path.join(out, f"rank{comm.rank}-initial.npz"), **initial)
    return {"name": scheme.name, "steps": records, "measured": measured,
            "analytic": scheme.analytic_traffic(len(records)),
            "volume": comm.volume.to_dict()["entries"],
            "hyperparameters": scheme.hyperparameters(), "consistent": scheme.consistent}


def run_training(d5tf, comm, train, test, epochs, batch, hidden):
    from deep500.frameworks.tensorflow.distributed import TensorFlowMultiWorkerMirrored
    executor = d5tf.from_onnx(small_model(hidden))
    optimizer = TensorFlowMultiWorkerMirrored(
        d5tf.MomentumOptimizer(executor, learning_rate=0.05, momentum=0.9), comm)
    sampler = d5.DistributedSampler(train, batch, comm, seed=1)
    started = time.perf_counter()
    result = d5.test_training(executor, train, test, optimizer, epochs=epochs,
                              batch_size=batch, sampler=sampler,
                              metrics=[d5.TestAccuracy()])
    epochs = result.details["statistics"]["epochs"]
    return {"seconds": time.perf_counter() - started,
            "test_accuracy": [e["test_accuracy"] for e in epochs],
            "optimizer_measurements": [e["optimizer_measurements"] for e in epochs],
            "distributed": result.details.get("distributed")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=32)
    args = parser.parse_args()
    comm = CommunicationNetwork()
    # Before TensorFlow runs anything in this process.
    from deep500.frameworks import tensorflow as d5tf
    from deep500.frameworks.tensorflow.distributed import start_multi_worker_strategy
    start_multi_worker_strategy(comm)
    train, test = d5.load_dataset("digits")
    result = {"rank": comm.rank, "size": comm.size,
              "steps": run_steps(d5tf, comm, train, args.steps, args.batch, args.out),
              "training": run_training(d5tf, comm, train, test, args.epochs, 16,
                                       (args.hidden,))}
    with open(os.path.join(args.out, f"rank{comm.rank}.json"), "w") as handle:
        json.dump(result, handle, default=float)


if __name__ == "__main__":
    with guarded_main():
        main()
