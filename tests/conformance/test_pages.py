"""The Markdown pages (failures by class, the per-case matrix) and where a run writes."""
import json

import pytest

from deep500 import conformance as conf
from deep500.cli import main

R = conf.CaseResult


def synthetic_results():
    rows = [R("test_abs", "ref", "pass", "Abs"),
            R("test_abs", "ort", "pass", "Abs"),
            R("test_attention_bf16", "ref", "pass", "Attention",
              "passes within the ULPs granted to its dtype ('Y'; ONNX's fixed rtol=0.001 "
              "alone fails it)"),
            R("test_attention_bf16", "ort", "fail", "Attention", "differ", 0.1, "tolerance",
              2.5),
            R("test_bernoulli", "ref", "unsupported", "Bernoulli", "", 0, "nondeterministic"),
            R("test_bernoulli", "ort", "fail", "Bernoulli", "", 0, "nondeterministic", 9e9),
            R("test_cast_int4", "ref", "unsupported", "Cast", "", 0, "dtype"),
            R("test_cast_int4", "ort", "error", "Cast", "", 0, "error")]
    return conf.ConformanceResults(rows, executors=["ref", "ort"], command="cmd", cases=4)


def test_the_summary_page_counts_failures_by_class():
    results = synthetic_results()
    assert results.class_counts("ort") == {
        "nondeterministic": 1, "harness": 0, "dtype": 0, "unsupported op": 0, "tolerance": 1,
        "wrong": 0, "error": 1}
    assert results.widened("ref") == ["test_attention_bf16"] and results.widened("ort") == []
    page = conf.summary_page(results, "x_cases.md")
    assert "| ref | 2 | 0 | 2 | 0 | 4 | 50.0 |" in page
    assert ("| executor | nondeterministic | harness | dtype | unsupported op | tolerance | "
            "wrong | error | not passing |") in page
    assert "| ref | 1 | 0 | 1 | 0 | 0 | 0 | 0 | 2 |" in page
    assert "| ort | 1 | 0 | 0 | 0 | 1 | 0 | 1 | 3 |" in page
    assert "(ONNX's fixed rtol=1e-3 alone fails them): ref 1, ort 0." in page
    assert "- **tolerance**: values differ, by at most 4 times" in page
    assert "| Attention | 1/1 | 0/1 |" in page
    assert "[x_cases.md](x_cases.md)" in page


def test_the_matrix_has_one_grepable_line_per_case():
    page = conf.cases_page(synthetic_results(), "x.md")
    lines = page.splitlines()
    assert "| case | operator | ref | ort |" in lines
    assert "| test_abs | Abs | pass | pass |" in lines
    assert "| test_attention_bf16 | Attention | pass | tolerance (2.5 ULP) |" in lines
    assert "| test_bernoulli | Bernoulli | nondeterministic | nondeterministic |" in lines
    assert "| test_cast_int4 | Cast | dtype | error |" in lines
    assert sum(line.startswith("| test_") for line in lines) == 4
    assert "[x.md](x.md#failures-by-class)" in page


def test_pages_are_written_side_by_side(tmp_path):
    matrix = conf.write_pages(synthetic_results(), str(tmp_path / "conf.md"))
    assert matrix == str(tmp_path / "conf_cases.md")
    assert "[conf_cases.md](conf_cases.md)" in (tmp_path / "conf.md").read_text()
    assert "[conf.md](conf.md#failures-by-class)" in (tmp_path / "conf_cases.md").read_text()


def test_results_json_keeps_each_class(tmp_path):
    path = tmp_path / "all.json"
    synthetic_results().write_json(str(path))
    data = json.loads(path.read_text())
    assert data["failure_classes"]["ort"]["tolerance"] == 1
    assert data["executors"]["ort"]["test_attention_bf16"]["max_ulp"] == 2.5
    assert data["executors"]["ref"]["test_cast_int4"]["failure_class"] == "dtype"


def test_a_partial_run_leaves_the_repositorys_tables_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    locked = tmp_path / "tests" / "lv1_network" / "conformance_passing.json"
    locked.parent.mkdir(parents=True)
    locked.write_text(json.dumps({"reference": ["test_abs", "test_gone"]}))
    assert main(["conformance", "--executors", "reference", "--pattern", "^test_abs$",
                 "--quiet"]) == 0
    assert not (tmp_path / "docs").exists()
    assert json.loads(locked.read_text()) == {"reference": ["test_abs", "test_gone"]}
    written = sorted(p.name for p in (tmp_path / "results").iterdir())
    assert written == ["conformance_partial.json", "conformance_partial.md",
                       "conformance_partial_cases.md"]
    out = capsys.readouterr().out
    assert "results/conformance_partial.md" in out and "checked, not updated" in out


def test_regressions_are_locked_cases_run_and_not_passed():
    results = conf.ConformanceResults([R("test_abs", "reference", "fail", "Abs")],
                                      executors=["reference"])
    locked = {"reference": ["test_abs", "test_relu"], "pytorch": ["test_abs"]}
    assert conf.locked_regressions(locked, results) == {"reference": ["test_abs"]}


@pytest.mark.parametrize("flag", ["--out", "--json"])
def test_a_partial_run_writes_where_it_is_told(tmp_path, monkeypatch, flag):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / ("page.md" if flag == "--out" else "passing.json")
    assert main(["conformance", "--executors", "reference", "--pattern", "^test_abs$",
                 "--quiet", flag, str(target)]) == 0
    assert target.exists()
    if flag == "--json":
        assert json.loads(target.read_text()) == {"reference": ["test_abs"]}
