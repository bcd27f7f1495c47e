"""deep500 history: the filter, one point per revision, the HTML page."""
import re

import pytest

from deep500.cli import main
from deep500.store import StoreError, store_run
from deep500.store.history import history_points, matches, parse_filter

from .conftest import lognormal, measurement, write_run

REVISIONS = ["1" * 40, "2" * 40, "3" * 40]


@pytest.fixture
def database(tmp_path):
    """Four runs over three revisions (revision 2 twice, the later 3x slower), each
    with Relu and Relu6 (a label that starts like Relu's)."""
    db_path = str(tmp_path / "d.db")
    plan = [(REVISIONS[0], 1.0), (REVISIONS[1], 1.0), (REVISIONS[1], 3.0),
            (REVISIONS[2], 2.0)]
    for day, (revision, factor) in enumerate(plan, 1):
        folder = write_run(tmp_path / f"run{day}",
                           [measurement("Relu 8x16", factor * lognormal(day, 30), 0),
                            measurement("Relu6 8x16", lognormal(day + 10, 30), 1)],
                           revision=revision, started=f"2026-01-0{day}T00:00:00+00:00")
        store_run(folder, db_path)
    return db_path


def test_filter_syntax():
    assert parse_filter("framework=pytorch, operator.op_type=Relu") == [
        (["framework"], "pytorch"), (["operator", "op_type"], "Relu")]
    for bad in ("framework", "=x", ""):
        with pytest.raises(StoreError):
            parse_filter(bad)
    configuration = {"framework": "pytorch", "threads": 2,
                     "operator": {"op_type": "Relu", "label": "Relu 8x16"}}
    assert matches(configuration, parse_filter("operator=Relu,threads=2"))
    assert matches(configuration, parse_filter("operator=Relu 8x16"))
    assert matches(configuration, parse_filter("operator.op_type=Relu"))
    assert not matches(configuration, parse_filter("operator=Relu6"))
    assert not matches(configuration, parse_filter("operator=Rel"))
    assert not matches(configuration, parse_filter("threads=1"))
    assert not matches(configuration, parse_filter("seed=1"))


def test_every_run_of_a_revision(database):
    history = history_points(database, "operator=Relu")
    points = history["points"]
    assert [p["revision"] for p in points] == [REVISIONS[0], REVISIONS[1], REVISIONS[1],
                                               REVISIONS[2]]
    assert [p["runs_at_revision"] for p in points] == [1, 2, 2, 1]
    # both runs of revision 2 are shown: the second one 3x slower
    assert points[2]["value"] / points[1]["value"] == pytest.approx(3.0, rel=0.1)
    assert all(p["ci_low"] <= p["value"] <= p["ci_high"] for p in points)
    assert all(p["interference"] is None for p in points)
    assert history["unit"] == "s" and history["label"] == "Relu 8x16"


def test_history_html(database, tmp_path, capsys):
    out = tmp_path / "pages" / "history.html"
    assert main(["history", "--db", database, "--config", "operator=Relu", "--out",
                 str(out)]) == 0
    assert "4 run(s) of 3 revision(s), 0 under interference" in capsys.readouterr().out
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "<img" not in page
    assert not re.search(r"(src|href)=\"(https?:|//)|<link|<script", page)  # self-contained
    for short in ("1111111", "2222222", "3333333"):
        assert short in page
    assert page.count("<tr><td>") == 4  # one table row per run


def test_ambiguous_or_unmatched_filters(database, capsys):
    assert main(["history", "--db", database, "--config", "framework=reference"]) == 2
    error = capsys.readouterr().err
    assert "matches 2 configurations" in error and "Relu 8x16" in error
    assert "Relu6 8x16" in error and "operator" in error
    assert main(["history", "--db", database, "--config", "framework=pytorch"]) == 2
    assert "no stored measurement" in capsys.readouterr().err
    assert main(["history", "--db", database, "--config", "operator=Relu",
                 "--metric", "WallclockTime"]) == 2
    assert "METRIC.FIELD" in capsys.readouterr().err
    assert main(["history", "--db", database, "--config", "operator=Relu",
                 "--metric", "WallclockTime.nosuch"]) == 2
    assert "no such field" in capsys.readouterr().err
