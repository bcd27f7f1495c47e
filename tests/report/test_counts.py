"""The report counts outcomes per configuration (not per rank), skipped ones apart, with
the same words ``deep500 run`` prints."""
import copy
import pathlib
import textwrap

from deep500.cli import main
from deep500.results.files import read_results
from deep500.report import write_reports
from deep500.report.records import Counts, count_outcomes
from tests.report.conftest import copy_run

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_skipped_configurations_are_counted_apart(training_run, tmp_path):
    records = read_results(str(training_run))
    counts = count_outcomes(records)
    assert counts == Counts(configurations=9, measured=6, failed=0, skipped=3,
                            acceptance_failures=0)
    assert counts.sentence() == ("6 configurations measured, 0 failed to run, 0 missed an "
                                 "acceptance threshold, 3 not applicable (skipped)")
    run = copy_run(training_run, tmp_path / "run")
    write_reports(str(run))
    assert (run / "report.md").read_text().splitlines()[2] == counts.sentence() + "."


def test_counts_are_per_configuration_not_per_rank(distributed_run):
    records = read_results(str(distributed_run))
    assert len(records) == 8 and {r["rank"] for r in records} == {0, 1}
    assert count_outcomes(records) == Counts(configurations=4, measured=4)
    # rank 1 of one configuration failed, rank 1 of another missed a threshold, on both
    # ranks of a third
    changed = copy.deepcopy(records)
    by_key = {(r["index"], r["rank"]): r for r in changed}
    by_key[(0, 1)].update(kind="error", error="RuntimeError: on purpose")
    by_key[(1, 1)]["passed"] = False
    by_key[(2, 0)]["passed"] = by_key[(2, 1)]["passed"] = False
    assert count_outcomes(changed) == Counts(configurations=4, measured=3, failed=1,
                                             acceptance_failures=2)


def test_report_and_command_line_say_the_same(tmp_path, capsys):
    """A recipe where some configurations miss a threshold and one does not apply (a
    C++ Relu kernel asked for Gemm): ``deep500 run`` and the report it writes give the
    same line."""
    recipe = tmp_path / "strict.yaml"
    kernel = REPO / "recipes" / "kernels" / "relu.cpp"
    recipe.write_text(textwrap.dedent("""
        name: strict
        fixed: {dtype: float32, threads: 1, seed: 0}
        mutable:
          framework: [reference, pytorch, {cpp: KERNEL, op: Relu}]
          operator:
            - {op: Relu, shape: [8, 16]}
            - {op: Gemm, inputs: [[8, 16], [16, 4]]}
        metrics:
          WallclockTime: {reruns: 6, warmup: 1}
          L2Error: {}
        acceptance: ["L2Error.relative <= 1e-30"]
    """).replace("KERNEL", str(kernel)))
    out = tmp_path / "run"
    status = main(["run", str(recipe), "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out.splitlines()[-1]
    records = read_results(str(out))
    counts = count_outcomes(records)
    assert counts.measured == 5 and counts.skipped == 1
    assert counts.acceptance_failures >= 1
    assert status == 1
    assert printed == counts.sentence()
    assert (out / "report.md").read_text().splitlines()[2] == counts.sentence() + "."
