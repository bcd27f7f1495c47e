"""What ``deep500 run`` reports when a run ends: its folder, the counts of what was
measured, failed, missed a threshold and was measured under interference (as the report
counts them), the reports written and where the run was stored."""
from __future__ import annotations

from dataclasses import dataclass

from deep500.report.records import Counts, count_outcomes

# What the counts read of a record
_COUNTED = ("kind", "index", "session", "passed")


@dataclass
class RunSummary:
    output_dir: str
    measurements: int
    errors: int
    acceptance_failures: int
    report_paths: list
    run_id: int | None = None  # in the results database, when stored
    counts: Counts | None = None  # as the report counts them (rank 0)
    # A rank grid whose mpirun job for some rank count failed: the exit status that
    # deep500 run gives (that job's; 124 for a timeout), after the report is written.
    exit_status: int | None = None

    @property
    def ok(self) -> bool:
        return self.errors == 0 and self.acceptance_failures == 0

    def sentence(self) -> str:
        """The counts line ``deep500 run`` prints, the report's own first line."""
        if self.counts is not None:
            return self.counts.sentence()
        return (f"{self.measurements} configurations measured, {self.errors} failed to "
                f"run, {self.acceptance_failures} missed an acceptance threshold")

    def interference_sentence(self) -> str | None:
        """How many measured configurations were measured under interference (rank 0;
        :meth:`deep500.report.records.Counts.interference_sentence`)."""
        return self.counts.interference_sentence() if self.counts is not None else None


def counted(record: dict) -> dict:
    """The part of a record on disk that the counts read (kept per record as written)."""
    parts = {key: record.get(key) for key in _COUNTED}
    telemetry = record.get("telemetry")
    if isinstance(telemetry, dict):  # watched; whether it saw interference
        parts["telemetry"] = {"interfered": bool(telemetry.get("interfered"))}
    return parts


def summarize(output_dir: str, written: list[dict], reports: list, run_id: int | None,
              exit_status: int | None = None) -> RunSummary:
    """The summary of a run whose records on disk are ``written`` (:func:`counted`
    parts suffice), with one definition of the counts for the command line and the
    report, per configuration: skipped ones are not "measured"."""
    counts = count_outcomes([counted(r) for r in written])
    return RunSummary(output_dir, counts.measured, counts.failed,
                      counts.acceptance_failures, reports, run_id, counts, exit_status)
