"""``experiment: parallelism``: pipelines among the distributed schemes, checked when
the recipe is read; a pipeline whose stages x data_parallel differ from the ranks is
skipped with the reason. (Training through it runs in
tests/lv3_distributed/test_pipeline.py; the shipped recipe with deep500 run.)"""
import pytest

from deep500.recipe import parse_recipe
from deep500.utils.errors import RecipeError

BASE = {"experiment": "parallelism",
        "fixed": {"network": {"model": "mlp", "hidden": [16]},
                  "optimizer": {"type": "sgd", "learning_rate": 0.1}},
        "metrics": {"TestAccuracy": {}}}


def recipe(*schemes, **fixed):
    return parse_recipe({**BASE, "fixed": {**BASE["fixed"], **fixed},
                         "mutable": {"scheme": list(schemes)}}, "parallelism.yaml")


def test_data_parallel_and_pipelines_are_one_recipe():
    parsed = recipe("ConsistentDecentralized",
                    {"scheme": "PipelineParallel", "stages": 2, "microbatches": 4,
                     "schedule": "1f1b"})
    labels = [c["scheme"].label for c in parsed.configurations()]
    assert labels == ["ConsistentDecentralized",
                      "PipelineParallel(stages=2, microbatches=4, schedule=1f1b)"]
    assert parsed.kind.level == 3


@pytest.mark.parametrize("scheme, message", [
    ({"scheme": "PipelineParallel", "stage": 2},
     "PipelineParallel takes no options ['stage']; it takes ['cuts', 'data_parallel', "
     "'microbatches', 'schedule', 'stages']"),
    ({"scheme": "PipelineParallel", "stages": 0}, "stages: a whole number >= 1"),
    ({"scheme": "PipelineParallel", "schedule": "zero-bubble"},
     "schedule: one of ['1f1b', 'gpipe']"),
    ({"scheme": "PipelineParallel", "stages": 3, "cuts": [2]},
     "cuts: a list of stages - 1 node indices"),
    ({"scheme": "PipelineParallel", "framework": "pytorch"},
     "PipelineParallel runs on Deep500's reference executor"),
])
def test_a_pipeline_that_cannot_run_is_refused_when_the_recipe_is_read(scheme, message):
    with pytest.raises(RecipeError, match=message.replace("[", r"\[").replace("(", r"\(")):
        recipe(scheme)


def test_a_pipeline_on_other_ranks_than_it_needs_is_skipped_with_the_reason():
    parsed = recipe({"scheme": "PipelineParallel", "stages": 2, "data_parallel": 2},
                    "ConsistentDecentralized", ranks=2)
    reasons = [parsed.kind.applicable(c) for c in parsed.configurations()]
    assert reasons == ["PipelineParallel(stages=2, data_parallel=2) runs on stages x "
                       "data_parallel = 4 ranks, not 2", None]
