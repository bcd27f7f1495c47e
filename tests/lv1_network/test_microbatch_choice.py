"""Micro-batch sizes per convolution under a memory budget (µ-cuDNN's policies): the
exact choice on hand-made tables, budgets nothing meets, per-node sizes in the graph."""
import itertools

import numpy as np
import pytest

from deep500.lv1_network.transformations import microbatch_convolutions
from deep500.lv1_network.transformations.microbatch_choice import (MicrobatchOption,
                                                                   choose_microbatches)
from deep500.lv1_network.transformations.microbatch_profile import candidate_sizes
from deep500.networks import create_model
from deep500.utils.byte_sizes import parse_bytes
from deep500.utils.errors import Deep500Error


def _table(rows: dict) -> dict:
    return {name: [MicrobatchOption(size, seconds, workspace)
                   for size, seconds, workspace in options]
            for name, options in rows.items()}


# Bigger micro-batches are faster and hungrier; 'b' gains most from its workspace.
TABLE = _table({
    "a": [(8, 1.0, 40), (4, 1.5, 20), (1, 4.0, 5)],
    "b": [(8, 2.0, 60), (4, 5.0, 30), (1, 9.0, 10)],
    "c": [(8, 1.0, 50), (4, 1.2, 25), (1, 3.0, 6)],
})


def _brute_force(table, budget, combine=sum):
    best = None
    for combo in itertools.product(*table.values()):
        if combine(o.workspace_bytes for o in combo) <= budget:
            seconds = sum(o.seconds for o in combo)
            best = seconds if best is None else min(best, seconds)
    return best


@pytest.mark.parametrize("budget, sizes", [
    (150, {"a": 8, "b": 8, "c": 8}),    # everything fits
    (110, {"a": 4, "b": 8, "c": 4}),    # 20 + 60 + 25 = 105, time 4.7
    (76, {"a": 4, "b": 4, "c": 4}),     # 20 + 30 + 25 = 75, time 7.7
    (71, {"a": 1, "b": 8, "c": 1}),     # 5 + 60 + 6 = 71, time 9.0; (4, 4, 1): 9.5
    (21, {"a": 1, "b": 1, "c": 1}),
])
def test_division_picks_the_optimum(budget, sizes):
    choice = choose_microbatches(TABLE, budget, "division")
    assert choice.sizes == sizes
    assert choice.workspace_bytes <= budget
    assert choice.seconds == pytest.approx(_brute_force(TABLE, budget))


def test_division_matches_brute_force_on_random_tables():
    rng = np.random.default_rng(0)
    for _ in range(30):
        table = _table({f"conv{k}": [(s, float(rng.uniform(1, 10)),
                                      int(rng.integers(0, 1000))) for s in (8, 4, 2, 1)]
                        for k in range(int(rng.integers(1, 5)))})
        budget = int(rng.integers(500, 3000))
        best = _brute_force(table, budget)
        if best is None:
            with pytest.raises(Deep500Error):
                choose_microbatches(table, budget)
            continue
        choice = choose_microbatches(table, budget)
        assert choice.workspace_bytes <= budget
        assert choice.seconds == pytest.approx(best)


def test_reuse_bounds_each_convolution():
    choice = choose_microbatches(TABLE, 40, "reuse")
    assert choice.sizes == {"a": 8, "b": 4, "c": 4}
    assert choice.workspace_bytes == 40   # the largest of 40, 30, 25
    assert choice.seconds == pytest.approx(_brute_force(TABLE, 40, max))


def test_infeasible_budgets_raise_with_the_least_budget():
    with pytest.raises(Deep500Error, match="raise memory_budget to at least 21 bytes"):
        choose_microbatches(TABLE, 20, "division")
    with pytest.raises(Deep500Error, match="'b' needs 10 B even at micro-batch 1"):
        choose_microbatches(TABLE, 9, "reuse")
    with pytest.raises(Deep500Error, match="memory policy"):
        choose_microbatches(TABLE, 100, "greedy")


def test_per_convolution_sizes_rewrite_only_those_named():
    model = create_model("lenet", batch_size=8)
    transformed = microbatch_convolutions(model, {"conv2": 2})
    convs = [n.name for n in transformed.graph.node if n.op_type == "Conv"]
    assert convs == ["conv1"] + [f"conv2_microbatch{i}" for i in range(4)]
    with pytest.raises(Deep500Error, match=r"no Conv nodes named \['conv9'\]"):
        microbatch_convolutions(model, {"conv9": 2})


def test_candidates_and_sizes():
    assert candidate_sizes(32) == [32, 16, 8, 4, 2, 1]
    assert candidate_sizes(12) == [12, 8, 4, 2, 1]
    assert parse_bytes("64MiB") == 64 * 2 ** 20
    assert parse_bytes("1.5 GB") == 1_500_000_000
    assert parse_bytes(4096) == 4096
    for bad in ("64 MiBs", "-1", 0, [64]):
        with pytest.raises(Deep500Error, match="memory_budget"):
            parse_bytes(bad, "memory_budget")
