"""Level-1 recipes: networks across executors, checked up front, measured, reported."""
import textwrap

import pytest

from deep500.recipe import parse_recipe, run_recipe
from deep500.results.files import read_results
from deep500.utils.errors import RecipeError

RECIPE = textwrap.dedent("""
    name: nets
    experiment: networks
    fixed: {dtype: float32, threads: 1, seed: 0, batch_size: 4}
    mutable:
      network: [{model: mlp, input_shape: [1, 8, 8]}]
      mode: [inference, backprop]
      executor: [reference, onnxruntime]
      microbatch: [null, 2]
    metrics:
      WallclockTime: {reruns: 3, warmup: 1}
      OperatorTimes: {}
      L2Error: {}
    acceptance: ["L2Error.relative <= 1e-5"]
""")


def test_networks_recipe_runs_and_reports(tmp_path):
    path = tmp_path / "nets.yaml"
    path.write_text(RECIPE)
    out = tmp_path / "out"
    summary = run_recipe(str(path), str(out), progress=False)
    records = read_results(str(out))
    kinds = [r["kind"] for r in records]
    assert kinds.count("measurement") == 6 and kinds.count("skipped") == 2
    assert summary.ok
    skipped = [r for r in records if r["kind"] == "skipped"]
    assert all(r["configuration"]["executor"] == "onnxruntime" and
               r["configuration"]["mode"] == "backprop" for r in skipped)
    report = (out / "report.md").read_text()
    assert "Level 1 — networks" in report and "where the time goes" in report
    assert "runs inference only" in report


@pytest.mark.parametrize("change, message", [
    ({"mutable": {"executor": ["reference", "caffe2"], "network": ["mlp"]}},
     "unknown executor 'caffe2'"),
    ({"mutable": {"executor": ["reference"], "network": [{"model": "googlenet"}]}},
     "unknown model 'googlenet'"),
    ({"mutable": {"executor": ["reference"], "network": [{"model": "mlp", "wings": 2}]}},
     "does not take the options ['wings']"),
    ({"mutable": {"executor": ["reference"], "network": [{"file": "missing.onnx"}]}},
     "does not exist"),
    ({"mutable": {"executor": ["reference"], "network": ["mlp"], "mode": ["training"]}},
     "'training' is not one of"),
    ({"mutable": {"executor": ["reference"], "network": ["mlp"]},
      "metrics": {"FLOPs": {}}}, "unknown metric 'FLOPs' for a"),
])
def test_bad_networks_recipes(change, message):
    raw = {"experiment": "networks", **change}
    with pytest.raises(RecipeError) as error:
        parse_recipe(raw, "bad.yaml")
    assert message in str(error.value)


def test_shipped_level1_recipes_are_valid(repo_root):
    from deep500.recipe import load_recipe
    networks = load_recipe(str(repo_root / "recipes" / "networks.yaml"))
    assert {c["executor"] for c in networks.configurations()} == {
        "reference", "pytorch", "tensorflow", "onnxruntime"}
    microbatch = load_recipe(str(repo_root / "recipes" / "microbatch.yaml"))
    assert {c["microbatch"] for c in microbatch.configurations()} == {None, 8, 2, "auto"}
    assert {c["memory_budget"] for c in microbatch.configurations()} == {64 * 2 ** 20}
