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


@pytest.fixture
def repository(tmp_path, monkeypatch):
    """A stand-in for the checkout: its tracked page and locked set, and a working
    folder elsewhere to run the command from."""
    from deep500.conformance import command
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "conformance.md").write_text("tracked page\n")
    locked = root / "tests" / "lv1_network" / "conformance_passing.json"
    locked.parent.mkdir(parents=True)
    locked.write_text(json.dumps({"reference": ["test_abs", "test_gone"]}))
    monkeypatch.setattr(command, "repository_root", lambda: str(root))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return root, locked, elsewhere


def _tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_run_writes_only_into_its_folder(repository, capsys):
    """From any folder, a run writes results/conformance/ there and only reads the
    repository's tracked page and locked set."""
    root, locked, elsewhere = repository
    before = _tree(root)
    assert main(["conformance", "--executors", "reference", "--pattern", "^test_abs$",
                 "--quiet"]) == 0
    assert _tree(root) == before
    assert (root / "docs" / "conformance.md").read_text() == "tracked page\n"
    assert json.loads(locked.read_text()) == {"reference": ["test_abs", "test_gone"]}
    out = elsewhere / "results" / "conformance"
    assert _tree(elsewhere) == ["results", "results/conformance",
                                "results/conformance/conformance.json",
                                "results/conformance/conformance.md",
                                "results/conformance/conformance_cases.md",
                                "results/conformance/conformance_passing.json"]
    assert json.loads((out / "conformance_passing.json").read_text()) == {
        "reference": ["test_abs", "test_gone"]}
    printed = capsys.readouterr().out
    assert "results/conformance/conformance.md" in printed and str(locked) in printed


def test_out_names_the_folder(repository, tmp_path):
    target = tmp_path / "mine"
    assert main(["conformance", "--executors", "reference", "--pattern", "^test_abs$",
                 "--quiet", "--out", str(target)]) == 0
    assert sorted(p.name for p in target.iterdir()) == [
        "conformance.json", "conformance.md", "conformance_cases.md",
        "conformance_passing.json"]
    assert "| Abs | 1/1 |" in (target / "conformance.md").read_text()


def test_tracked_files_are_written_only_with_update_docs(repository, capsys):
    root, locked, elsewhere = repository
    assert main(["conformance", "--executors", "reference", "--pattern", "^test_abs$",
                 "--quiet", "--update-docs"]) == 2
    assert "a partial run must not replace the tables" in capsys.readouterr().err
    assert main(["conformance", "--executors", "reference", "--pattern", "^test_abs$",
                 "--quiet", "--out", str(root / "docs")]) == 2
    assert "is a file the repository tracks" in capsys.readouterr().err
    assert (root / "docs" / "conformance.md").read_text() == "tracked page\n"
    assert not (elsewhere / "results").exists()


def test_update_docs_regenerates_the_tracked_files(repository, monkeypatch):
    """--update-docs on a run of every case (here, a suite of one case) writes the
    repository's pages and locked set, wherever the command runs."""
    from deep500.conformance import command
    one_case = conf.load_cases("^test_abs$")
    monkeypatch.setattr(command, "load_cases", lambda pattern: one_case)
    root, locked, elsewhere = repository
    assert main(["conformance", "--executors", "reference", "--quiet",
                 "--update-docs"]) == 0
    page = (root / "docs" / "conformance.md").read_text()
    assert "deep500 conformance --update-docs --executors reference" in page
    assert (root / "docs" / "conformance_cases.md").exists()
    assert json.loads(locked.read_text()) == {"reference": ["test_abs", "test_gone"]}
    assert (elsewhere / "results" / "conformance" / "conformance.md").read_text() == page


def test_regressions_are_locked_cases_run_and_not_passed():
    results = conf.ConformanceResults([R("test_abs", "reference", "fail", "Abs")],
                                      executors=["reference"])
    locked = {"reference": ["test_abs", "test_relu"], "pytorch": ["test_abs"]}
    assert conf.locked_regressions(locked, results) == {"reference": ["test_abs"]}
