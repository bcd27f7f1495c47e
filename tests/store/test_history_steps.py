"""deep500 history marks runs measured under interference and finds steps: the fit on
its own (asv's piecewise-constant L1 model) and on a stored history."""
import re

import numpy as np
import pytest

from deep500.cli import main
from deep500.store import store_run
from deep500.store.history import history_points
from deep500.store.step_detection import detect_steps, weighted_median

from .conftest import lognormal, measurement, write_run


def test_weighted_median():
    assert weighted_median(np.array([3.0, 1.0, 2.0]), np.ones(3)) == 2.0
    assert weighted_median(np.array([1.0, 2.0]), np.ones(2)) == 1.5
    assert weighted_median(np.array([1.0, 2.0, 10.0]), np.array([1.0, 1.0, 5.0])) == 10.0


def test_one_step_found_where_it_is():
    rng = np.random.default_rng(0)
    flat = 1.0 + 0.02 * rng.standard_normal(12)
    slower = 1.5 + 0.02 * rng.standard_normal(12)
    steps = detect_steps(list(flat) + list(slower))
    assert len(steps) == 1
    assert (steps[0].before, steps[0].after) == (11, 12)
    assert steps[0].ratio == pytest.approx(1.5, rel=0.05)
    # noise alone: no step; one outlier among 20 points: no step either (L1 is robust)
    assert detect_steps(list(1.0 + 0.02 * rng.standard_normal(20))) == []
    with_outlier = list(1.0 + 0.02 * rng.standard_normal(20))
    with_outlier[7] = 1.3
    assert detect_steps(with_outlier) == []
    # a constant series, and too short ones
    assert detect_steps([2.0] * 6) == [] and detect_steps([1.0]) == []


def test_wide_intervals_weigh_less():
    # the same jump, once with tight and once with 100x wider intervals after it
    values = [1.0, 1.01, 0.99, 1.0, 1.2, 1.21, 1.19, 1.2]
    tight = detect_steps(values, [0.01] * 8)
    assert [(s.before, s.after) for s in tight] == [(3, 4)]
    # a step within the points' own intervals is no step; three points with a perfect
    # three-level fit keep only the step that stands out of their noise
    assert detect_steps(values, [0.01] * 4 + [1.0] * 4) == []
    three = detect_steps([1.0, 3.1, 3.2], [0.02, 0.3, 0.3])
    assert [(s.before, s.after) for s in three] == [(0, 1)]
    assert three[0].ratio == pytest.approx(3.15, rel=0.02)


@pytest.fixture
def stepped_database(tmp_path):
    """Eight runs over eight revisions: 1 ms, then from the fifth 2 ms; the third run
    (3 ms, a spike) was measured under interference."""
    db_path = str(tmp_path / "d.db")
    for day in range(8):
        scale = (2e-3 if day >= 4 else 1e-3) * (3 if day == 2 else 1)
        record = measurement("Relu 8x16", lognormal(day, 20, scale=scale, sigma=0.02))
        if day == 2:
            record["telemetry"] = {"interfered": True, "other_cpu_cores": 1.3,
                                   "reason": "other processes used 1.3 cores"}
        else:
            record["telemetry"] = {"interfered": False, "other_cpu_cores": 0.01}
        store_run(write_run(tmp_path / f"run{day}", [record], revision=str(day) * 40,
                            started=f"2026-01-0{day + 1}T00:00:00+00:00"), db_path)
    return db_path


def test_history_marks_interference_and_steps(stepped_database, tmp_path, capsys):
    history = history_points(stepped_database, "operator=Relu")
    marked = [i for i, p in enumerate(history["points"]) if p["interference"]]
    assert marked == [2] and "1.3 cores" in history["points"][2]["interference"]
    # the interfered spike is left out of the fit: one step, between runs 4 and 5
    assert len(history["steps"]) == 1, history["steps"]
    step = history["steps"][0]
    assert (step["before"], step["after"]) == (3, 4)
    assert step["from"] == "3333333" and step["to"] == "4444444"
    assert step["ratio"] == pytest.approx(2.0, rel=0.05)
    assert "1 interfered run(s) left out" in history["step_basis"]
    out = tmp_path / "h.html"
    assert main(["history", "--db", stepped_database, "--config", "operator=Relu",
                 "--out", str(out)]) == 0
    line = capsys.readouterr().out
    assert "8 run(s) of 8 revision(s), 1 under interference" in line
    assert "steps: 3333333 → 4444444 ×" in line
    page = out.read_text()
    assert "measured under interference" in page and "⚠ other processes used 1.3" in page
    assert "3333333 → 4444444" in page


def test_history_all_writes_an_index_site(stepped_database, tmp_path, capsys):
    # a second configuration, stored once
    store_run(write_run(tmp_path / "other", [measurement("Softmax 4x10", lognormal(
        99, 20), index=1)], revision="9" * 40, started="2026-01-09T00:00:00+00:00"),
        stepped_database)
    site = tmp_path / "site"
    assert main(["history", "--all", "--db", stepped_database, "--out", str(site)]) == 0
    assert "2 configuration(s)" in capsys.readouterr().out
    index = (site / "index.html").read_text()
    assert index.count("<svg") == 2 and index.count("<polyline") == 2
    assert index.count('fill="#d62728"') == 1  # the one interfered run
    assert "3333333 → 4444444 ×" in index  # Relu's last step
    pages = re.findall(r'href="([^"]+\.html)"', index)
    assert len(pages) == 2 and all((site / page).is_file() for page in pages)
    assert not re.search(r"(src|href)=\"(https?:|//)|<script", index)
    assert "Relu 8x16" in (site / pages[0]).read_text() + (site / pages[1]).read_text()
    # refused: both --all and --config; --out a file; nothing stored
    assert main(["history", "--all", "--config", "operator=Relu", "--db",
                 stepped_database]) == 2
    assert "not both" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["history", "--all", "--db", stepped_database, "--out",
                 str(tmp_path / "file")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main(["history", "--db", stepped_database]) == 2
    assert "give --config FILTER" in capsys.readouterr().err
