"""Level 0 as distributions over DeepBench sizes (paper Fig. 6): a violin of time and
of GFLOP/s per framework with the median ℓ∞ error, the rows sampled said in the
report; and a configuration's raw samples as violins or histograms."""
import textwrap

import numpy as np
import pytest

from deep500.cli import main
from deep500.recipe import run_recipe
from deep500.report import write_reports
from deep500.report.reading import SAMPLES_KEPT, report_records, thinned
from deep500.report.records import summary
from deep500.report.sample_plots import sample_figure, widest_first
from deep500.utils.errors import Deep500Error
from tests.report.conftest import copy_run, read_jsonl, table

# three tiny DeepBench inference GEMMs (of rows 242, 243, 246, 247: each under 0.01
# GFLOP), drawn with seed 0, on the reference framework
RECIPE = textwrap.dedent("""
    name: deepbench-tiny
    fixed: {dtype: float32, device: cpu, threads: 1, framework: reference}
    mutable:
      operator:
        - {op: Gemm, from: deepbench_gemm.csv, rows: "242-247", max_gflop: 0.01,
           sample: 3, seed: 0}
        - {op: Relu, shape: [64, 256]}
    metrics:
      WallclockTime: {reruns: 40, warmup: 2}
      FLOPs: {}
      MaxError: {}
""")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deepbench")
    (folder / "deepbench-tiny.yaml").write_text(RECIPE)
    run_recipe(str(folder / "deepbench-tiny.yaml"), str(folder / "run"),
               argv=["deep500", "run"], progress=False, write_report=False)
    return folder / "run"


def test_the_report_shows_gemm_over_its_sampled_rows(tiny_run, tmp_path):
    run = copy_run(tiny_run, tmp_path / "run")
    write_reports(str(run))
    records = [r for r in read_jsonl(run / "results.jsonl") if r["kind"] == "measurement"]
    gemms = [r for r in records if r["configuration"]["operator"]["op_type"] == "Gemm"]
    rows = sorted(int(r["configuration"]["operator"]["source"].split()[-1]) for r in gemms)
    assert len(rows) == 3 and set(rows) <= {242, 243, 246, 247}
    markdown = (run / "report.md").read_text()
    # which rows were measured, and that they were sampled
    assert (f"deepbench_gemm.csv: 3 of its 248 rows (rows 242-247, at most 0.01 GFLOP, "
            f"3 sampled (seed 0) of 4): rows ") in markdown
    header, body = table(markdown, "Level 0 — Gemm over its sizes, per framework")
    assert header == ["Framework", "Sizes", "Median time [quartiles]",
                      "Median GFLOP/s [quartiles]", "Median ℓ∞ error", "Largest ℓ∞ error"]
    assert [row[:2] for row in body] == [["reference", "3"]]
    errors = sorted(summary(r, "MaxError", "relative") for r in gemms)
    assert float(body[0][4]) == pytest.approx(errors[1], rel=5e-3)  # 3 significant digits
    assert float(body[0][5]) == pytest.approx(errors[2], rel=5e-3)
    # Relu was measured at one size: no distribution of it
    assert "Level 0 — Relu over its sizes" not in markdown
    assert "plots/level0_distribution_Gemm.png" in markdown
    assert "plots/level0_distribution_Relu.png" not in markdown
    png = (run / "plots" / "level0_distribution_Gemm.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    svg = (run / "plots" / "level0_distribution_Gemm.svg").read_text()
    assert "median ℓ∞" in svg and "Achieved GFLOP/s" in svg
    assert "level0_samples" not in markdown  # raw samples only when asked for


def test_raw_samples_drawn_when_asked(tiny_run, tmp_path):
    run = copy_run(tiny_run, tmp_path / "run")
    assert main(["report", str(run), "--figure-format", "none",
                 "--samples", "histogram"]) == 0
    markdown = (run / "report.md").read_text()
    assert (f"![Raw samples of time per call as histograms, every configuration; more "
            f"than {SAMPLES_KEPT} samples are drawn as {SAMPLES_KEPT} evenly spaced "
            f"quantiles](plots/level0_samples.png)") in markdown
    assert (run / "plots" / "level0_samples.png").stat().st_size > 5000
    with pytest.raises(Deep500Error, match=r"samples are drawn as \['violin', "
                                           r"'histogram'\], not 'pie'"):
        write_reports(str(run), samples="pie")


@pytest.mark.parametrize("style", ["violin", "histogram"])
def test_sample_figures_name_each_configuration(tmp_path, style):
    samples = {"Gemm m=1 | reference": [1e-3, 2e-3, 2e-3, 4e-3],
               "Relu 64x256 | pytorch": [5e-4, 6e-4], "empty": []}
    path = sample_figure(str(tmp_path / "s.png"), "t", samples, style=style)
    svg = (tmp_path / "s.svg").read_text()
    assert path.endswith("s.png") and (tmp_path / "s.png").stat().st_size > 1000
    assert "Gemm m=1 | reference" in svg and "Relu 64x256 | pytorch" in svg
    assert "time per call (ms)" in svg and "empty" not in svg


def test_kept_samples_are_quantiles_of_the_raw_ones(tiny_run):
    raw = [r for r in read_jsonl(tiny_run / "results.jsonl") if r["kind"] == "measurement"]
    kept = [r for r in report_records(str(tiny_run)) if r["kind"] == "measurement"]
    for full, small in zip(raw, kept):
        samples = next(m for m in full["result"]["metrics"]
                       if m["metric"] == "WallclockTime")["samples"]
        quantiles = next(m for m in small["result"]["metrics"]
                         if m["metric"] == "WallclockTime")["samples"]
        assert len(samples) == 40 and len(quantiles) == SAMPLES_KEPT
        np.testing.assert_allclose(quantiles, np.quantile(samples, np.linspace(0, 1, 33)),
                                   rtol=1e-12)
    assert thinned([3.0, 1.0, 2.0]) == [1.0, 2.0, 3.0]
    assert thinned("not samples") == [] and thinned([1.0, None]) == []


def test_the_configurations_that_spread_most_are_drawn_first():
    def record(name, spread):
        samples = [1.0, 1.0 + spread, 1.0 - spread / 2]
        return {"name": name, "result": {"metrics": [
            {"metric": "WallclockTime", "summary": {}, "samples": samples}]}}
    records = [record(f"c{i}", spread) for i, spread in
               enumerate([0.1, 0.5, 0.01, 0.9, 0.3])]
    assert [r["name"] for r in widest_first(records, limit=3)] == ["c1", "c3", "c4"]
    assert widest_first(records[:2], limit=3) == records[:2]
