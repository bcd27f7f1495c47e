"""``d5.test_training`` with a distributed sampler and optimizer, under real ``mpirun``:
per-rank statistics (per-phase times, bytes) and the global figures at rank 0."""
import json

import pytest

from tests.lv3_distributed.mpi_helpers import mpirun

EPOCHS = 2


def train(tmp_path, ranks, scheme, **options):
    out = tmp_path / scheme
    out.mkdir()
    status, output, _ = mpirun(ranks, "train_distributed.py", out, scheme, "--epochs",
                               EPOCHS, "--options", json.dumps(options), timeout=240)
    assert status == 0, output[-4000:]
    result = json.loads((out / "result.json").read_text())
    analytic = [json.loads((out / f"analytic{r}.json").read_text()) for r in range(ranks)]
    return result, analytic


@pytest.mark.parametrize("ranks", [2, 3])
def test_decentralized_training_has_per_rank_and_global_metrics(tmp_path, ranks):
    result, analytic = train(tmp_path, ranks, "ConsistentDecentralized")
    distributed = result["details"]["distributed"]
    assert distributed["size"] == ranks and distributed["consistent"]
    assert [r["conditions"]["train_sampler"] for r in distributed["ranks"]] == \
        ["DistributedSampler"] * ranks
    steps = distributed["ranks"][0]["epochs"][0]["steps"]
    assert steps == 1437 // (16 * ranks)
    for rank, stats in enumerate(distributed["ranks"]):
        for epoch in stats["epochs"]:
            measured = epoch["optimizer_measurements"]
            assert measured["rank"] == rank and measured["size"] == ranks
            assert set(measured["phase_times"]) == {"compute", "communication", "update"}
            assert all(t > 0 for t in measured["phase_times"].values())
            # the phases are inside the step time the trainer measured
            assert sum(measured["phase_times"].values()) <= epoch["step_time"] * 1.001
            assert epoch["data_time"] > 0
            assert (measured["bytes_sent"], measured["bytes_received"]) == \
                (analytic[rank]["bytes_sent"], analytic[rank]["bytes_received"])
            assert measured["replica_divergence"] == 0.0
    figures = distributed["epochs"]
    assert len(figures) == EPOCHS
    for index, figure in enumerate(figures):
        epochs = [stats["epochs"][index] for stats in distributed["ranks"]]
        assert figure["wall_time"] == max(e["wall_time"] for e in epochs)
        assert figure["samples"] == ranks * steps * 16
        # identical replicas: every rank tests the same model
        assert figure["test_accuracy_min"] == figure["test_accuracy_max"]
        assert figure["bytes_sent"] == [a["bytes_sent"] for a in analytic]
    assert figures[-1]["test_accuracy"] > 0.8
    assert figures[-1]["train_loss"] < figures[0]["train_loss"]
    # rank 0's own metrics are there too
    names = {m["metric"] for m in result["metrics"]}
    assert {"TestAccuracy", "TrainingAccuracy"} <= names


def test_model_averaging_training_reports_replica_divergence(tmp_path):
    result, analytic = train(tmp_path, 2, "ModelAverageDecentralized", period=4)
    distributed = result["details"]["distributed"]
    assert not distributed["consistent"]
    for figure in distributed["epochs"]:
        assert len(figure["replica_divergence"]) == 2
        assert all(d >= 0 for d in figure["replica_divergence"])
    # 44 steps per epoch: the epoch ends right after an averaging only if 4 divides it
    steps = distributed["ranks"][0]["epochs"][0]["steps"]
    if steps % 4:
        assert all(d > 0 for d in distributed["epochs"][0]["replica_divergence"])
    assert distributed["epochs"][-1]["test_accuracy"] > 0.7


STOP_SCHEMES = ["ConsistentDecentralized", "InconsistentParameterServer"]
STOP_WHEN = [("step", 1), ("epoch", 0)]


@pytest.fixture(scope="module")
def stopped_runs(tmp_path_factory):
    """Every (scheme, when, rank) case of the test below, trained one after the other in
    one 2-rank job (one start-up of MPI and of the ranks instead of four)."""
    out = tmp_path_factory.mktemp("stop_one_rank")
    cases = [f"{scheme}:{when}:{rank}" for scheme in STOP_SCHEMES
             for when, rank in STOP_WHEN]
    status, output, _ = mpirun(2, "stop_one_rank.py", out, *cases, timeout=240)
    assert status == 0, output[-4000:]
    return out


@pytest.mark.parametrize("scheme", STOP_SCHEMES)
@pytest.mark.parametrize("when, rank", STOP_WHEN)
def test_a_stop_on_one_rank_stops_every_rank_at_the_epoch_end(stopped_runs, scheme, when,
                                                               rank):
    """A StopTraining on one rank alone (a per-rank time limit) used to leave the other
    ranks waiting in the next collective forever; now the ranks agree at the epoch's
    end and all stop there, with that rank's reason."""
    out = stopped_runs / f"{scheme}-{when}-{rank}"
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    epochs = 2 if when == "step" else 1   # stopped in epoch 1, or after epoch 0 (of 4)
    reason = ("time is up here" if when == "step" else "accurate enough here") + \
        f" (on rank {rank})"
    for result in results:
        assert result["epochs"] == epochs and all(result["completed"])
        assert result["stopped_reason"] == reason
    assert results[0]["steps"] == results[1]["steps"] == [1437 // 32] * epochs
