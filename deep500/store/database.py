"""The results store: one embedded SQLite database holding every run.

``deep500 run`` writes each run to its folder (``results.jsonl`` + ``manifest.json``,
:mod:`deep500.results.files`) and, at the end, ingests that folder here, so that runs
can be listed (``deep500 runs``), compared (``deep500 compare``) and followed across git
revisions (``deep500 history``). The folder stays the source of truth: ingesting it
again replaces what the database held about it (one run per folder).

Location: ``--db PATH``, else ``$DEEP500_DB``, else ``results/deep500.db`` under the
current directory (beside the folders ``deep500 run`` writes by default).

Tables (schema version :data:`SCHEMA_VERSION`, kept in ``PRAGMA user_version``):

- ``runs``: one row per run folder (absolute path, unique): recipe, start and finish
  time, status, git revision (the working directory's, else Deep500's own), host, CPU,
  counts, and the whole manifest as JSON;
- ``records``: one row per line of ``results.jsonl``: configuration index, session,
  rank, kind, level, experiment, label, the configuration as JSON and as a canonical
  key (sorted-key JSON, equal configurations give equal keys), the record's timing
  metric (``WallclockTime``; for training records, which have none, ``EpochTime``:
  the wall time of each completed epoch) with its median, CI, unit and n, and the whole
  record as JSON;
- ``samples``: the timing metric's raw samples of a record, one JSON array per record.
  Samples are only ever read and written as a whole vector (a comparison needs all of
  them), so one row per record keeps ingest fast and the table small where a row per
  sample would multiply rows by the number of reruns; JSON keeps float64 values exactly
  (shortest repr round-trips) and SQLite's ``json_each`` still reaches single samples.

Concurrency: the database runs in WAL mode (readers never block the writer) and every
connection waits up to :data:`BUSY_TIMEOUT_S` for a lock; an ingest is one
``BEGIN IMMEDIATE`` transaction, so two processes storing runs at once are serialised
and neither sees the other's half-written run (SQLite, "Write-Ahead Logging" and
"File Locking And Concurrency In SQLite Version 3"). WAL needs a local file system.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import sqlite3
import statistics

from deep500.utils.errors import Deep500Error

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0
DEFAULT_DB = os.path.join("results", "deep500.db")

_SCHEMA = """
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    folder TEXT NOT NULL UNIQUE,
    recipe TEXT,
    experiment TEXT,
    started TEXT,
    finished TEXT,
    status TEXT,
    git_revision TEXT,
    deep500_revision TEXT,
    hostname TEXT,
    cpu TEXT,
    configurations INTEGER,
    records INTEGER,
    ingested TEXT NOT NULL,
    manifest TEXT NOT NULL
);
CREATE TABLE records (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    idx INTEGER,
    session INTEGER NOT NULL DEFAULT 0,
    rank INTEGER NOT NULL DEFAULT 0,
    kind TEXT NOT NULL,
    level INTEGER,
    experiment TEXT,
    label TEXT,
    configuration TEXT NOT NULL,
    config_key TEXT NOT NULL,
    metric TEXT,
    median REAL,
    ci_low REAL,
    ci_high REAL,
    unit TEXT,
    n INTEGER,
    record TEXT NOT NULL,
    UNIQUE (run_id, position)
);
CREATE INDEX records_run ON records(run_id);
CREATE INDEX records_key ON records(config_key, rank);
CREATE TABLE samples (
    record_id INTEGER PRIMARY KEY REFERENCES records(id) ON DELETE CASCADE,
    metric TEXT NOT NULL,
    n INTEGER NOT NULL,
    "values" TEXT NOT NULL
);
"""


def storage_problem(exc: sqlite3.Error) -> str:
    """What an SQLite error says of the storage, in words that say what to do: the
    disk is full, the file or its folder is read-only, the file reached its size
    limit; else SQLite's own message."""
    text = str(exc)
    lowered = text.lower()
    if "disk is full" in lowered or "disk full" in lowered:
        return (f"the disk is full, or the database reached a size limit ({text}); free "
                f"space, or give a database elsewhere with --db or $DEEP500_DB")
    if "readonly" in lowered or "read-only" in lowered:
        return (f"the database or its folder is read-only ({text}); give a writable "
                f"database with --db or $DEEP500_DB")
    if "too big" in lowered or "file too large" in lowered:
        return (f"the database file reached the largest size this system allows "
                f"({text}); give a database elsewhere with --db or $DEEP500_DB")
    return text


def _not_writable(path: str) -> bool:
    """Whether the existing database ``path`` or its folder cannot be written: a
    read-only file system, or permissions."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        read_only_mount = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False
    return os.path.exists(path) and (read_only_mount or not os.access(path, os.W_OK)
                                     or not os.access(folder, os.W_OK))


def _schema_columns() -> dict[str, list[str]]:
    """``{table: [column, ...]}`` of :data:`_SCHEMA`."""
    tables: dict[str, list[str]] = {}
    for statement in _SCHEMA.split(";"):
        head, _, body = statement.partition("(")
        words = head.split()
        if words[:2] != ["CREATE", "TABLE"]:
            continue
        names = [line.split()[0].strip('"') for line in body.splitlines() if line.strip()]
        tables[words[2]] = [n for n in names if n.isidentifier() and not n.isupper()]
    return tables


_SCHEMA_COLUMNS = _schema_columns()


class StoreError(Deep500Error):
    """The results database or a run named for it cannot be used: not a database,
    written by a newer Deep500, an unknown run id, a folder that is not a run."""


def default_path() -> str:
    """``$DEEP500_DB`` if set, else ``results/deep500.db`` under the current directory."""
    return os.environ.get("DEEP500_DB") or DEFAULT_DB


def configuration_key(configuration: dict) -> str:
    """The configuration as canonical text: equal configurations give equal keys (the
    same rule as the report's :func:`deep500.report.records.configuration_key`)."""
    return json.dumps(configuration, sort_keys=True, default=str)


def _finite(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:  # an integer beyond any float
        return None
    return value if math.isfinite(value) else None


def mapping(value) -> dict:
    """``value`` where it is a JSON object, else ``{}``: a run folder edited by hand or
    cut short may hold anything where a manifest or record holds an object."""
    return value if isinstance(value, dict) else {}


def column(value):
    """``value`` as an SQLite column takes it (and as a key that can be hashed): None, a
    number or a string as they are (a bool as 0 or 1, an integer beyond 64 bits and a
    non-finite number as their text), anything else (a list, an object) as its JSON text."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and not -2 ** 63 <= value < 2 ** 63:
        return str(value)  # beyond SQLite's 64-bit integers
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # SQLite stores NaN as NULL
    if value is None or isinstance(value, (int, float, str)):
        return value
    return json.dumps(value, default=str)


def timing(record: dict) -> dict | None:
    """The record's timing metric: ``{metric, samples, median, ci_low, ci_high, unit}``.

    ``WallclockTime`` where the record has it (its raw samples and the median's
    nonparametric CI as measured); otherwise, for training records, ``EpochTime``: the
    wall time of each completed epoch (``result.details.statistics.epochs``), with the
    median's CI computed here by the same rank rule. None when the record has neither."""
    result = mapping(record.get("result"))
    metrics = result.get("metrics")
    for entry in metrics if isinstance(metrics, list) else []:
        entry = mapping(entry)
        if (entry.get("metric") == "WallclockTime" and isinstance(entry.get("samples"), list)
                and entry["samples"]):
            summary = mapping(entry.get("summary"))
            samples = [float(s) for s in entry["samples"] if _finite(s) is not None]
            unit = entry.get("unit")
            return {"metric": "WallclockTime", "samples": samples,
                    "median": _finite(summary.get("median")),
                    "ci_low": _finite(summary.get("ci_low")),
                    "ci_high": _finite(summary.get("ci_high")),
                    "unit": unit if isinstance(unit, str) and unit else "s"}
    epochs = mapping(mapping(result.get("details")).get("statistics")).get("epochs")
    samples = [float(e["wall_time"]) for e in (epochs if isinstance(epochs, list) else [])
               if isinstance(e, dict) and e.get("completed", True)
               and _finite(e.get("wall_time")) is not None]
    if not samples:
        return None
    from deep500.utils.statistics import median_ci
    low, high, _ = median_ci(samples)
    return {"metric": "EpochTime", "samples": samples, "median": statistics.median(samples),
            "ci_low": _finite(low), "ci_high": _finite(high), "unit": "s"}


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat()


class Database:
    """A connection to the results database at ``path`` (created on first use unless
    ``create`` is false). Raises StoreError when the file is not a Deep500 database."""

    def __init__(self, path: str | None = None, create: bool = True):
        self.path = path or default_path()
        if not create and not os.path.isfile(self.path):
            raise StoreError(f"{self.path}: no results database here; 'deep500 run' "
                             f"creates it (or give another with --db or $DEEP500_DB)")
        # only reading (runs, compare, history): opened read-only, so that a database
        # on a read-only file system or in a folder of someone else's can be read
        self.read_only = not create and self._open_read_only()
        if not self.read_only:
            self._open()

    def _open(self) -> None:
        folder = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(folder, exist_ok=True)
            self.connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S,
                                              isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            why = storage_problem(exc) if isinstance(exc, sqlite3.Error) else exc
            raise StoreError(f"{self.path}: cannot open the results database ({why})") \
                from None
        try:
            self._prepare()
        except sqlite3.DatabaseError as exc:
            self.connection.close()
            if isinstance(exc, sqlite3.OperationalError) and (
                    "readonly" in str(exc) or "read-only" in str(exc)):
                raise StoreError(f"{self.path}: {storage_problem(exc)}") from None
            if isinstance(exc, sqlite3.OperationalError) and _not_writable(self.path):
                # SQLite says only "unable to open database file" when it cannot make
                # its journal beside a database on a read-only file system
                raise StoreError(f"{self.path}: the database or its folder is read-only "
                                 f"({exc}), so nothing can be stored into it; it can "
                                 f"still be read (deep500 runs, compare, history); give a "
                                 f"writable database with --db or $DEEP500_DB") from None
            raise StoreError(f"{self.path} is not a usable results database ({exc}); "
                             f"move it away (deep500 starts a new one) or give another "
                             f"with --db") from None
        except StoreError:
            self.connection.close()
            raise

    def _open_read_only(self) -> bool:
        """Open the database read-only (SQLite's ``mode=ro``; where even that needs a
        write, its shared-memory file in a read-only folder, ``immutable=1``: nothing
        can change it there). False, nothing open, when it holds no Deep500 schema yet
        (it is then prepared as for writing, as before)."""
        from urllib.parse import quote
        uri = f"file:{quote(os.path.abspath(self.path))}"
        for options in ("mode=ro", "mode=ro&immutable=1"):
            try:
                self.connection = sqlite3.connect(f"{uri}?{options}", uri=True,
                                                  timeout=BUSY_TIMEOUT_S,
                                                  isolation_level=None)
                version = self.connection.execute("PRAGMA user_version").fetchone()[0]
                break
            except sqlite3.OperationalError:
                with contextlib.suppress(Exception):
                    self.connection.close()
            except sqlite3.DatabaseError as exc:
                self.connection.close()
                raise StoreError(f"{self.path} is not a usable results database ({exc}); "
                                 f"move it away (deep500 starts a new one) or give "
                                 f"another with --db") from None
        else:
            return False  # the writable path says what is wrong
        if version == 0:
            self.connection.close()
            return False
        try:
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path} has schema version {version}, written by a "
                                 f"newer Deep500 (this one reads version {SCHEMA_VERSION}); "
                                 f"upgrade Deep500 or give another database with --db")
            self.connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            self._check_tables()
        except BaseException:
            self.connection.close()
            raise
        return True

    def _prepare(self) -> None:
        c = self.connection
        c.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        c.execute("PRAGMA foreign_keys = ON")
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            self._check_tables()
            return
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema version {version}, written by a newer "
                             f"Deep500 (this one reads version {SCHEMA_VERSION}); upgrade "
                             f"Deep500 or give another database with --db")
        c.execute("PRAGMA journal_mode = WAL")  # persistent: set once, at creation
        c.execute("BEGIN IMMEDIATE")
        try:
            # another process may have created it while this one waited for the lock
            if c.execute("PRAGMA user_version").fetchone()[0] == 0:
                tables = c.execute("SELECT name FROM sqlite_master WHERE type='table'")
                if tables.fetchall():
                    raise StoreError(f"{self.path} is an SQLite database but not Deep500's "
                                     f"(it has tables and no schema version); give another "
                                     f"with --db")
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        c.execute(statement)
                c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            c.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def _check_tables(self) -> None:
        """Raise StoreError unless the tables and columns of :data:`_SCHEMA` are there:
        another program's SQLite file may carry the same ``user_version``."""
        missing = []
        for table, columns in _SCHEMA_COLUMNS.items():
            found = {row[1] for row in self.connection.execute(
                f"PRAGMA table_info({table})")}
            missing += [f"{table}.{c}" for c in columns if c not in found]
        if missing:
            shown = ", ".join(missing[:4]) + (", ..." if len(missing) > 4 else "")
            raise StoreError(f"{self.path} is an SQLite database with schema version "
                             f"{SCHEMA_VERSION} but not Deep500's (it lacks {shown}); "
                             f"give another with --db or $DEEP500_DB")

    def close(self) -> None:
        self.connection.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- writing ---------------------------------------------------------------------

    def ingest(self, folder: str) -> int:
        """Store the run in ``folder`` and return its id; a folder stored before keeps
        its id and its rows are replaced by what the folder holds now (idempotent).
        Raises StoreError when ``folder`` is not a readable run folder."""
        from deep500.results.files import (RunFolderError, check_run_folder,
                                            iter_checked_records, read_manifest)
        path = os.path.realpath(folder)
        try:
            check_run_folder(path, records=False)
            manifest = read_manifest(path)
            # a last line cut by a crash is left out, as the report leaves it out
            records = list(iter_checked_records(path))
        except RunFolderError as exc:
            raise StoreError(str(exc)) from None
        revisions = mapping(manifest.get("git_revision"))
        hardware = mapping(manifest.get("hardware"))
        recipe = mapping(manifest.get("recipe"))
        row = {"folder": path, "recipe": column(recipe.get("name")),
               "experiment": column(recipe.get("experiment")),
               "started": column(manifest.get("started")),
               "finished": column(manifest.get("finished")),
               "status": column(manifest.get("status")),
               "git_revision": column(revisions.get("working_directory")
                                      or revisions.get("deep500")),
               "deep500_revision": column(revisions.get("deep500")),
               "hostname": column(hardware.get("hostname")),
               "cpu": column(hardware.get("cpu_model")),
               "configurations": len({(column(r.get("session", 0)), r.get("index"))
                                      for r in records}),
               "records": len(records), "ingested": _now(),
               "manifest": json.dumps(manifest, default=str)}
        if row["started"] is None:
            row["started"] = datetime.datetime.fromtimestamp(
                os.path.getmtime(path)).astimezone().isoformat()
        c = self.connection
        c.execute("BEGIN IMMEDIATE")
        try:
            found = c.execute("SELECT id FROM runs WHERE folder = ?", (path,)).fetchone()
            if found:
                run_id = found[0]
                c.execute("DELETE FROM samples WHERE record_id IN "
                          "(SELECT id FROM records WHERE run_id = ?)", (run_id,))
                c.execute("DELETE FROM records WHERE run_id = ?", (run_id,))
                c.execute("UPDATE runs SET " + ", ".join(f"{k} = :{k}" for k in row) +
                          " WHERE id = :id", {**row, "id": run_id})
            else:
                run_id = c.execute(
                    f"INSERT INTO runs ({', '.join(row)}) VALUES "
                    f"({', '.join(':' + k for k in row)})", row).lastrowid
            for position, record in enumerate(records):
                self._insert_record(run_id, position, record)
            c.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            self._rollback()
            raise StoreError(f"{self.path}: the run in {path} was not stored: "
                             f"{storage_problem(exc)}") from None
        except BaseException:
            self._rollback()
            raise
        return run_id

    def _rollback(self) -> None:
        """Roll the open transaction back; SQLite has already done so when a write
        failed for want of space (no transaction is left to roll back), and that
        must not hide the error that ended it."""
        try:
            self.connection.execute("ROLLBACK")
        except sqlite3.OperationalError:
            pass

    def _insert_record(self, run_id: int, position: int, record: dict) -> None:
        configuration = record.get("configuration") or {}
        measured = timing(record) if record.get("kind") == "measurement" else None
        values = {"run_id": run_id, "position": position, "idx": record.get("index"),
                  "session": column(record.get("session", 0) or 0),
                  "rank": column(record.get("rank", 0) or 0),
                  "kind": record.get("kind"), "level": record.get("level"),
                  "experiment": column(record.get("experiment")),
                  "label": column(record.get("label")),
                  "configuration": json.dumps(configuration, default=str),
                  "config_key": configuration_key(configuration),
                  "metric": measured and measured["metric"],
                  "median": measured and measured["median"],
                  "ci_low": measured and measured["ci_low"],
                  "ci_high": measured and measured["ci_high"],
                  "unit": measured and measured["unit"],
                  "n": measured and len(measured["samples"]),
                  "record": json.dumps(record, default=str)}
        record_id = self.connection.execute(
            f"INSERT INTO records ({', '.join(values)}) VALUES "
            f"({', '.join(':' + k for k in values)})", values).lastrowid
        if measured:
            self.connection.execute(
                'INSERT INTO samples (record_id, metric, n, "values") VALUES (?, ?, ?, ?)',
                (record_id, measured["metric"], len(measured["samples"]),
                 json.dumps(measured["samples"])))

    # -- reading ---------------------------------------------------------------------

    def runs(self) -> list[dict]:
        """Every stored run, oldest first (by start time, then id)."""
        cursor = self.connection.execute(
            "SELECT id, folder, recipe, experiment, started, finished, status, git_revision, "
            "deep500_revision, hostname, cpu, configurations, records, ingested FROM runs "
            "ORDER BY started, id")
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]

    def run(self, run_id: int) -> dict:
        """The run with id ``run_id`` (a negative id counts from the latest: -1 is the
        most recent run); StoreError when there is none."""
        runs = self.runs()
        if run_id < 0:
            if -run_id > len(runs):
                raise StoreError(f"run {run_id}: {self.path} holds {len(runs)} run(s); "
                                 f"'deep500 runs' lists them")
            return runs[run_id]
        for run in runs:
            if run["id"] == run_id:
                return run
        raise StoreError(f"no run with id {run_id} in {self.path}; 'deep500 runs "
                         f"--db {self.path}' lists the stored runs")

    def manifest(self, run_id: int) -> dict:
        row = self.connection.execute("SELECT manifest FROM runs WHERE id = ?",
                                      (run_id,)).fetchone()
        return json.loads(row[0]) if row else {}

    def records(self, run_id: int) -> list[dict]:
        """The run's records as written to ``results.jsonl``, in order."""
        cursor = self.connection.execute(
            "SELECT record FROM records WHERE run_id = ? ORDER BY position", (run_id,))
        return [json.loads(row[0]) for row in cursor.fetchall()]

    def measurements(self, config_keys: list[str] | None = None, rank: int = 0) -> list[dict]:
        """Measurement rows (joined with their run) of rank ``rank``, optionally only
        those whose configuration key is in ``config_keys``, with their samples."""
        query = ("SELECT r.id, r.run_id, r.idx, r.session, r.label, r.configuration, "
                 "r.config_key, r.metric, r.median, r.ci_low, r.ci_high, r.unit, r.n, "
                 "r.record, s.\"values\", u.started, u.git_revision, u.folder, u.recipe "
                 "FROM records r JOIN runs u ON u.id = r.run_id "
                 "LEFT JOIN samples s ON s.record_id = r.id "
                 "WHERE r.kind = 'measurement' AND r.rank = ?")
        parameters: list = [rank]
        if config_keys is not None:
            query += f" AND r.config_key IN ({', '.join('?' * len(config_keys))})"
            parameters += list(config_keys)
        cursor = self.connection.execute(query + " ORDER BY u.started, u.id, r.position",
                                         parameters)
        names = [d[0] for d in cursor.description]
        rows = []
        for row in cursor.fetchall():
            item = dict(zip(names, row))
            item["configuration"] = json.loads(item["configuration"])
            item["record"] = json.loads(item["record"])
            item["samples"] = json.loads(item.pop("values")) if item["values"] else []
            rows.append(item)
        return rows


def store_run(folder: str, database: str | None = None) -> int:
    """Ingest the run folder ``folder`` into ``database`` (default :func:`default_path`)
    and return its run id. Raises StoreError (or sqlite3.Error) on failure."""
    with Database(database) as db:
        return db.ingest(folder)


def store_run_or_warn(folder: str, database: str | None = None) -> int | None:
    """:func:`store_run` for the end of ``deep500 run``: a failure to store warns on
    stderr and returns None; the run folder on disk is untouched either way."""
    import sys
    try:
        return store_run(folder, database)
    except (Deep500Error, sqlite3.Error, OSError) as exc:
        sys.stderr.write(f"deep500: warning: the run in {folder} was not stored in the "
                         f"results database {database or default_path()} ({exc}); its "
                         f"folder is complete: store it later with 'deep500 runs --add "
                         f"{folder}'\n")
        return None
