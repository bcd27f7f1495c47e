"""``microbatch: auto`` with ``memory_budget`` in a network recipe: sizes chosen per
convolution from measurements, within the budget, and reported against fixed sizes."""
import itertools
import textwrap

import pytest

from deep500.recipe import parse_recipe, run_recipe
from deep500.results.files import read_results
from deep500.utils.errors import RecipeError

RECIPE = textwrap.dedent("""
    name: auto
    experiment: networks
    fixed: {network: {model: lenet}, batch_size: 4, dtype: float32, threads: 1,
            seed: 0, mode: inference, executor: pytorch, memory_budget: BUDGET}
    mutable:
      microbatch: [null, auto]
    metrics:
      WallclockTime: {reruns: 2, warmup: 1}
      PeakMemory: {method: auto}
""")


def test_auto_microbatch_meets_its_budget(tmp_path):
    pytest.importorskip("torch")
    # LeNet's convolutions at batch 4 allocate 221 KiB beyond their outputs at the
    # whole batch, 99 KiB at micro-batch 1 (PyTorch's allocator; sizes, not times)
    budget = 150 * 1024
    path = tmp_path / "auto.yaml"
    path.write_text(RECIPE.replace("BUDGET", "150KiB"))
    run_recipe(str(path), str(tmp_path / "out"), progress=False)
    records = {r["configuration"]["microbatch"]: r for r in
               read_results(str(tmp_path / "out")) if r["kind"] == "measurement"}
    choice = records["auto"]["result"]["details"]["microbatch"]
    assert choice["budget_bytes"] == budget and choice["policy"] == "division"
    assert choice["workspace_bytes"] <= budget
    whole = next(f for f in choice["fixed"] if f["size"] == 4)
    assert not whole["fits"] and min(choice["sizes"].values()) < 4
    # the choice is the fastest combination of the measured table within the budget
    table = choice["profile"]
    best = min((sum(o[1] for o in combo), combo)
               for combo in itertools.product(*table.values())
               if sum(o[2] for o in combo) <= budget)
    assert choice["seconds"] == pytest.approx(best[0])
    for record in records.values():
        peak = next(m for m in record["result"]["metrics"] if m["metric"] == "PeakMemory")
        assert peak["summary"]["measured_by"].startswith("torch.profiler")
    report = (tmp_path / "out" / "report.md").read_text()
    assert "micro-batch sizes chosen for a memory budget" in report
    assert "4 (every convolution)" in report and "auto ≤ 150 KiB, division" in report


@pytest.mark.parametrize("change, message", [
    ({"memory_budget": None}, "give one, e.g. memory_budget: 64MiB"),
    ({"memory_budget": "64 parsecs"}, "expected a number of bytes"),
    ({"microbatch": "half"}, "null or 'auto'"),
    ({"memory_policy": "greedy"}, "'greedy' is not one of"),
])
def test_bad_budgets_are_refused_up_front(change, message):
    fixed = {"network": "mlp", "executor": "reference", "microbatch": "auto",
             "memory_budget": "1MiB", **change}
    fixed = {k: v for k, v in fixed.items() if v is not None}
    with pytest.raises(RecipeError, match=message.replace("(", r"\(")):
        parse_recipe({"experiment": "networks", "fixed": fixed})
