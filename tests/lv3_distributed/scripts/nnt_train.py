"""Run by tests/lv3_distributed/test_nnt.py under ``mpirun -np N``: ``d5.test_training``
of the digits MLP on every rank with a distributed sampler and a reference scheme
(by name, ``--options`` as JSON). ``--slow-rank R --sleep S``: rank R sleeps S seconds
before each of its steps (an optimizer event, so inside the step the trainer times).
``--as-event``: the scheme is also given to the trainer as a training event (NNT then
synchronises on the trainer's test accuracy). Writes ``<out>/rank<R>.json``: per epoch
the test accuracy, the step times and the optimizer's measurements; the analytic
traffic of one epoch."""
import argparse
import json
import os
import time

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.lv2_training.optimizer import OptimizerEvent
from deep500.lv3_distributed import CommunicationNetwork, guarded_main
from deep500.networks import create_model


class Sleep(OptimizerEvent):
    def __init__(self, seconds):
        self.seconds = seconds

    def before_optimizer_step(self, optimizer, inputs):
        time.sleep(self.seconds)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("scheme")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--options", default="{}")
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--as-event", action="store_true")
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    args = parser.parse_args()
    comm = CommunicationNetwork()
    train, test = d5.load_dataset("digits", normalize="standardize")
    model = create_model("mlp", input_shape=(1, 8, 8), hidden=(32,), classes=10,
                         loss="softmax_cross_entropy", seed=1)
    executor = d5ref.from_onnx(model)
    base = d5ref.MomentumOptimizer(executor, learning_rate=args.learning_rate,
                                   momentum=args.momentum)
    scheme = d5ref.SCHEMES[args.scheme](base, comm, **json.loads(args.options))
    if comm.rank == args.slow_rank:
        base.events.append(Sleep(args.sleep))
    sampler = d5.DistributedSampler(train, 16, comm, seed=3)
    events = [scheme] if args.as_event else []
    result = d5.test_training(executor, train, test, scheme, args.epochs, 16,
                              metrics=[d5.TestAccuracy()], sampler=sampler,
                              events=events, network_output="output")
    stats = result.outputs
    record = {"rank": comm.rank, "size": comm.size,
              "analytic": scheme.analytic_traffic(len(sampler)),
              "epochs": [{"test_accuracy": e.test_accuracy, "step_times": e.step_times,
                          "wall_time": e.wall_time,
                          "measured": e.optimizer_measurements} for e in stats.epochs]}
    with open(os.path.join(args.out, f"rank{comm.rank}.json"), "w") as handle:
        json.dump(record, handle, default=float)
    close = getattr(scheme, "close", None)
    if close is not None:
        close()


if __name__ == "__main__":
    with guarded_main():
        main()
