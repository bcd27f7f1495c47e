"""Results on disk: ``results.jsonl`` appended and flushed as each measurement ends (a
crash keeps what was measured) and ``manifest.json`` describing the run."""
from __future__ import annotations

import json
import os

from deep500.utils.metric import to_jsonable

RESULTS_FILE = "results.jsonl"
MANIFEST_FILE = "manifest.json"


class ResultsWriter:
    """Appends one JSON object per line and forces it to disk before returning."""

    def __init__(self, output_dir: str):
        self.path = os.path.join(output_dir, RESULTS_FILE)
        self._handle = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        self._handle.write(json.dumps(to_jsonable(record)) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()


def read_results(output_dir: str) -> list[dict]:
    """Every complete record of a run; a line cut off by a crash is skipped."""
    path = os.path.join(output_dir, RESULTS_FILE)
    records = []
    if not os.path.isfile(path):
        return records
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def write_manifest(output_dir: str, manifest: dict) -> str:
    """Write ``manifest.json`` atomically (a reader never sees half a file)."""
    path = os.path.join(output_dir, MANIFEST_FILE)
    temporary = f"{path}.{os.getpid()}.tmp"   # another rank may write it too
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(to_jsonable(manifest), handle, indent=2)
    os.replace(temporary, path)
    return path


def mark_run_failed(output_dir: str, rank: int, message: str) -> None:
    """Record in the manifest that ``rank`` failed (``message``: its traceback). Called
    by the failing rank just before ``MPI_Abort`` ends every rank, rank 0 included,
    which then never writes its final status; a manifest no longer "running" is left
    as it is."""
    manifest = read_manifest(output_dir)
    if manifest.get("status") != "running":
        return
    lines = message.strip().splitlines()
    manifest.update(status="failed", failure={
        "rank": rank, "error": lines[-1] if lines else message,
        "traceback": "\n".join(lines[-40:]),
        "note": "mpirun ended every rank; results written before the failure are kept"})
    write_manifest(output_dir, manifest)


def read_manifest(output_dir: str) -> dict:
    path = os.path.join(output_dir, MANIFEST_FILE)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
