"""Level-3 recipes: distributed schemes checked up front, trained on real ranks
(``deep500 run --np 2`` re-running itself under mpirun), written by rank 0 and
reported; a scheme that cannot be set up is an error record while the others run; a
rank failing in training stops every rank and what was written stays."""
import json
import sys
import textwrap
from pathlib import Path

import pytest

import deep500.recipe.experiments.distributed as distributed
from deep500.recipe import parse_recipe
from deep500.results.files import read_manifest, read_results
from deep500.utils.errors import RecipeError
from tests.lv3_distributed.mpi_helpers import run_program

SCRIPTS = Path(__file__).parent / "scripts"

BASE = {"experiment": "distributed",
        "fixed": {"network": {"model": "mlp", "hidden": [16]},
                  "optimizer": {"type": "sgd", "learning_rate": 0.1}},
        "mutable": {"scheme": ["ConsistentDecentralized"]},
        "metrics": {"TestAccuracy": {}}}


def _with_schemes(*schemes):
    return {**BASE, "mutable": {"scheme": list(schemes)}}


def test_a_checked_recipe_lists_its_schemes():
    recipe = parse_recipe(_with_schemes(
        "ConsistentDecentralized", {"scheme": "ConsistentDecentralized",
                                    "algorithm": "mpi"}), "ok.yaml")
    labels = [c["scheme"].label for c in recipe.configurations()]
    assert labels == ["ConsistentDecentralized", "ConsistentDecentralized(algorithm=mpi)"]
    assert recipe.kind.level == 3


@pytest.mark.parametrize("change, message", [
    (_with_schemes("NoSuchScheme"), "unknown reference scheme 'NoSuchScheme'; "
                                    "available: ['ConsistentDecentralized'"),
    (_with_schemes({"scheme": "ConsistentDecentralized", "period": 3}),
     "ConsistentDecentralized takes no options ['period']; it takes ['algorithm', "
     "'bucket_bytes', 'comm_dtype', 'compute_only_every', 'mpi_algorithm', 'overlap', "
     "'progress', 'segment_bytes']"),
    (_with_schemes({"scheme": "ConsistentDecentralized", "comm_dtype": "float8"}),
     "ConsistentDecentralized: comm_dtype='float8' is not a communication dtype; choose "
     "one of float32, float16, bfloat16"),
    (_with_schemes({"scheme": "ConsistentNeighbors", "comm_dtype": "half"}),
     "ConsistentNeighbors: comm_dtype='half' is not a communication dtype"),
    (_with_schemes({"scheme": "ConsistentDecentralized", "algorithm": "tree"}),
     "mutable.scheme[0].algorithm: unknown allreduce algorithm 'tree'; registered: "
     "binomial, linear, mpi, rabenseifner, recursive_doubling, ring, segmented_ring."),
    (_with_schemes({"scheme": "ConsistentDecentralized", "segment_bytes": 4096}),
     "segment_bytes=4096 applies to algorithm='segmented_ring' only"),
    (_with_schemes({"scheme": "ConsistentDecentralized", "algorithm": "segmented_ring",
                    "segment_bytes": 0}), "segment_bytes=0: give a positive integer"),
    (_with_schemes({"scheme": "ConsistentDecentralized", "algorithm": "mpi",
                    "mpi_algorithm": "fastest"}),
     "mpi_algorithm='fastest' is not an MPICH allreduce algorithm; choose one of auto, "),
    (_with_schemes({"scheme": "ConsistentDecentralized", "algorithm": {"a": 1}}),
     "scheme options are numbers"),
    (_with_schemes({"algorithm": "ring"}), "a scheme is a class name or a mapping"),
    (_with_schemes({"framework": "tensorflow", "scheme": "MirroredStrategy"}),
     "tensorflow has no distributed baseline 'MirroredStrategy'; available: "
     "['Horovod', 'MultiWorkerMirroredStrategy', 'TensorFlowMultiWorkerMirrored']"),
    (_with_schemes({"framework": "tensorflow", "scheme": "MultiWorkerMirroredStrategy",
                    "implementation": "nccl"}),
     "'nccl' is not a CPU collective of MultiWorkerMirroredStrategy"),
    (_with_schemes({"framework": "onnxruntime", "scheme": "Any"}),
     "'onnxruntime' has no distributed baseline"),
    (_with_schemes({"framework": "pytorch", "scheme": "Horovod"}),
     "Horovod is not installable here (horovod.torch is missing)"),
    (_with_schemes({"framework": "tensorflow", "scheme": "Horovod"}),
     "Horovod is not installable here (horovod.tensorflow is missing): horovod 0.28.1 "
     "from the registry did not build"),
    ({**BASE, "fixed": {**BASE["fixed"], "optimizer": {"type": "sgd",
                                                       "implementation": "reference"}}},
     "remove 'implementation'"),
    ({**BASE, "fixed": {**BASE["fixed"], "executor": "onnxruntime"}},
     "reference schemes drive an executor that trains"),
    ({**BASE, "metrics": {"TrajectoryDivergence": {}}},
     "unknown metric 'TrajectoryDivergence'"),
])
def test_bad_distributed_recipes(change, message):
    with pytest.raises(RecipeError) as error:
        parse_recipe(change, "bad.yaml")
    assert message in str(error.value)


def test_the_shipped_recipe_checks(repo_root):
    from deep500.recipe import load_recipe
    recipe = load_recipe(str(repo_root / "recipes" / "distributed.yaml"))
    assert len(recipe.configurations()) == 10


def test_a_missing_baseline_module_fails_at_check_time(monkeypatch):
    monkeypatch.setitem(distributed.BASELINES, "pytorch",
                        ("deep500.frameworks.pytorch.no_such_module", "pytorch"))
    with pytest.raises(RecipeError) as error:
        parse_recipe(_with_schemes({"framework": "pytorch", "scheme": "AnyDDP"}), "b.yaml")
    assert "the pytorch distributed baseline is not available" in str(error.value)
    assert "ConsistentDecentralized" in str(error.value)  # what can be used instead


def test_an_unknown_baseline_name_lists_the_available_ones():
    pytest.importorskip("deep500.frameworks.pytorch.distributed")
    with pytest.raises(RecipeError) as error:
        parse_recipe(_with_schemes({"framework": "pytorch", "scheme": "NoDDP"}), "b.yaml")
    assert "pytorch has no distributed baseline 'NoDDP'; available: [" in str(error.value)


RECIPE = textwrap.dedent("""
    name: dist
    experiment: distributed
    fixed:
      dataset: {name: digits, normalize: standardize}
      network: {model: mlp, hidden: [16]}
      optimizer: {type: sgd, learning_rate: 0.1}
      batch_size: 16
      epochs: 2
      threads: 1
      seed: 0
    mutable:
      scheme: %s
    metrics: {TestAccuracy: {}, TimeToAccuracy: {target: 0.5}}
    acceptance: ["TestAccuracy.final >= 0.5"]
""")


def deep500(*args, timeout=240):
    return run_program([sys.executable, "-m", "deep500", *map(str, args)], timeout)


@pytest.mark.mpi
@pytest.mark.slow
def test_np_2_runs_every_scheme_on_two_ranks_and_reports(tmp_path):
    schemes = ["ConsistentDecentralized", {"scheme": "ConsistentParameterServer", "root": 5},
               {"scheme": "ConsistentDecentralized", "algorithm": "mpi"},
               "InconsistentParameterServer"]
    path = tmp_path / "dist.yaml"
    path.write_text(RECIPE % json.dumps(schemes))
    out = tmp_path / "out"
    status, output, _ = deep500("run", "--np", 2, path, "--out", out, "--quiet")
    # the parameter server rooted at rank 5 cannot be set up: an error, the rest run
    assert status == 1, output
    assert "3 configurations measured, 1 failed to run" in output, output
    assert "0 missed" in output, output
    assert output.count("Results:") == 1  # rank 0 alone reports
    assert read_manifest(str(out))["mpi_ranks"] == 2
    records = read_results(str(out))
    errors = [r for r in records if r["kind"] == "error"]
    assert sorted(r["rank"] for r in errors) == [0, 1]
    assert "root 5 is not a rank" in errors[0]["error"] and "rank 0:" in errors[0]["error"]
    measured = [r for r in records if r["kind"] == "measurement"]
    assert sorted((r["index"], r["rank"]) for r in measured) == [
        (0, 0), (0, 1), (2, 0), (2, 1), (3, 0), (3, 1)]
    for record in measured[:4]:
        assert record["passed"] and record["size"] == 2
        summary = record["result"]["details"].get("distributed")
        if record["rank"] != 0:
            assert summary is None  # rank 0 holds every rank's figures
            continue
        assert len(summary["ranks"]) == 2 and len(summary["epochs"]) == 2
        analytic = summary["analytic_per_epoch"]
        for epoch in summary["epochs"]:
            # synchronous SGD: the ring allreduce's model is exactly what was sent
            assert epoch["bytes_sent"] == [a["bytes_sent"] for a in analytic]
            assert epoch["test_accuracy_min"] == epoch["test_accuracy_max"]
            assert set(epoch["phase_times_mean"]) == {"compute", "communication", "update"}
        counted = summary["ranks"][1]["epochs"][0]["optimizer_measurements"]["counted"]
        assert counted == ("exact" if record["index"] == 0 else "includes modelled")
    assert sorted(p.name for p in (out / "training").iterdir()) == [
        "0000-reference-rank0.csv", "0002-reference-rank0.csv",
        "0003-reference-rank0.csv"]  # rank 0 writes alone
    report = (out / "report.md").read_text()
    for title in ("Level 3 — distributed training", "bytes per rank per epoch",
                  "where an epoch's time goes", "replica divergence",
                  "configurations that failed"):
        assert title in report, title
    for plot in ("level3_accuracy_epochs.png", "level3_accuracy_time.png",
                 "level3_phases.png", "level3_bytes.png", "level3_staleness.png"):
        assert (out / "plots" / plot).is_file(), plot


@pytest.mark.slow
def test_one_process_runs_on_one_rank_and_the_report_says_so(tmp_path):
    path = tmp_path / "one.yaml"
    path.write_text((RECIPE % '["ConsistentDecentralized"]').replace("epochs: 2",
                                                                      "epochs: 1"))
    out = tmp_path / "out"
    status, output, _ = deep500("run", path, "--out", out, "--quiet")
    assert status == 0, output
    (record,) = read_results(str(out))
    summary = record["result"]["details"]["distributed"]
    assert record["size"] == 1 and summary["size"] == 1
    assert summary["epochs"][0]["bytes_sent"] == [0]
    assert "This run had 1 process" in (out / "report.md").read_text()


@pytest.mark.mpi
def test_np_must_match_the_ranks_mpirun_started(tmp_path):
    from deep500.lv3_distributed import mpirun_executable
    path = tmp_path / "dist.yaml"
    path.write_text(RECIPE % '["ConsistentDecentralized"]')
    status, output, _ = run_program([mpirun_executable(), "-np", "2", sys.executable, "-m",
                                     "deep500", "run", "--np", "3", str(path), "--out",
                                     str(tmp_path / "out")], timeout=120)
    assert status != 0
    assert output.count("deep500: error: --np 3, but mpirun started 2 rank(s)") == 1, output
    assert not (tmp_path / "out").exists()


@pytest.mark.mpi
@pytest.mark.slow
def test_a_rank_failing_in_training_stops_every_rank_and_keeps_what_was_written(tmp_path):
    from deep500.lv3_distributed import mpirun_executable
    path = tmp_path / "dist.yaml"
    path.write_text((RECIPE % '["ConsistentDecentralized", "FailsOnRank1", '
                              '"ConsistentDecentralized"]').replace("epochs: 2", "epochs: 1"))
    out = tmp_path / "out"
    status, output, _ = run_program([mpirun_executable(), "-np", "2", sys.executable,
                                     str(SCRIPTS / "run_with_failing_scheme.py"), "run",
                                     str(path), "--out", str(out), "--quiet"], timeout=180)
    assert status != 0
    assert "rank 1 failed: Traceback" in output and "rank 1 fails on purpose" in output
    records = read_results(str(out))  # the scheme measured before the failure stays
    assert [(r["index"], r["kind"]) for r in records] == [(0, "measurement")] * 2 + [
        (1, "error")]  # and rank 1 recorded its own failure before the abort
    assert records[2]["rank"] == 1
    assert records[2]["error"] == "RuntimeError: FailsOnRank1: rank 1 fails on purpose"
    manifest = read_manifest(str(out))  # rank 1 recorded its failure before the abort
    assert manifest["status"] == "failed" and manifest["failure"]["rank"] == 1
    assert manifest["failure"]["error"] == "RuntimeError: FailsOnRank1: rank 1 fails on purpose"
    assert "Traceback" in manifest["failure"]["traceback"]
    status, output, _ = deep500("report", out)
    report = (out / "report.md").read_text()
    assert status == 0 and "Level 3 — distributed training" in report
    assert "failed (rank 1: RuntimeError: FailsOnRank1: rank 1 fails on purpose)" in report
