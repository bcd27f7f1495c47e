"""Threads as one condition of a configuration: resolved once (the recipe's count, else
the usable CPUs shared by the ranks), applied around the measurement and put back after
it, recorded in every record and in the manifest, varied or fixed; ``deep500 predict``
and the ``models`` experiment take the same default as ``deep500 run``."""
import os
import sys
import textwrap

import pytest
import yaml
from threadpoolctl import threadpool_info

from deep500.recipe import parse_recipe, run_recipe
from deep500.recipe.conditions import Conditions, threads_of_plan
from deep500.results.files import read_manifest, read_results
from deep500.utils.threads import resolve_threads, usable_cpu_count

VARIED = textwrap.dedent("""
    name: varied-threads
    fixed: {framework: reference}
    mutable:
      operator: [{op: Relu, shape: [8, 8]}, {op: Gemm, inputs: [[16, 8], [8, 4]]}]
      threads: [1, 2]
    metrics: {WallclockTime: {reruns: 3, warmup: 0}}
""")

UNSET = textwrap.dedent("""
    name: default-threads
    fixed: {framework: reference}
    mutable:
      operator: [{op: Relu, shape: [8, 8]}]
    metrics: {WallclockTime: {reruns: 3, warmup: 0}}
""")


def _run(tmp_path, text):
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    out = tmp_path / "out"
    run_recipe(str(path), str(out), progress=False, write_report=False)
    return read_manifest(str(out)), read_results(str(out))


def _blas_counts() -> dict:
    return {info["filepath"]: info["num_threads"] for info in threadpool_info()}


def test_varied_threads_are_in_every_record_and_listed_in_the_manifest(tmp_path):
    manifest, records = _run(tmp_path, VARIED)
    assert manifest["threads"]["requested"] is None
    assert manifest["threads"]["varied"] == [1, 2]
    assert manifest["threads"]["resolved"] == [1, 2]
    assert len(records) == 4
    for record in records:
        threads = record["configuration"]["threads"]
        assert threads in (1, 2)
        assert record["threads"]["requested"] == threads
        assert record["threads"]["resolved"] == threads
        in_force = record["threads"]["in_force"]
        assert in_force["OMP_NUM_THREADS"] == str(threads)
        assert set(in_force["blas_threads"].values()) == {threads}
    assert sorted(r["configuration"]["threads"] for r in records) == [1, 1, 2, 2]


def test_without_threads_the_default_is_resolved_and_recorded(tmp_path):
    manifest, (record,) = _run(tmp_path, UNSET)
    usable = usable_cpu_count()
    assert manifest["threads"]["requested"] is None
    assert "varied" not in manifest["threads"]
    assert manifest["threads"]["resolved"] == [usable]
    assert record["configuration"]["threads"] == usable
    assert record["threads"] == {"requested": None, "resolved": usable,
                                 "in_force": record["threads"]["in_force"]}
    assert record["threads"]["in_force"]["OMP_NUM_THREADS"] == str(usable)


def test_the_counts_in_force_before_a_configuration_are_back_after_it(tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    blas_before = _blas_counts()
    torch = sys.modules.get("torch")
    torch_before = torch.get_num_threads() if torch is not None else None
    _, records = _run(tmp_path, VARIED)
    assert {r["threads"]["in_force"]["OMP_NUM_THREADS"] for r in records} == {"1", "2"}
    assert os.environ["OMP_NUM_THREADS"] == "3"
    assert _blas_counts() == blas_before
    if torch is not None:
        assert torch.get_num_threads() == torch_before


def test_conditions_resolve_once_per_configuration(monkeypatch):
    monkeypatch.setattr("deep500.utils.threads.usable_cpu_count", lambda: 8)
    assert Conditions.of({"threads": 3}, ranks=4) == Conditions(3, 3)
    assert Conditions.of({"threads": None}, ranks=4) == Conditions(2, None)
    # a rank grid's configuration names its own ranks
    assert Conditions.of({"threads": None, "ranks": 8}, ranks=1) == Conditions(1, None)
    assert threads_of_plan([{"threads": 2}, {"threads": None}, {"threads": 2}], 1) == [2, 8]


def _training_recipe(tmp_path, **fixed):
    raw = {"name": "predict-threads", "experiment": "training",
           "fixed": {"dataset": {"name": "digits", "normalize": "standardize"},
                     "network": {"model": "mlp", "hidden": [8]},
                     "optimizer": {"type": "sgd", "learning_rate": 0.1},
                     "batch_size": 8, "epochs": 1, "seed": 0, "executor": "reference",
                     **fixed}}
    path = tmp_path / "training.yaml"
    path.write_text(yaml.safe_dump(raw))
    return parse_recipe(raw, str(path))


def test_predict_takes_the_default_of_run(tmp_path, monkeypatch):
    from deep500.recipe.predict import workloads
    monkeypatch.setattr("deep500.utils.threads.usable_cpu_count", lambda: 6)
    (unset,) = workloads(_training_recipe(tmp_path))
    assert unset.threads == 6 == resolve_threads(None, 1)
    assert unset.threads == Conditions.of({"threads": None}, ranks=1).threads
    (fixed,) = workloads(_training_recipe(tmp_path, threads=2))
    assert fixed.threads == 2
    (given,) = workloads(_training_recipe(tmp_path, threads=2), threads=3)
    assert given.threads == 3


@pytest.mark.slow
def test_the_models_experiment_takes_the_default_of_run(tmp_path):
    from tests.recipe.test_models_experiment import TINY, _run as run_models
    fixed = {k: v for k, v in TINY["fixed"].items() if k != "threads"}
    recipe = {**TINY, "fixed": fixed, "machine": "infiniband-hdr",
              "mutable": {"algorithm": ["ring"]}}
    out, records = run_models(tmp_path, recipe, 1)
    (record,) = [r for r in records if r["kind"] == "measurement"]
    usable = usable_cpu_count()
    assert record["result"]["conditions"]["threads"] == usable
    assert record["threads"]["resolved"] == usable
    assert read_manifest(str(out))["threads"]["resolved"] == [usable]
