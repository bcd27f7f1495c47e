"""Each experiment's report.html as a reader's browser shows it (issue 31, item 8):
headless Chromium loads the page (``browser.probe``) and every image must load, no table
may overflow the 1280-pixel page or carry an empty header row, and no console error may
appear. Runs of every experiment kind that one process can run: the report fixtures'
operator and training runs, the stored records of a real ``deep500 run --np 2`` of a
distributed recipe, and tiny networks, models and datasets runs made here. (The
parallelism experiment needs mpirun: its report is the distributed one's with a pipeline
table.)"""
import textwrap

import pytest

from deep500.recipe import run_recipe
from deep500.report import write_reports

from tests.report import browser
from tests.report.figure_checks import figure_problems

pytestmark = pytest.mark.skipif(
    browser.chromium() is None,
    reason="Chromium is not installed (.ci/run installs Debian's chromium)")

TINY = {
    "networks": """
        name: browser-networks
        experiment: networks
        fixed: {dtype: float32, threads: 1, seed: 0, batch_size: 4}
        mutable:
          network: [{model: mlp, input_shape: [1, 8, 8]}]
          mode: [inference, backprop]
          executor: [reference]
        metrics:
          WallclockTime: {reruns: 3, warmup: 1}
          OperatorTimes: {}
    """,
    "datasets": """
        name: browser-datasets
        experiment: datasets
        fixed: {dataset: digits, batch_size: 16, batches: 4, threads: 1, seed: 0}
        mutable:
          storage: [memory, jpeg-tar]
          order: [sequential, shuffled]
          decoder: [pil]
        metrics:
          DatasetLatency: {warmup: 1}
    """,
    "models": """
        name: browser-models
        experiment: models
        machine: infiniband-hdr
        fixed:
          dataset: {name: digits, normalize: standardize}
          network: {model: mlp, hidden: [16]}
          optimizer: {type: sgd, learning_rate: 0.1}
          batch_size: 8
          steps: 8
          warmup: 2
          reruns: 4
          scaling_ranks: 4
          threads: 1
          seed: 0
        mutable:
          algorithm: [ring]
        metrics:
          StepTimePrediction: {}
    """,
}


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    runs = {}
    for kind, text in TINY.items():
        folder = tmp_path_factory.mktemp(f"browser-{kind}")
        recipe = folder / f"{kind}.yaml"
        recipe.write_text(textwrap.dedent(text))
        run_recipe(str(recipe), str(folder / "run"), argv=["deep500", "run"],
                   progress=False, write_report=False)
        runs[kind] = folder / "run"
    return runs


def _report(run_folder) -> str:
    paths = write_reports(str(run_folder))
    [html] = [p for p in paths if p.endswith("report.html")]
    return html


def _assert_reads_well(run_folder, monkeypatch):
    with figure_problems(monkeypatch) as problems:
        html = _report(run_folder)
    assert problems == []
    found = browser.probe(html)
    assert found["images"], "the report has no figure"
    assert browser.defects(found) == []


def test_operators_report_reads_well(operators_run, monkeypatch):
    _assert_reads_well(operators_run, monkeypatch)


def test_training_report_reads_well(training_run, monkeypatch):
    _assert_reads_well(training_run, monkeypatch)


def test_distributed_report_reads_well(distributed_run, monkeypatch):
    _assert_reads_well(distributed_run, monkeypatch)


@pytest.mark.parametrize("kind", sorted(TINY))
def test_report_reads_well(tiny_runs, kind, monkeypatch):
    _assert_reads_well(tiny_runs[kind], monkeypatch)


def test_the_probe_sees_what_is_broken(tmp_path):
    page = tmp_path / "report.html"
    page.write_text("<html><head></head><body><img alt='gone' src='missing.png'>"
                    "<table><thead><tr><th></th></tr></thead>"
                    f"<tr><td style='min-width:{browser.WIDTH + 400}px'>x</td></tr></table>"
                    "<table><tr><td style='width:2em'>" + "word " * 60 + "</td><td>y</td></tr>"
                    "</table><script>console.error('boom')</script></body></html>")
    problems = browser.defects(browser.probe(str(page)))
    assert any("image not loaded: gone" in p for p in problems)
    assert any("overflows" in p for p in problems)
    assert any("empty header row" in p for p in problems)
    assert any("console: boom" in p for p in problems)
    assert any("lines tall" in p for p in problems)
    assert not (tmp_path / "report.browser-probe.html").exists()
