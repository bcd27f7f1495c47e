"""Labels and legends name what differs between configurations (issue 31, item 7):
``deep500 predict recipes/training.yaml`` drew 4 sections under one label (no
optimizer), and DDP was "pytorch PyTorchDistributedDataParallel | reference"."""
import pytest

from deep500.recipe import parse_recipe
from deep500.recipe.experiments.distributed import SchemeSpec
from deep500.recipe.measurement import configuration_label
from deep500.recipe.predict import workloads

TRAINING = {"experiment": "training",
            "fixed": {"dataset": {"name": "digits"}, "network": {"model": "mlp",
                                                                 "hidden": [8]},
                      "batch_size": 32, "epochs": 1, "threads": 2},
            "mutable": {"optimizer": [
                {"type": "momentum", "learning_rate": 0.05, "momentum": 0.9},
                {"type": "momentum", "learning_rate": 0.05, "momentum": 0.9,
                 "implementation": "reference"},
                {"type": "adam", "learning_rate": 0.003},
                {"type": "adam", "learning_rate": 0.003, "implementation": "reference"}],
                "executor": ["reference"]}}


def test_predict_has_one_section_per_optimizer_each_named_by_it():
    labels = [w.label for w in workloads(parse_recipe(TRAINING, "training.yaml"))]
    # predict profiles the reference optimizer on the reference executor: a native and
    # a reference implementation of one optimizer are one workload
    assert labels == [
        "mlp (hidden=[8]), momentum (learning_rate=0.05, momentum=0.9), batch 32/rank, "
        "2 thread(s), ring allreduce",
        "mlp (hidden=[8]), adam (learning_rate=0.003), batch 32/rank, 2 thread(s), "
        "ring allreduce"]


@pytest.mark.parametrize("scheme, label", [
    ({"scheme": "ConsistentDecentralized"}, "ConsistentDecentralized"),
    ({"scheme": "ModelAverageDecentralized", "period": 4},
     "ModelAverageDecentralized(period=4)"),
    ({"framework": "pytorch", "scheme": "PyTorchDistributedDataParallel"}, "PyTorch DDP"),
    ({"framework": "pytorch", "scheme": "DistributedDataParallel"}, "PyTorch DDP"),
    ({"framework": "pytorch", "scheme": "DistributedDataParallel", "bucket_cap_mb": 1},
     "PyTorch DDP(bucket_cap_mb=1)"),
    ({"framework": "tensorflow", "scheme": "MultiWorkerMirroredStrategy"},
     "TensorFlow MultiWorkerMirroredStrategy")])
def test_schemes_are_named_as_their_frameworks_name_them(scheme, label):
    assert SchemeSpec(scheme).label == label


def test_a_baselines_progress_label_names_the_executor_it_trains_on():
    pytest.importorskip("torch")
    recipe = parse_recipe({
        "experiment": "distributed",
        "fixed": {"network": {"model": "mlp", "hidden": [8]},
                  "optimizer": {"type": "sgd", "learning_rate": 0.1}},
        "mutable": {"scheme": ["ConsistentDecentralized", {
            "framework": "pytorch", "scheme": "PyTorchDistributedDataParallel"}]}},
        "distributed.yaml")
    labels = [configuration_label(recipe, c) for c in recipe.configurations()]
    assert labels == ["ConsistentDecentralized | reference", "PyTorch DDP | pytorch"]
