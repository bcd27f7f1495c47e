"""Report plots: PNG plus SVG (text kept as text) or PDF; a series with nothing to draw
has no legend entry; every drawn series has exactly one."""
import pytest

from deep500.report import write_reports
from deep500.report.plots import grouped_bars, line_panels, stacked_bars
from deep500.utils.errors import Deep500Error
from tests.report.conftest import copy_run, svg_legend_texts


def test_grouped_bars_leave_out_series_without_values(tmp_path):
    path = grouped_bars(str(tmp_path / "bars.png"), "t", ["a", "b"],
                        {"measured": [1.0, 2.0], "missing": [None, None],
                         "_private": [0.5, None]},
                        {"measured": [(0.9, 1.1), (None, None)]})
    assert (tmp_path / "bars.png").stat().st_size > 1000 and path.endswith("bars.png")
    assert svg_legend_texts(tmp_path / "bars.svg") == ["measured", "\u200b_private"]


def test_stacked_bars_leave_out_segments_that_are_zero(tmp_path):
    stacked_bars(str(tmp_path / "stack.png"), "t", ["x", "y"],
                 {"compute": [1.0, 2.0], "update": [0.0, 0.0], "data": [0.1, None]})
    assert svg_legend_texts(tmp_path / "stack.svg") == ["compute", "data"]


def test_line_panels_share_one_legend_of_drawn_series(tmp_path):
    """A series present only in the second panel is still in the legend; one with no
    point anywhere (all None, or not positive on a log axis) is not."""
    line_panels(str(tmp_path / "lines.png"), "t", [
        ("accuracy", "", {"a": ([1, 2], [0.5, 0.6]), "nothing": ([1, 2], [None, None])}),
        ("loss", "", {"a": ([1, 2], [1.0, 0.5]), "b": ([1, 2], [2.0, 1.0]),
                      "zero": ([1, 2], [0.0, 0.0])})], log_scale=(1,))
    assert svg_legend_texts(tmp_path / "lines.svg") == ["a", "b"]


def test_pdf_instead_of_svg_and_unknown_formats(operators_run, tmp_path):
    run = copy_run(operators_run, tmp_path / "run")
    write_reports(str(run), figure_format="pdf")
    plots = sorted(p.name for p in (run / "plots").iterdir())
    assert plots == ["level0_gflops.pdf", "level0_gflops.png", "level0_time.pdf",
                     "level0_time.png"]
    assert (run / "plots" / "level0_time.pdf").read_bytes().startswith(b"%PDF")
    markdown = (run / "report.md").read_text()
    assert "([PDF](plots/level0_time.pdf))" in markdown
    with pytest.raises(Deep500Error, match="figure format 'jpg' is not supported"):
        write_reports(str(run), figure_format="jpg")


def test_png_only(operators_run, tmp_path):
    run = copy_run(operators_run, tmp_path / "run")
    write_reports(str(run), figure_format=None)
    assert sorted(p.suffix for p in (run / "plots").iterdir()) == [".png", ".png"]
    assert "[SVG]" not in (run / "report.md").read_text()
