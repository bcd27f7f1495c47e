"""deep500 run --select: a subset of a recipe's configurations (issue 31, item 5)."""
import os
import textwrap

import pytest

from deep500.cli import main
from deep500.recipe.runner import load_run_recipe
from deep500.results.files import read_results
from deep500.utils.errors import RecipeError

FRAMEWORKS = textwrap.dedent("""
    name: selectframeworks
    fixed: {threads: 2, device: cpu, framework: reference}
    mutable:
      dtype: [float32, float64]
      seed: [0, 10]
      operator:
        - {op: Gemm, from: deepbench_gemm.csv, row: 0}
        - {op: Conv, from: deepbench_conv.csv, row: 36}
        - {op: Conv, from: deepbench_conv.csv, row: 14}
        - {op: Relu, shape: [8, 64, 56, 56]}
    metrics:
      WallclockTime: {reruns: 30, warmup: 3}
""")


@pytest.fixture
def frameworks_recipe(tmp_path):
    path = tmp_path / "selectframeworks.yaml"
    path.write_text(FRAMEWORKS)
    return str(path)

TINY = textwrap.dedent("""
    name: selecttiny
    fixed: {dtype: float32, threads: 1, seed: 3}
    mutable:
      framework: [reference]
      operator:
        - {op: Relu, shape: [8, 16]}
        - {op: Relu6, shape: [8, 16]}
        - {op: Softmax, shape: [4, 10], axis: 1}
    metrics:
      WallclockTime: {reruns: 4, warmup: 1}
""").replace("Relu6, shape: [8, 16]", "Sigmoid, shape: [8, 16]")


def _labels(recipe):
    return [(c["dtype"], c["operator"].op_type) for c in recipe.configurations()]


def test_select_subset(frameworks_recipe):
    whole = load_run_recipe(frameworks_recipe)
    # (frameworks other than the reference would make the recipe check import them)
    chosen = load_run_recipe(frameworks_recipe, select="dtype=float64,operator~Conv")
    assert _labels(chosen) == [("float64", "Conv")] * 4
    assert len(whole.configurations()) == 16
    # '=' matches a label by its first words, '~' a substring ignoring case
    assert sorted(_labels(load_run_recipe(frameworks_recipe, select="operator=Gemm"))) == [
        ("float32", "Gemm"), ("float32", "Gemm"), ("float64", "Gemm"), ("float64", "Gemm")]
    assert {dtype for dtype, _ in _labels(load_run_recipe(frameworks_recipe,
                                                          select="dtype~FLOAT6"))} == \
        {"float64"}
    assert {c["seed"] for c in load_run_recipe(frameworks_recipe,
                                               select="seed=10").configurations()} == {10}
    # a value of the description: the file the operator's sizes come from
    assert len(load_run_recipe(frameworks_recipe,
                               select="operator~deepbench_conv").configurations()) == 8
    assert load_run_recipe(frameworks_recipe, select="threads=2").configurations() == \
        whole.configurations()


def test_select_errors(frameworks_recipe):
    with pytest.raises(RecipeError, match=r"no setting 'frame'.*its settings are "
                                          r"device, dtype, framework, operator, seed"):
        load_run_recipe(frameworks_recipe, select="frame=pytorch")
    with pytest.raises(RecipeError, match="neither key=value nor key~text"):
        load_run_recipe(frameworks_recipe, select="pytorch")
    with pytest.raises(RecipeError, match="keeps none of the 16 configurations"):
        load_run_recipe(frameworks_recipe, select="framework=pytorch,operator=Conv")  # reference only
    with pytest.raises(RecipeError, match="give at least one"):
        load_run_recipe(frameworks_recipe, select=" , ")


def test_run_select_measures_only_the_selection(tmp_path, capsys):
    recipe = tmp_path / "selecttiny.yaml"
    recipe.write_text(TINY)
    out = tmp_path / "run"
    status = main(["run", str(recipe), "--out", str(out), "--quiet", "--db",
                   str(tmp_path / "d.db"), "--select", "operator~s"])
    assert status == 0
    records = read_results(str(out))
    assert [r["configuration"]["operator"]["op_type"] for r in records] == \
        ["Sigmoid", "Softmax"]
    assert "2 configurations measured" in capsys.readouterr().out
    assert main(["run", str(recipe), "--out", str(tmp_path / "no"), "--quiet",
                 "--select", "optimizer=sgd"]) == 2
    assert "its settings are device, dtype, framework, operator, seed, threads" in \
        capsys.readouterr().err
    assert not os.path.exists(tmp_path / "no")
