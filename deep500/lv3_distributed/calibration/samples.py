"""The samples file of a calibration: one JSON line per measurement, written and flushed
as it is measured (so that a calibration stopped halfway leaves what it measured on
disk), read back by phase, and the median summary a machine file keeps of them."""
from __future__ import annotations

import json

import numpy as np

from deep500.utils.statistics import median_ci


class SampleLog:
    """Appends one JSON line per measurement and flushes it at once (writes nothing
    without a path: the ranks other than 0)."""

    def __init__(self, path: str | None):
        self.path = path
        self._file = open(path, "a") if path else None

    def write(self, record: dict) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def samples_path_for(out: str) -> str:
    """The samples file beside the machine file ``out`` (``x.yaml`` -> ``x.samples.jsonl``)."""
    base = out[:-5] if out.endswith(".yaml") else out[:-4] if out.endswith(".yml") else out
    return base + ".samples.jsonl"


def read_sample_records(path: str, phase: str):
    """The records of ``phase`` in a samples file, in order (a line cut by a kill is
    passed over)."""
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("phase") == phase:
                yield record


def read_pingpong_samples(path: str, phase: str = "pingpong") -> dict:
    """{nbytes: samples} from the lines of ``phase`` ("pingpong" or "exchange") of a
    samples file."""
    return {int(r["nbytes"]): r["seconds"] for r in read_sample_records(path, phase)}


def summarize(samples) -> dict:
    """``{value, ci, n}``: the median of ``samples`` and its nonparametric 95% CI
    (``deep500.utils.statistics.median_ci``; Hoefler & Belli, SC'15)."""
    low, high, _ = median_ci(samples)
    return {"value": float(np.median(samples)), "ci": [low, high], "n": len(samples)}
