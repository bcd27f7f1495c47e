"""TensorFlow's MultiWorkerMirroredStrategy as a Deep500 distributed optimizer.

Under ``mpirun -np 2`` (one launch, ``scripts/tf_mwms_train.py``): the ranks hold
identical parameters after every step; 2 ranks of local batch b take the steps of one
process with batch 2b (Theorem 1 of synchronous SGD); the epoch's measurements say the
bytes are not observable and the model is the ring's; ``d5.test_training`` drives it to
the digits target. Without MPI: the errors a user can meet.
"""
import json

import numpy as np
import pytest

import deep500 as d5
from deep500.lv3_distributed.volume import ring_allreduce_traffic
from deep500.networks import create_model
from deep500.utils.errors import Deep500Error
from tests.lv3_distributed.mpi_helpers import mpirun

pytest.importorskip("tensorflow")
STEPS, BATCH, RANKS, EPOCHS = 5, 8, 2, 3
DIGITS_TARGET = 0.9     # recipes/distributed.yaml's acceptance


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("mwms")
    status, output, _ = mpirun(RANKS, "tf_mwms_train.py", out, "--steps", STEPS,
                               "--batch", BATCH, "--epochs", EPOCHS, timeout=300)
    assert status == 0, output[-3000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(RANKS)]
    final = [dict(np.load(out / f"rank{r}-steps.npz")) for r in range(RANKS)]
    initial = dict(np.load(out / "rank0-initial.npz"))
    return ranks, final, initial


@pytest.mark.mpi
@pytest.mark.slow
def test_ranks_hold_identical_parameters_after_every_step(run):
    ranks, final, _ = run
    steps = [rank["steps"]["steps"] for rank in ranks]
    assert len(steps[0]) == STEPS
    assert [s["params"] for s in steps[0]] == [s["params"] for s in steps[1]]
    for name, value in final[0].items():
        np.testing.assert_array_equal(value, final[1][name])
    assert ranks[0]["steps"]["measured"]["replica_divergence"] == 0.0


@pytest.mark.mpi
@pytest.mark.slow
def test_two_workers_equal_one_process_with_the_global_batch(run):
    """Theorem 1: the mean of the workers' mean gradients is the global batch's."""
    from deep500.frameworks import tensorflow as d5tf
    _, final, initial = run
    train, _ = d5.load_dataset("digits")
    executor = d5tf.from_onnx(create_model("mlp", input_shape=(1, 8, 8), hidden=(16,),
                                           classes=10, loss="softmax_cross_entropy",
                                           seed=3))
    for name, value in initial.items():
        np.testing.assert_array_equal(executor.network.fetch_tensor(name), value)
    optimizer = d5tf.GradientDescent(executor, learning_rate=0.1)
    optimizer.train(d5.ShuffleSampler(train, RANKS * BATCH, seed=7), STEPS)
    for name, value in final[0].items():
        np.testing.assert_allclose(value, executor.network.fetch_tensor(name),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("rank", range(RANKS))
def test_bytes_are_not_observable_and_the_model_is_the_ring(run, rank):
    steps = run[0][rank]["steps"]
    measured = steps["measured"]
    assert measured["counted"].startswith("not observable")
    assert measured["bytes_sent"] == 0 and steps["volume"] == {}
    assert set(measured["phase_times"]) == {"forward_backward", "allreduce_update"}
    assert all(t > 0 for t in measured["phase_times"].values())
    gradient_bytes = measured["gradient_bytes"]
    assert gradient_bytes == 4 * (64 * 16 + 16 + 16 * 10 + 10)
    ring = ring_allreduce_traffic(gradient_bytes // 4, 4, RANKS, rank)
    assert steps["analytic"]["bytes_sent"] == STEPS * ring.bytes_sent
    assert steps["hyperparameters"]["implementation"] == "ring"
    assert steps["hyperparameters"]["workers"] == RANKS


@pytest.mark.mpi
@pytest.mark.slow
def test_test_training_reaches_the_digits_target(run):
    ranks, _, _ = run
    training = ranks[0]["training"]
    assert training["test_accuracy"][-1] >= DIGITS_TARGET, training["test_accuracy"]
    assert ranks[1]["training"]["test_accuracy"] == training["test_accuracy"]
    summary = training["distributed"]
    assert summary["size"] == RANKS and summary["consistent"] is True
    assert len(summary["epochs"]) == EPOCHS
    assert ranks[1]["training"]["distributed"] is None


# -- without MPI ------------------------------------------------------------------------
def test_a_strategy_after_tensorflow_ran_is_a_clear_error():
    from deep500.frameworks import tensorflow as d5tf
    from deep500.frameworks.tensorflow import distributed
    d5tf.from_onnx(create_model("mlp", input_shape=(1, 8, 8), hidden=(4,), classes=10,
                                loss="softmax_cross_entropy", seed=0))  # TensorFlow runs
    if distributed._started is not None:
        pytest.skip("a strategy already runs in this process")
    with pytest.raises(Deep500Error, match="can no longer configure its collective ops"):
        distributed.start_multi_worker_strategy(None)


def test_unknown_implementation_and_foreign_optimizer_are_refused():
    from deep500.frameworks import reference as d5ref
    from deep500.frameworks.tensorflow.distributed import (TensorFlowMultiWorkerMirrored,
                                                           start_multi_worker_strategy)
    with pytest.raises(Deep500Error, match="unknown implementation 'nccl'"):
        start_multi_worker_strategy(None, implementation="nccl")
    with pytest.raises(Deep500Error, match="not a CPU collective"):
        TensorFlowMultiWorkerMirrored.check_options(implementation="nccl")
    executor = d5ref.from_onnx(create_model("mlp", input_shape=(1, 8, 8), hidden=(4,),
                                            classes=10, loss="softmax_cross_entropy"))
    with pytest.raises(Deep500Error, match="wraps a d5tf optimizer"):
        TensorFlowMultiWorkerMirrored(d5ref.GradientDescent(executor), None)
