"""Run by tests/lv3_distributed/test_distributed_training.py under ``mpirun -np N``: a
StopTraining raised by an event on one rank only, either mid-epoch (``step``, after step
3 of epoch 1) or at an epoch's end (``epoch``, after epoch 0). Without agreement the
other ranks would wait in the next collective forever; with it every rank finishes the
epoch and stops. Each case (``SCHEME:WHEN:RANK``, several in one job, one after the
other, each with its own model and scheme) has its folder ``<out>/SCHEME-WHEN-RANK``,
where each rank writes ``rank<R>.json`` with its epochs, steps and stopped reason."""
import argparse
import json
import os

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.lv3_distributed import CommunicationNetwork, guarded_main
from deep500.networks import create_model


class StopOnOneRank(d5.TrainingEvent):
    def __init__(self, rank: int, when: str):
        self.rank, self.when = rank, when

    def after_training_step(self, trainer, step, inputs, outputs):
        if self.when == "step" and trainer.epoch == 1 and \
                len(trainer.epoch_stats.step_losses) == 3 and self._mine(trainer):
            raise d5.StopTraining("time is up here")

    def after_epoch(self, trainer, epoch, stats):
        if self.when == "epoch" and epoch == 0 and self._mine(trainer):
            raise d5.StopTraining("accurate enough here")

    def _mine(self, trainer):
        return trainer.optimizer.rank == self.rank


def train_until_one_rank_stops(out, comm, scheme_name, when, rank):
    train, test = d5.load_dataset("digits")
    model = create_model("mlp", input_shape=(1, 8, 8), hidden=(16,), classes=10,
                         loss="softmax_cross_entropy", seed=1)
    executor = d5ref.from_onnx(model)
    scheme = d5ref.SCHEMES[scheme_name](d5ref.GradientDescent(executor, learning_rate=0.1),
                                        comm)
    trainer = d5.Trainer(d5.DistributedSampler(train, 16, comm, seed=3),
                         d5.OrderedSampler(test, 64), executor, scheme, "output")
    stats = trainer.run_loop(4, events=[StopOnOneRank(rank, when)])
    with open(os.path.join(out, f"rank{comm.rank}.json"), "w") as handle:
        json.dump({"epochs": len(stats.epochs),
                   "completed": [e.completed for e in stats.epochs],
                   "steps": [e.steps for e in stats.epochs],
                   "stopped_reason": stats.stopped_reason}, handle)
    scheme.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("cases", nargs="+", help="SCHEME:WHEN:RANK, WHEN step or epoch")
    args = parser.parse_args()
    comm = CommunicationNetwork()
    for case in args.cases:
        scheme_name, when, rank = case.split(":")
        assert when in ("step", "epoch"), case
        out = os.path.join(args.out, f"{scheme_name}-{when}-{rank}")
        os.makedirs(out, exist_ok=True)
        train_until_one_rank_stops(out, comm, scheme_name, when, int(rank))


if __name__ == "__main__":
    with guarded_main():
        main()
