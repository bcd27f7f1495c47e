"""Run by tests/lv3_distributed/test_pipeline.py under ``mpirun -np N``: for each
configuration of ``--configs`` (a JSON list of ``{"stages", "microbatches",
"schedule", "data_parallel", "cuts", "hidden", "batch", "steps"}``, in turn, each on the
first ``stages · data_parallel`` world ranks), ``d5.PipelineParallel`` trains the zoo's
MLP on the digits; world rank 0 then trains the whole model in one process on the same
global minibatches (the reference) and writes ``<out>/result<i>.json``: the largest
parameter difference from the reference, the losses of both, the cuts, the bubble
figures and every rank's traffic."""
import argparse
import json
import os
import time

import numpy as np
from mpi4py import MPI

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.lv3_distributed import guarded_main
from deep500.networks import create_model


def optimizer(executor):
    return d5ref.MomentumOptimizer(executor, learning_rate=0.05, momentum=0.9)


def run(config: dict, train, out: str) -> None:
    stages, dp = config["stages"], config.get("data_parallel", 1)
    batch, steps = config.get("batch", 24), config.get("steps", 6)
    world = MPI.COMM_WORLD
    inside = world.Get_rank() < stages * dp
    comm = world.Split(0 if inside else MPI.UNDEFINED, world.Get_rank())
    if not inside:
        return
    model = create_model("mlp", input_shape=(1, 8, 8), hidden=tuple(config["hidden"]),
                         classes=10, loss="softmax_cross_entropy", seed=1)
    order = np.random.default_rng(3).permutation(len(train))
    total = batch * dp
    batches = [train[order[k * total:(k + 1) * total]] for k in range(steps)]
    pipeline = d5.PipelineParallel(model, stages, config["microbatches"],
                                   config.get("schedule", "gpipe"),
                                   executor=d5ref.from_onnx, optimizer=optimizer,
                                   cuts=config.get("cuts"), profile_inputs=batches[0],
                                   data_parallel=dp, comm=comm)
    if config.get("trainer"):
        return trained_by_trainer(pipeline, model, train, batch, out, config)
    shard = slice(pipeline.group * batch, (pipeline.group + 1) * batch)
    losses = pipeline.train([{k: v[shard] for k, v in b.items()} for b in batches])
    bubble = pipeline.bubble(skip=1)
    parameters = pipeline.gather_parameters()
    traffic = comm.gather({"stage": pipeline.stage_index, "group": pipeline.group,
                           **pipeline.traffic(), "in_flight": pipeline.max_in_flight,
                           "receives": [t.name for t in pipeline.stage.receives],
                           "sends": [t.name for t in pipeline.stage.sends],
                           "losses": [None if loss is None else float(loss)
                                      for loss in losses],
                           "parameter_bytes": sum(v.nbytes for v in
                                                  pipeline.parameters().values())}, root=0)
    if comm.Get_rank() != 0:
        return
    executor = d5ref.from_onnx(model)
    reference = optimizer(executor)
    reference_losses = [float(reference.step(b)["loss"]) for b in batches]
    expected = {n: executor.network.fetch_tensor(n) for n in executor.network.get_params()}
    assert sorted(parameters) == sorted(expected), (sorted(parameters), sorted(expected))
    difference = max(float(np.max(np.abs(parameters[n] - expected[n]))) for n in expected)
    result = {"config": config, "max_difference": difference,
              "max_parameter": max(float(np.max(np.abs(v))) for v in expected.values()),
              "cuts": pipeline.cuts, "bubble": bubble, "traffic": traffic,
              "reference_losses": reference_losses,
              "losses": traffic[stages - 1]["losses"],
              "bytes_per_sample": pipeline.boundary_bytes(config["microbatches"])}
    with open(os.path.join(out, f"result{config['index']}.json"), "w") as handle:
        json.dump(result, handle)


def trained_by_trainer(pipeline, model, train, batch, out, config) -> None:
    """``d5.test_training`` of the pipeline through ``PipelineTraining``: rank 0 writes
    the summary of every rank, each rank's analytic traffic and the test accuracy of
    the whole model (its parameters gathered from the stages) against one process's
    inference with the same parameters."""
    from deep500.lv3_distributed.pipeline.pipeline_training import PipelineTraining
    training = PipelineTraining(pipeline, d5ref.from_onnx(model))
    sampler = d5.DistributedSampler(train, batch, pipeline.replicas, seed=5)
    _, test = d5.load_dataset("digits")
    result = d5.test_training(training.executor, train, test, training,
                              epochs=config["epochs"], batch_size=batch,
                              metrics=[d5.TestAccuracy()], sampler=sampler)
    summary = training.distributed_summary(result.outputs)
    steps = result.outputs.epochs[0].steps
    analytic = training.comm.comm.gather(training.analytic_traffic(steps), root=0)
    parameters = pipeline.gather_parameters()
    training.close()
    if pipeline.world.Get_rank() != 0:
        return
    executor = d5ref.from_onnx(model)
    for name, value in parameters.items():
        executor.network.feed_tensor(name, value, is_param=True)
    logits = executor.inference(test[np.arange(len(test))])["output"]
    accuracy = float(np.mean(np.argmax(logits, 1) == test[np.arange(len(test))]["labels"]))
    measured = [m["metric"] for m in result.to_dict()["metrics"]]
    with open(os.path.join(out, f"result{config['index']}.json"), "w") as handle:
        json.dump({"config": config, "summary": summary, "analytic": analytic,
                   "steps": steps, "whole_model_accuracy": accuracy,
                   "metrics": measured}, handle, default=str)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("configs")
    args = parser.parse_args()
    train, _ = d5.load_dataset("digits")
    for index, config in enumerate(json.loads(args.configs)):
        run({**config, "index": index}, train, args.out)
        wait_for_every_rank()


def wait_for_every_rank() -> None:
    """A barrier that sleeps while it waits: ranks left out of a smaller pipeline must
    not spin in MPI on the cores the pipeline's ranks measure on."""
    request = MPI.COMM_WORLD.Ibarrier()
    while not request.Test():
        time.sleep(0.01)


if __name__ == "__main__":
    with guarded_main():
        main()
