"""Measured scaling beside predicted (issue 28, item 5): weak and strong scaling
(``scaling``, ``global_batch``) checked when the recipe is read; with ``cluster:`` and
several rank counts every part runs in an emulated cluster of as many nodes as ranks,
removed afterwards; with a machine file the grid predicts every step; the report has
the measured-and-predicted tables and plot, oversubscribed points marked.

The cluster test needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and is skipped without it;
it compares ``ip netns list`` before and after, as
tests/lv3_distributed/test_cluster_emulation.py does."""
import json
import os
import sys

import pytest

from deep500.lv3_distributed.cluster import parse_cluster
from deep500.recipe import parse_recipe
from deep500.recipe.batch_scaling import batch_per_rank, learning_rate_factor
from deep500.recipe.grid_predictions import modelled_algorithm
from deep500.recipe.experiments.distributed import reference_schemes
from deep500.recipe.part_cluster import grid_description, spec_for
from deep500.results.files import read_manifest, read_results
from deep500.utils.errors import RecipeError
from tests.lv3_distributed.mpi_helpers import run_program
from tests.lv3_distributed.test_cluster_emulation import (_can_build_namespaces,
                                                          _owner_runs, namespaces)
from tests.recipe.recipe_changes import changed

SCALING = {"name": "tiny_scaling", "experiment": "distributed",
           "cluster": {"nodes": 2, "rate": "1gbit"}, "machine": "infiniband-hdr",
           "fixed": {"network": {"model": "mlp", "hidden": [16]},
                     "optimizer": {"type": "sgd", "learning_rate": 0.1},
                     "scheme": "ConsistentDecentralized", "batch_size": 16,
                     "global_batch": 32, "epochs": 1, "lr_scaling": "linear", "seed": 0,
                     "threads": 1},
           "mutable": {"ranks": [1, 2], "scaling": ["weak", "strong"]},
           "metrics": {"TestAccuracy": {}, "TimeToAccuracy": {"target": 0.5}}}


def recipe(**changes):
    return changed(SCALING, changes)


def test_strong_scaling_splits_the_global_batch_and_scales_the_rate_by_it():
    parsed = parse_recipe(recipe(), "scaling.yaml")
    points = [(c["ranks"], c["scaling"], batch_per_rank(c, c["ranks"]),
               learning_rate_factor(c, c["ranks"])) for c in parsed.configurations()]
    assert points == [(1, "weak", 16, 1.0), (1, "strong", 32, 2.0),
                      (2, "weak", 16, 2.0), (2, "strong", 16, 2.0)]


@pytest.mark.parametrize("changes, message", [
    ({"fixed": {"global_batch": None}},
     r"mutable\.scaling\[1\]: scaling: strong holds the global batch fixed: give "
     r"global_batch"),
    ({"fixed": {"global_batch": 33}},
     r"fixed\.global_batch: 33 samples do not split evenly over \[2\] rank\(s\) "
     r"\(mutable\.ranks\)"),
    ({"mutable": {"scaling": ["weak"]}},
     r"fixed\.global_batch: global_batch is the fixed global batch of scaling: strong"),
    ({"mutable": {"scaling": ["sideways"]}},
     r"mutable\.scaling\[0\]: the string 'sideways' is not a scaling; give weak"),
])
def test_bad_scaling_names_the_key(changes, message):
    with pytest.raises(RecipeError, match=message):
        parse_recipe(recipe(**changes), "bad.yaml")


def test_each_part_gets_a_cluster_of_its_own_size():
    spec = parse_cluster("nodes=4,rate=1gbit,ppn=2")
    assert [(spec_for(spec, r).nodes, spec_for(spec, r).ranks_per_node)
            for r in (1, 2, 4)] == [(1, 1), (2, 1), (4, 1)]
    assert spec_for(parse_cluster("nodes=1,rate=1gbit,mode=loopback"), 4).nodes == 1
    shared = grid_description(spec, [1, 2, 4])
    assert shared["per_part"] and shared["nodes"] == [1, 2, 4]
    assert shared["text"].startswith("nodes=<ranks>,rate=")
    assert "as many nodes as ranks (1, 2, 4), one rank per node" in shared["summary"]


def test_the_parameter_server_is_priced_as_the_linear_allreduce():
    parsed = parse_recipe(recipe(fixed={"scheme": None}, mutable={"scheme": [
        "ConsistentParameterServer", "ModelAverageDecentralized"]}), "scaling.yaml")
    schemes = reference_schemes()
    modelled = {c["scheme"].scheme: modelled_algorithm(c["scheme"], schemes)
                for c in parsed.configurations()}
    assert modelled["ConsistentParameterServer"][0] == "linear"
    # model averaging allreduces every few steps: not what the simulator prices
    assert modelled["ModelAverageDecentralized"] == (
        None, "ModelAverageDecentralized: d5.simulate_training models the steps of "
              "ConsistentDecentralized (and the parameter server) only")
    decentralized = parse_recipe(recipe(), "scaling.yaml").configurations()[0]["scheme"]
    assert modelled_algorithm(decentralized, schemes)[0] == "ring"


@pytest.mark.mpi
@pytest.mark.skipif(not _can_build_namespaces(),
                    reason="building network namespaces needs root (CAP_NET_ADMIN, "
                           "CAP_SYS_ADMIN) and iproute2")
def test_each_rank_count_runs_on_as_many_nodes_and_is_predicted(tmp_path):
    before = namespaces()
    path = tmp_path / "scaling.yaml"
    path.write_text(json.dumps(SCALING))
    out = tmp_path / "out"
    status, output, _ = run_program(
        [sys.executable, "-m", "deep500", "run", str(path), "--out", str(out),
         "--db", str(tmp_path / "db.sqlite")], timeout=240)
    left = [n for n in namespaces() if n not in before and not _owner_runs(n)]
    assert not left, f"namespaces left behind: {left}"
    assert status == 0, output
    assert "4 configurations measured, 0 failed to run" in output, output

    manifest = read_manifest(str(out))
    parts = manifest["rank_grid"]["parts"]
    # one namespace per node beside the switch's
    assert [(p["ranks"], p["cluster"]["nodes"], p["cluster"]["ranks_per_node"],
             sum(not n.endswith("s") for n in p["cluster"]["namespaces"]))
            for p in parts] == [(1, 1, 1, 1), (2, 2, 1, 2)]
    assert manifest["cluster"]["per_part"] and manifest["cluster"]["nodes"] == [1, 2]
    for part in parts:   # every part's namespaces are gone
        assert not set(part["cluster"]["namespaces"]) & set(namespaces())

    predicted = manifest["rank_grid"]["predicted"]
    assert predicted["machine"]["name"] and len(predicted["configurations"]) == 4
    for entry in predicted["configurations"]:
        assert entry["predicted"]["step_s"] > 0 and entry["algorithm"] == "ring"
        assert entry["predicted"]["ranks"] == entry["ranks"]
    records = [r for r in read_results(str(out)) if r.get("rank", 0) == 0]
    assert sorted((r["configuration"]["ranks"], r["result"]["details"]["batch"]["scaling"],
                   r["result"]["details"]["batch"]["per_rank"]) for r in records) == [
        (1, "strong", 32), (1, "weak", 16), (2, "strong", 16), (2, "weak", 16)]

    report = (out / "report.md").read_text()
    for scaling in ("weak", "strong"):
        title = (f"Scaling: measured and predicted — ConsistentDecentralized · "
                 f"{scaling} scaling")
        assert title in report, title
    assert "Emulated cluster: one cluster per rank count" in report
    assert os.path.isfile(out / "plots" / "scaling.png")
