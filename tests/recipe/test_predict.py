"""``deep500 predict``: scaling curves of a recipe's training without training."""
import json
import os

import pytest
import yaml

import deep500 as d5
from deep500.cli import main
from deep500.recipe.predict import parse_ranks
from deep500.utils.errors import Deep500Error

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MACHINE = {
    "name": "synthetic",
    "network": {"alpha_s": 2e-6, "beta_s_per_byte": 1e-9},
    "reduction": {"gamma_cache_s_per_byte": 5e-10, "gamma_memory_s_per_byte": 5e-10},
    "memory": {"bandwidth_bytes_per_s": 1e10},
    "compute": {"peak_flops_per_s": {"gemm": {1: 1e10}}},
}


def _recipe(tmp_path, scheme="ConsistentDecentralized", algorithm="recursive_doubling",
            experiment="distributed"):
    recipe = {"name": "predicted", "experiment": experiment,
              "fixed": {"dataset": {"name": "digits", "normalize": "standardize"},
                        "network": {"model": "mlp", "hidden": [32]},
                        "optimizer": {"type": "sgd", "learning_rate": 0.1},
                        "batch_size": 8, "epochs": 1, "threads": 1, "seed": 0,
                        "scheme": {"scheme": scheme, "algorithm": algorithm}}}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    machine = tmp_path / "machine.yaml"
    machine.write_text(yaml.safe_dump(MACHINE))
    return str(path), str(machine)


def test_analytic_curves_follow_the_models(tmp_path, capsys):
    recipe, machine = _recipe(tmp_path)
    out = tmp_path / "curves.json"
    status = main(["predict", recipe, "--machine", machine, "--ranks", "1,2,4,8",
                   "--compute", "analytic", "--plot", str(tmp_path / "p.png"),
                   "--json", str(out), "--global-batch", "32"])
    assert status == 0
    printed = capsys.readouterr().out
    assert "weak scaling" in printed and "strong scaling (global batch 32)" in printed
    assert (tmp_path / "p.png").stat().st_size > 1000 and (tmp_path / "p.svg").exists()
    data = json.loads(out.read_text())
    (workload,) = data["workloads"]
    weak, strong = workload["weak"], workload["strong"]
    assert [row["ranks"] for row in weak] == [1, 2, 4, 8]
    assert [row["batch_per_rank"] for row in strong] == [32, 16, 8, 4]
    assert weak[0]["parallel_efficiency"] == 1.0
    # Weak scaling: compute and fusion copy fixed (the scheme packs on one rank too),
    # the recursive-doubling allreduce grows with log2 p.
    nbytes = weak[0]["gradient_bytes"]
    for row in weak[1:]:
        expected = d5.predict_allreduce("recursive_doubling", nbytes, row["ranks"], MACHINE)
        fusion = 2 * nbytes / 1e10
        assert row["exposed_communication_s"] == pytest.approx(expected + fusion, rel=1e-9)
        assert row["step_s"] == pytest.approx(weak[0]["step_s"] + expected, rel=1e-9)
    assert all(row["speedup"] == pytest.approx(strong[0]["step_s"] / row["step_s"])
               for row in strong)


def test_measured_curves_profile_the_model_here(tmp_path, capsys):
    recipe, _ = _recipe(tmp_path)
    assert main(["predict", recipe, "--machine", "infiniband-hdr", "--ranks", "1,2,1024",
                 "--plot", "none", "--global-batch", "64"]) == 0
    printed = capsys.readouterr().out
    assert "compute measured" in printed and "1024" in printed


def test_a_framework_baseline_is_predicted_with_the_mpi_allreduce(tmp_path):
    from deep500.recipe.predict import workloads
    from deep500.recipe.schema import parse_recipe
    recipe, _ = _recipe(tmp_path)
    raw = yaml.safe_load(open(recipe))
    raw["fixed"]["scheme"] = {"framework": "pytorch", "scheme": "PyTorchDistributedDataParallel"}
    try:
        parsed = parse_recipe(raw, recipe)
    except Deep500Error as error:  # without PyTorch the recipe cannot name its baseline
        pytest.skip(str(error))
    (workload,) = workloads(parsed)
    assert workload.algorithm == "mpi"


def test_bad_input_is_named(tmp_path, capsys):
    recipe, machine = _recipe(tmp_path)
    assert main(["predict", os.path.join(REPO, "recipes", "quickstart.yaml"), "--machine",
                 machine]) == 2
    assert "'distributed' or 'training' recipe" in capsys.readouterr().err
    assert main(["predict", recipe, "--machine", str(tmp_path / "missing.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(Deep500Error, match="integers >= 1"):
        parse_ranks("0,2")
    with pytest.raises(Deep500Error, match="separated by commas"):
        parse_ranks("two")
    assert main(["predict", recipe, "--machine", machine, "--algorithm", "butterfly",
                 "--compute", "analytic", "--plot", "none"]) == 2
    assert "butterfly" in capsys.readouterr().err
