"""The store's errors name their cause: a database that cannot grow, another
program's SQLite file with Deep500's schema version; and a database only read (runs,
compare, history) is opened read-only."""
import sqlite3

import pytest

from deep500.cli import main
from deep500.store.database import Database, StoreError
from tests.fuzz.test_fuzz_run_folders import _folder_content, _write


@pytest.fixture
def run_folder(tmp_path):
    records, manifest = _folder_content()
    folder = tmp_path / "run"
    _write(folder, records * 40, manifest, cut=False)
    return folder


def test_a_database_that_cannot_grow_says_so(tmp_path, run_folder):
    path = str(tmp_path / "full.db")
    with Database(path) as db:
        pages = db.connection.execute("PRAGMA page_count").fetchone()[0]
        db.connection.execute(f"PRAGMA max_page_count = {pages}")  # as a full disk
        with pytest.raises(StoreError) as caught:
            db.ingest(str(run_folder))
        message = str(caught.value)
        assert "was not stored: the disk is full" in message
        assert "database or disk is full" in message and "cannot rollback" not in message
        assert db.runs() == []  # nothing half-stored, and the database still answers
    with Database(path) as db:
        assert db.ingest(str(run_folder)) == 1  # with room again


def test_another_programs_database_with_our_schema_version(tmp_path, capsys):
    path = tmp_path / "other.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE runs (name TEXT)")
    connection.execute("PRAGMA user_version = 1")
    connection.commit()
    connection.close()
    for argv in (["runs", "--db", str(path)], ["compare", "1", "2", "--db", str(path)],
                 ["runs", "--db", str(path), "--add", str(tmp_path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert (f"{path} is an SQLite database with schema version 1 but not Deep500's "
                f"(it lacks runs.id, runs.folder") in err, err


def test_reading_commands_open_the_database_read_only(tmp_path, run_folder, capsys):
    path = str(tmp_path / "d.db")
    assert main(["runs", "--db", path, "--add", str(run_folder)]) == 0
    with Database(path, create=False) as db:
        assert db.read_only and [r["id"] for r in db.runs()] == [1]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            db.connection.execute("DELETE FROM runs")
    with Database(path) as db:
        assert not db.read_only
    capsys.readouterr()
    assert main(["runs", "--db", path]) == 0
    assert str(run_folder) in capsys.readouterr().out
    assert main(["compare", "1", "1", "--db", path]) == 0


@pytest.fixture
def read_only_copy(tmp_path, run_folder):
    """A stored database on a real read-only file system: a tmpfs (root may mount one)
    holding it, remounted read-only (even root gets EROFS there); unmounted after."""
    import shutil
    import subprocess
    from tests.mounts import tmpfs
    with tmpfs(tmp_path / "ro", "4m") as mount:
        source = tmp_path / "d.db"
        assert main(["runs", "--db", str(source), "--add", str(run_folder)]) == 0
        shutil.copy(source, mount / "d.db")
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        yield mount / "d.db"


def test_a_database_on_a_read_only_file_system_is_read_and_not_written(
        read_only_copy, run_folder, capsys):
    """runs, compare and history read it (no journal or shared-memory file can be made
    beside it, so SQLite's immutable mode is what opens it); runs --add says why it
    cannot store."""
    import errno
    import os
    with pytest.raises(OSError) as caught:   # the file system really is read-only
        open(read_only_copy.parent / "probe", "w")
    assert caught.value.errno == errno.EROFS
    capsys.readouterr()
    assert main(["runs", "--db", str(read_only_copy)]) == 0
    assert str(run_folder) in capsys.readouterr().out
    assert main(["compare", "1", "1", "--db", str(read_only_copy)]) == 0
    capsys.readouterr()
    assert main(["runs", "--db", str(read_only_copy), "--add", str(run_folder)]) == 2
    error = capsys.readouterr().err
    assert "read-only" in error and str(read_only_copy) in error, error
    assert sorted(os.listdir(read_only_copy.parent)) == ["d.db"]
