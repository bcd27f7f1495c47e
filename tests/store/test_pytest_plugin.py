"""The d5bench pytest fixture measures with WallclockTime and stores into the results
database (issue 31, item 5)."""
import json

from deep500.cli import main
from deep500.store import Database

pytest_plugins = ["pytester"]

BENCHMARKS = '''
import time
import pytest


@pytest.mark.parametrize("size", [10, 2000])
def test_sorted(d5bench, size):
    data = list(range(size, 0, -1))
    d5bench.reruns = 8
    assert d5bench(sorted, data) == sorted(data)
    assert d5bench.result.summary["n"] == 8


def test_sleep(d5bench):
    d5bench(time.sleep, 0.002)
    assert 0.002 <= d5bench.result.value < 0.5


def test_twice(d5bench):
    d5bench(len, [])
    d5bench(len, [])
'''


def test_d5bench_stores_each_test(pytester, capsys):
    pytester.makepyfile(test_benchmarks=BENCHMARKS)
    # (paths inside pytester's folder: a path argument elsewhere would move pytest's
    # rootdir, and node ids with it)
    tmp_path = pytester.path
    database = str(tmp_path / "d.db")
    arguments = ["-p", "deep500.store.pytest_plugin", "--d5bench-db", database,
                 "--d5bench-reruns", "5", "--d5bench-warmup", "1", "-q"]
    first = pytester.runpytest(*arguments, "--d5bench-out", str(tmp_path / "one"))
    first.assert_outcomes(passed=3, failed=1)
    first.stdout.fnmatch_lines(["*d5bench measures one callable per test*",
                                f"d5bench: {tmp_path / 'one'}, stored as run 1*"])
    with Database(database, create=False) as db:
        run = db.run(1)
        rows = db.measurements()
    assert run["recipe"] == "tests" and run["status"] == "failed"
    labels = sorted(row["label"] for row in rows)
    assert labels == ["test_benchmarks.py::test_sleep", "test_benchmarks.py::test_sorted[10]",
                      "test_benchmarks.py::test_sorted[2000]",
                      "test_benchmarks.py::test_twice"]
    by_label = {row["label"]: row for row in rows}
    assert by_label["test_benchmarks.py::test_sorted[10]"]["n"] == 8
    assert by_label["test_benchmarks.py::test_sleep"]["n"] == 5
    assert by_label["test_benchmarks.py::test_sleep"]["median"] >= 0.002
    sorted_10 = by_label["test_benchmarks.py::test_sorted[10]"]
    assert sorted_10["configuration"]["parameters"] == {"size": "10"}
    assert "interfered" in sorted_10["record"]["telemetry"]

    # a second session compares with the first, test by test
    pytester.runpytest(*arguments, "--d5bench-out", str(tmp_path / "two"),
                       "-k", "sorted or sleep").assert_outcomes(passed=3)
    capsys.readouterr()
    assert main(["compare", "1", "2", "--db", database, "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)
    assert len(compared["rows"]) == 3


def test_without_d5bench_nothing_is_written(pytester):
    tmp_path = pytester.path
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    result = pytester.runpytest("-p", "deep500.store.pytest_plugin", "--d5bench-db",
                                str(tmp_path / "d.db"), "-q")
    result.assert_outcomes(passed=1)
    assert not (tmp_path / "d.db").exists()
    assert not (pytester.path / "results").exists()
