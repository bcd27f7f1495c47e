"""``d5.PipelineParallel`` under real ``mpirun``: pipelines of 2 and 3 stages (GPipe
and 1F1B, balanced by measured node times or at given cuts) and 2 pipelines of 2
stages train the MLP to the parameters one process reaches on the same minibatches;
the bytes between stages are exactly the boundary tensors'; the measured bubble
fraction follows GPipe's formula on a balanced compute-bound pipeline."""
import json

import pytest

from tests.lv3_distributed.mpi_helpers import mpirun

STEPS, BATCH = 6, 24
EQUIVALENCE = [
    {"stages": 2, "microbatches": 4, "hidden": [32, 16]},                 # balanced
    {"stages": 3, "microbatches": 4, "hidden": [32, 16], "cuts": [2, 4]},
    {"stages": 3, "microbatches": 5, "schedule": "1f1b", "hidden": [32, 16]},
    {"stages": 2, "microbatches": 3, "schedule": "1f1b", "data_parallel": 2,
     "hidden": [32, 16], "cuts": [3]},
]
# Compute-bound and balanced: five 512-wide layers, cut after the third (64x512 is light)
BUBBLE = [{"stages": 2, "microbatches": m, "hidden": [512] * 5, "batch": 256, "steps": 6,
           "cuts": [6]} for m in (2, 8)]


def run(tmp_path, ranks, configs):
    status, output, _ = mpirun(ranks, "pipeline_train.py", tmp_path, json.dumps(configs),
                               timeout=300)
    assert status == 0, output[-4000:]
    return [json.loads((tmp_path / f"result{i}.json").read_text())
            for i in range(len(configs))]


# Driven by d5.test_training through PipelineTraining (the recipe's path)
TRAINER = [{"stages": 2, "microbatches": 4, "data_parallel": 2, "hidden": [32, 16],
            "cuts": [3], "trainer": True, "epochs": 2}]


@pytest.fixture(scope="module")
def equivalence(tmp_path_factory):
    return run(tmp_path_factory.mktemp("pipeline"), 4, EQUIVALENCE + BUBBLE + TRAINER)


@pytest.mark.parametrize("index", range(len(EQUIVALENCE)))
def test_pipeline_trains_to_the_parameters_of_one_process(equivalence, index):
    result = equivalence[index]
    config = result["config"]
    assert len(result["cuts"]) == config["stages"] - 1
    if "cuts" in config:
        assert result["cuts"] == config["cuts"]
    # float32 sums over microbatches in another order than over the whole minibatch
    assert result["max_difference"] <= 1e-6 * max(1.0, result["max_parameter"])
    # the last stage of the first pipeline returns the minibatch's loss
    if config.get("data_parallel", 1) == 1:
        assert result["losses"] == pytest.approx(result["reference_losses"], rel=1e-5)
    assert all(loss is None for ranks in result["traffic"][:config["stages"] - 1]
               for loss in ranks["losses"])


@pytest.mark.parametrize("index", range(len(EQUIVALENCE)))
def test_stages_exchange_exactly_the_boundary_tensors(equivalence, index):
    result = equivalence[index]
    config = result["config"]
    stages, dp = config["stages"], config.get("data_parallel", 1)
    # every sample of every step crosses each cut forward, its gradient backward
    per_cut = [STEPS * BATCH * n for n in result["bytes_per_sample"]]
    for ranks in result["traffic"]:
        s = ranks["stage"]
        sent = (per_cut[s] if s < stages - 1 else 0) + (per_cut[s - 1] if s > 0 else 0)
        assert ranks["pipeline"]["bytes_sent"] == sent
        assert ranks["pipeline"]["bytes_received"] == sent
        assert ranks["pipeline"]["counted"] == "exact"
        expected_in_flight = (config["microbatches"] if config.get("schedule") != "1f1b"
                              else min(stages - s, config["microbatches"]))
        assert ranks["in_flight"] == expected_in_flight
        if dp > 1:
            # the ring allreduce of two replicas sends each its gradient's size per step
            assert ranks["data_parallel"]["bytes_sent"] == STEPS * ranks["parameter_bytes"]
        else:
            assert ranks["data_parallel"] is None
    assert len(result["traffic"]) == stages * dp


@pytest.mark.parametrize("index", range(len(EQUIVALENCE), len(EQUIVALENCE) + len(BUBBLE)))
def test_the_measured_bubble_follows_the_model(equivalence, index):
    """Measured: 1 - busy / (S x makespan), the median over 5 steps. Modelled: the
    schedule's timeline of the measured per-stage times (which may differ on a shared
    machine); with equal stages that is GPipe's (S - 1) / (M + S - 1), checked
    exactly in test_pipeline_parts. Overheads outside the executors (messages, copies)
    and imbalance only add idle time."""
    result = equivalence[index]
    bubble, m = result["bubble"], result["config"]["microbatches"]
    assert bubble["gpipe_formula"] == pytest.approx(1 / (m + 1))
    assert bubble["measured"] == pytest.approx(bubble["modelled"], abs=0.15)
    assert bubble["measured"] >= bubble["gpipe_formula"] - 0.05
    assert result["max_difference"] <= 1e-6


def test_the_trainer_drives_a_hybrid_pipeline_with_every_figure_of_a_scheme(equivalence):
    result = equivalence[len(EQUIVALENCE) + len(BUBBLE)]
    summary = result["summary"]
    assert summary["size"] == 4 and summary["consistent"]
    assert summary["scheme"].startswith("PipelineParallel(stages=2, microbatches=4")
    # 1437 samples, two pipelines of 24 per step
    assert result["steps"] == 1437 // 48
    final = summary["epochs"][-1]
    # every rank tests the whole model, its parameters gathered from the stages
    assert final["test_accuracy_min"] == final["test_accuracy_max"]
    assert final["test_accuracy"] == pytest.approx(result["whole_model_accuracy"])
    assert final["test_accuracy"] > 0.5          # chance: 0.1
    assert final["train_loss"] < summary["epochs"][0]["train_loss"]
    for rank, stats in enumerate(summary["ranks"]):
        for epoch in stats["epochs"]:
            measured = epoch["optimizer_measurements"]
            assert measured["counted"] == "exact"
            assert measured["bytes_sent"] == result["analytic"][rank]["bytes_sent"]
            assert measured["bytes_received"] == result["analytic"][rank]["bytes_received"]
            assert set(measured["phase_times"]) == {"compute", "communication", "update"}
            assert measured["pipeline"]["stage"] == rank % 2
            bubble = measured["pipeline"]["bubble"]
            assert bubble["gpipe_formula"] == pytest.approx(1 / 5)
            assert 0 <= bubble["measured"] < 1 and 0 <= bubble["modelled"] < 1
