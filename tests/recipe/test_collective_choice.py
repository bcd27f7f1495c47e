"""Default versus best collective (issue 28, item 6): ``mpich_allreduce`` is a launch
setting, so the rank grid runs one mpirun job per (ranks, MPICH algorithm) with
``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` set; every record says which algorithm MPICH
started with; Deep500's own algorithms are measured once (under ``auto``); bad values
are recipe errors naming the key and the valid values; the report has the per-size
tables, the training-step table and the plot."""
import json
import os
import sys

import pytest

from deep500.lv3_distributed.collectives.mpich import MPICH_ALLREDUCE_ALGORITHMS
from deep500.recipe import parse_recipe
from deep500.recipe.launch_environment import environment, mismatch
from deep500.recipe.rank_grid import Part, check_launch, in_part, recipe_parts
from deep500.results.files import read_manifest, read_results
from deep500.utils.errors import Deep500Error, RecipeError
from tests.lv3_distributed.mpi_helpers import run_program
from tests.recipe.recipe_changes import changed

CVAR = "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"
CHOICE = {"name": "choice", "experiment": "distributed",
          "fixed": {"network": {"model": "mlp", "hidden": [16]},
                    "optimizer": {"type": "sgd", "learning_rate": 0.1},
                    "batch_size": 16, "epochs": 1, "seed": 0, "ranks": 2, "threads": 1,
                    "allreduce_sizes": [8, 4096]},
          "mutable": {"mpich_allreduce": ["auto", "ring"], "scheme": [
              {"scheme": "ConsistentDecentralized", "algorithm": "ring"},
              {"scheme": "ConsistentDecentralized", "algorithm": "mpi"}]},
          "metrics": {"TestAccuracy": {}}}


def recipe(**changes):
    return changed(CHOICE, changes)


@pytest.fixture
def no_cvar(monkeypatch):
    for name in (CVAR, "MPICH_ALLREDUCE_INTRA_ALGORITHM",
                 "MPIR_PARAM_ALLREDUCE_INTRA_ALGORITHM"):
        monkeypatch.delenv(name, raising=False)


def test_a_bad_mpich_algorithm_names_the_key_and_the_valid_values():
    with pytest.raises(RecipeError) as error:
        parse_recipe(recipe(mutable={"mpich_allreduce": ["auto", "fastest"]}), "bad.yaml")
    message = str(error.value)
    assert "mutable.mpich_allreduce[1]: the string 'fastest' is not an algorithm of " \
           "MPICH's MPI_Allreduce (MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM)" in message
    assert "choose one of " + ", ".join(MPICH_ALLREDUCE_ALGORITHMS) in message
    with pytest.raises(RecipeError, match=r"fixed\.mpich_allreduce: the number 3 is not"):
        parse_recipe(recipe(mutable={"mpich_allreduce": None},
                            fixed={"mpich_allreduce": 3}), "bad.yaml")


def test_mpich_allreduce_needs_ranks_and_auto_beside_deep500_algorithms():
    with pytest.raises(RecipeError, match=r"mutable\.mpich_allreduce\[0\]: mpich_allreduce "
                                          r"is set in the environment .* give ranks too"):
        parse_recipe(recipe(fixed={"ranks": None}), "bad.yaml")
    with pytest.raises(RecipeError, match=r"scheme ConsistentDecentralized\(algorithm=ring"
                                          r"\) .* add auto to mpich_allreduce"):
        parse_recipe(recipe(mutable={"mpich_allreduce": ["ring", "tree"]}), "bad.yaml")
    # with MPI_Allreduce alone, any values will do
    parse_recipe(recipe(mutable={"mpich_allreduce": ["ring", "tree"],
                                 "scheme": [{"scheme": "ConsistentDecentralized",
                                             "algorithm": "mpi"}]}), "ok.yaml")


def test_allreduce_sizes_are_checked():
    with pytest.raises(RecipeError, match=r"fixed\.allreduce_sizes\[1\]: a message size is "
                                          r"a multiple of 4 bytes"):
        parse_recipe(recipe(fixed={"allreduce_sizes": [8, 6]}), "bad.yaml")
    with pytest.raises(RecipeError, match=r"mutable\.scheme\[0\]: allreduce_sizes times "
                                          r"the scheme's allreduce, but "
                                          r"ConsistentParameterServer has none"):
        parse_recipe(recipe(mutable={"mpich_allreduce": ["auto"],
                                     "scheme": ["ConsistentParameterServer"]}), "bad.yaml")


def test_parts_are_keyed_by_ranks_and_launch_settings():
    parsed = parse_recipe(recipe(), "choice.yaml")
    configurations = parsed.configurations()
    # the launch setting varies slower than the scheme: each part's configurations follow
    # one another
    assert [c["mpich_allreduce"] for c in configurations] == ["auto", "auto",
                                                              "ring", "ring"]
    assert recipe_parts(parsed) == [(2, {"mpich_allreduce": "auto"}),
                                    (2, {"mpich_allreduce": "ring"})]
    part = Part("/out", 0, 0, 2, {"mpich_allreduce": "ring"})
    assert [in_part(part, c) for c in configurations] == [False, False, True, True]
    assert environment({"mpich_allreduce": "ring"}) == {
        CVAR: "ring", "MPICH_ALLREDUCE_INTRA_ALGORITHM": "ring",
        "MPIR_PARAM_ALLREDUCE_INTRA_ALGORITHM": "ring"}
    # Deep500's ring never calls MPI_Allreduce: measured under auto, skipped under ring
    reasons = [parsed.kind.applicable(c) for c in configurations]
    assert reasons[:2] == [None, None] and reasons[3] is None
    assert "Deep500's ring allreduce sends point-to-point messages" in reasons[2]
    # a record's configuration shows mpich_allreduce only where the recipe sets it
    assert parsed.kind.describe(configurations[2])["mpich_allreduce"] == "ring"
    plain = parse_recipe(recipe(mutable={"mpich_allreduce": None}), "plain.yaml")
    assert "mpich_allreduce" not in plain.kind.describe(plain.configurations()[0])


def test_settings_not_in_effect_are_refused(monkeypatch, no_cvar):
    parsed = parse_recipe(recipe(mutable={"mpich_allreduce": ["ring"], "scheme": [
        {"scheme": "ConsistentDecentralized", "algorithm": "mpi"}]}), "choice.yaml")
    assert mismatch({"mpich_allreduce": "auto"}) is None
    assert "mpich_allreduce: ring (this process's MPI started with " \
           "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=auto)" in mismatch(
               {"mpich_allreduce": "ring"})
    with pytest.raises(Deep500Error, match="the recipe sets mpich_allreduce: ring .* "
                                           "without mpirun and without --np"):
        check_launch(parsed, 2)   # as under an outer mpirun -np 2
    monkeypatch.setenv(CVAR, "ring")
    check_launch(parsed, 2)
    monkeypatch.setenv("DEEP500_RANK_GRID_PART", json.dumps(
        {"output_dir": "/out", "session": 0, "first_index": 0, "ranks": 2,
         "settings": {"mpich_allreduce": "tree"}}))
    with pytest.raises(Deep500Error, match="this part of the rank grid is for "
                                           "mpich_allreduce: tree"):
        check_launch(parsed, 2)


@pytest.mark.mpi
def test_each_mpich_choice_runs_in_its_own_job_and_its_records_say_so(tmp_path, no_cvar):
    path = tmp_path / "choice.yaml"
    path.write_text(json.dumps(CHOICE))
    out = tmp_path / "out"
    status, output, _ = run_program(
        [sys.executable, "-m", "deep500", "run", str(path), "--out", str(out), "--quiet",
         "--db", str(tmp_path / "db.sqlite")], timeout=180)
    assert status == 0, output
    assert "3 configurations measured, 0 failed to run, 0 missed an acceptance " \
           "threshold, 1 not applicable (skipped)" in output, output

    parts = read_manifest(str(out))["rank_grid"]["parts"]
    assert [(p["ranks"], p["settings"], p["environment"].get(CVAR), p["exit_status"])
            for p in parts] == [(2, {"mpich_allreduce": "auto"}, "auto", 0),
                                (2, {"mpich_allreduce": "ring"}, "ring", 0)]
    records = [r for r in read_results(str(out)) if r.get("rank", 0) == 0]
    skipped = [r for r in records if r["kind"] == "skipped"]
    assert [(r["configuration"]["mpich_allreduce"],
             r["configuration"]["scheme"]["algorithm"])
            for r in skipped] == [("ring", "ring")]
    measured = [r for r in records if r["kind"] == "measurement"]
    seen = []
    for record in measured:
        chosen = record["configuration"]["mpich_allreduce"]
        details = record["result"]["details"]
        assert details["mpich_allreduce"] == chosen   # what MPICH started with
        timed = details["allreduce_sizes"]
        assert timed["mpich_allreduce"] == chosen and timed["ranks"] == 2
        assert [row["bytes"] for row in timed["sizes"]] == [8, 4096]
        assert all(row["median"] > 0 and len(row["samples"]) == row["repeats"] >= 11
                   for row in timed["sizes"])
        assert timed["gradient_bytes"] == 4 * (64 * 16 + 16 + 16 * 10 + 10)
        seen.append((timed["algorithm"], chosen))
    assert sorted(seen) == [("mpi", "auto"), ("mpi", "ring"), ("ring", "auto")]

    report = (out / "report.md").read_text()
    for title in ("Default versus best collective — per message size",
                  "Allreduce of 8 B on 2 ranks", "Allreduce of 4 KiB on 2 ranks",
                  "Default versus best collective — training step"):
        assert title in report, title
    for row in ("| MPICH auto (default)", "| MPICH ring", "| Deep500 ring"):
        assert row in report, row
    assert os.path.isfile(out / "plots" / "collective_choice.png")
