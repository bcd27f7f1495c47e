"""The run's headline and the report's first lines say how many configurations were
measured under interference (issue 31, item 4)."""
import json
import textwrap

from deep500.recipe.run_summary import counted, summarize
from deep500.report import write_reports
from deep500.report.records import count_outcomes
from deep500.results.files import read_results

TINY = textwrap.dedent("""
    name: noisetiny
    fixed: {dtype: float32, threads: 1, seed: 3}
    mutable:
      framework: [reference]
      operator:
        - {op: Relu, shape: [8, 16]}
        - {op: Softmax, shape: [4, 10], axis: 1}
    metrics:
      WallclockTime: {reruns: 5, warmup: 1}
""")


def _marked(records, interfered):
    for record, flag in zip(records, interfered):
        record["telemetry"] = {**record.get("telemetry", {}), "interfered": flag,
                               "other_cpu_cores": 1.4 if flag else 0.0}
    return records


def test_counts_say_how_many_were_interfered():
    records = [{"kind": "measurement", "index": i, "session": 0, "passed": True}
               for i in range(3)]
    counts = count_outcomes(_marked(records, [True, False, True]))
    assert (counts.measured, counts.watched, counts.interfered) == (3, 3, 2)
    assert counts.interference_sentence().startswith(
        "⚠ 2 of 3 measured configurations were measured under interference")
    # what deep500 run keeps of each record is enough for the same count
    summary = summarize("out", [counted(r) for r in records], [], None)
    assert summary.interference_sentence() == counts.interference_sentence()
    quiet = count_outcomes(_marked(records, [False] * 3))
    assert quiet.interference_sentence() == ("None of the 3 measured configurations was "
                                             "measured under interference.")
    unwatched = [{"kind": "measurement", "index": 0, "passed": True}]
    assert "(1 not watched by the telemetry sampler)" in \
        count_outcomes(unwatched).interference_sentence()
    assert count_outcomes([]).interference_sentence() is None


def test_report_first_lines(tmp_path):
    from deep500.recipe import run_recipe
    recipe = tmp_path / "noisetiny.yaml"
    recipe.write_text(TINY)
    out = tmp_path / "run"
    run_recipe(str(recipe), str(out), progress=False, write_report=False)
    records = _marked(read_results(str(out)), [True, False])
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_reports(str(out))
    lines = (out / "report.md").read_text().splitlines()
    assert lines[2] == "2 configurations measured, 0 failed to run, 0 missed an " \
                       "acceptance threshold."
    assert lines[4].startswith("⚠ 1 of 2 measured configurations were measured under "
                               "interference")
    page = (out / "report.html").read_text()
    assert "<p class='warn'>⚠ 1 of 2 measured configurations" in page
