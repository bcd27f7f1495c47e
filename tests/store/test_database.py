"""The results database: ingesting real run folders, idempotence, concurrent writers,
listing, bad databases, and every deep500 run stored when it ends."""
import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

import deep500.recipe.experiments.operators as operators_experiment
from deep500.cli import main
from deep500.recipe import run_recipe
from deep500.results.files import append_record, read_results
from deep500.store import Database, StoreError, store_run, store_run_or_warn
from deep500.store.database import SCHEMA_VERSION, configuration_key

from .conftest import lognormal, measurement, write_run


def test_ingest_a_real_run_folder(real_run, tmp_path):
    db_path = str(tmp_path / "d.db")
    run_id = store_run(real_run, db_path)
    records = read_results(real_run)
    with Database(db_path) as db:
        [run] = db.runs()
        assert run["id"] == run_id and run["folder"] == os.path.realpath(real_run)
        assert run["recipe"] == "storetiny" and run["status"] == "complete"
        assert run["configurations"] == 2 and run["records"] == 2
        assert run["cpu"] and run["hostname"]
        manifest = json.load(open(os.path.join(real_run, "manifest.json")))
        assert db.manifest(run_id) == manifest
        assert db.records(run_id) == records
        rows = db.measurements()
        assert [r["label"] for r in rows] == [r["label"] for r in records]
        for row, record in zip(rows, records):
            wallclock = record["result"]["metrics"][0]
            assert row["metric"] == "WallclockTime" and row["unit"] == "s"
            assert row["samples"] == wallclock["samples"]  # exactly, float64 round trip
            assert row["n"] == 12 and row["median"] == wallclock["summary"]["median"]
            assert row["ci_low"] <= row["median"] <= row["ci_high"]
            assert row["config_key"] == configuration_key(record["configuration"])
        connection = db.connection
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_ingesting_twice_is_one_run_updated(real_run, tmp_path):
    folder = shutil.copytree(real_run, tmp_path / "run")
    db_path = str(tmp_path / "d.db")
    first = store_run(str(folder), db_path)
    assert store_run(str(folder), db_path) == first
    append_record(str(folder), measurement("Extra", lognormal(1, 20), index=2))
    assert store_run(str(folder) + "/", db_path) == first  # the same folder, spelt otherwise
    with Database(db_path) as db:
        assert len(db.runs()) == 1 and db.runs()[0]["records"] == 3
        counts = db.connection.execute(
            "SELECT (SELECT COUNT(*) FROM records), (SELECT COUNT(*) FROM samples)").fetchone()
        assert counts == (3, 3)


WRITER = """
import sys
from deep500.store import store_run
for folder in sys.argv[2:]:
    store_run(folder, sys.argv[1])
"""


def test_two_concurrent_writers(tmp_path):
    """Two processes storing the same runs into one database at the same time: every
    run lands once, whole (WAL + busy timeout + one transaction per ingest)."""
    folders = [write_run(tmp_path / f"run{i}", [measurement(f"Op{j}", lognormal(i * 10 + j, 200),
                                                            index=j) for j in range(5)])
               for i in range(12)]
    db_path = str(tmp_path / "d.db")
    Database(db_path).close()
    # both store every folder three times, in opposite orders: they contend for the
    # same rows as well as for the file
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, db_path,
                                 *(folders[::step] * 3)]) for step in (1, -1)]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    with Database(db_path) as db:
        runs = db.runs()
        assert sorted(r["folder"] for r in runs) == sorted(os.path.realpath(f) for f in folders)
        counts = db.connection.execute(
            "SELECT run_id, COUNT(*) FROM records GROUP BY run_id").fetchall()
        assert sorted(c for _, c in counts) == [5] * 12
        assert all(len(r["samples"]) == 200 for r in db.measurements())


def test_runs_lists_stored_runs(real_run, tmp_path, capsys):
    db_path = str(tmp_path / "d.db")
    other = write_run(tmp_path / "synthetic", [measurement("Op", lognormal(0, 10))],
                      revision="b" * 40 + "-dirty", started="2020-01-01T00:00:00+00:00")
    assert main(["runs", "--db", db_path, "--add", real_run, other]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    header = lines.index(next(line for line in lines if line.startswith("id")))
    rows = lines[header + 1:]
    assert len(rows) == 2
    assert "synthetic" in rows[0] and "bbbbbbb (dirty)" in rows[0]  # oldest first
    assert "storetiny" in rows[1] and os.path.realpath(real_run) in rows[1]
    assert main(["runs", "--db", db_path, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["recipe"] for r in listed] == ["synthetic", "storetiny"]
    assert [r["configurations"] for r in listed] == [1, 2]


def test_bad_databases_exit_2_with_a_message(tmp_path, capsys):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite" * 100)
    assert main(["runs", "--db", str(garbage)]) == 2
    assert "not a usable results database" in capsys.readouterr().err
    newer = tmp_path / "newer.db"
    connection = sqlite3.connect(newer)
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    connection.close()
    assert main(["runs", "--db", str(newer)]) == 2
    assert "newer" in capsys.readouterr().err
    foreign = tmp_path / "foreign.db"
    connection = sqlite3.connect(foreign)
    connection.execute("CREATE TABLE t (x)")
    connection.close()
    with pytest.raises(StoreError, match="not Deep500's"):
        Database(str(foreign))
    assert main(["runs", "--db", str(tmp_path / "missing.db")]) == 2
    assert "no results database" in capsys.readouterr().err
    assert not (tmp_path / "missing.db").exists()
    assert main(["runs", "--db", str(tmp_path / "x.db"), "--add",
                 str(tmp_path / "nowhere")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_a_failure_to_store_warns_and_keeps_the_folder(real_run, tmp_path, capsys):
    folder = shutil.copytree(real_run, tmp_path / "run")
    before = sorted(os.listdir(folder))
    blocked = tmp_path / "a_folder.db"
    blocked.mkdir()
    assert store_run_or_warn(str(folder), str(blocked)) is None
    assert "was not stored" in capsys.readouterr().err
    assert sorted(os.listdir(folder)) == before


def test_deep500_run_stores_the_run_and_an_interrupted_one(tiny_recipe, tmp_path,
                                                            monkeypatch, capsys):
    db_path = str(tmp_path / "d.db")
    out = tmp_path / "complete"
    assert main(["run", tiny_recipe, "--out", str(out), "--quiet", "--db", db_path]) == 0
    assert f"Stored:  run 1 in {db_path}" in capsys.readouterr().out
    calls = {"n": 0}
    real = operators_experiment.test_op_forward

    def interrupt_on_second(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(operators_experiment, "test_op_forward", interrupt_on_second)
    with pytest.raises(KeyboardInterrupt):
        run_recipe(tiny_recipe, str(tmp_path / "partial"), progress=False, database=db_path)
    with Database(db_path) as db:
        runs = db.runs()
        assert [r["status"] for r in runs] == ["complete", "interrupted"]
        assert [r["records"] for r in runs] == [2, 1]


def test_run_refuses_a_bad_baseline_before_any_work(tiny_recipe, tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["run", tiny_recipe, "--out", str(out), "--quiet", "--db",
                 str(tmp_path / "d.db"), "--baseline", "12345"]) == 2
    assert "no results database" in capsys.readouterr().err
    assert main(["run", tiny_recipe, "--out", str(out), "--quiet", "--fail-above",
                 "5%"]) == 2
    assert "--baseline" in capsys.readouterr().err
    assert not out.exists()
