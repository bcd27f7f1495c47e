"""How a rank of ``deep500 run`` records a run that stops early, before the job ends
(``docs/run_lifecycle.md``): the exception this rank is handling, a configuration that
ran past the recipe's ``timeout`` on this rank, and other ranks whose records rank 0
waited for past it."""
from __future__ import annotations

import sys
import traceback

from deep500.lv3_distributed.mpi_launch import LateRanks, abort_job
from deep500.recipe.manifest import signal_name
from deep500.recipe.watchdog import TIMEOUT_EXIT_STATUS
from deep500.results.files import hold_until_the_job_ends, record_failure
from deep500.results.run_folder import RunFolder


def record_this_failure(output_dir: str, rank: int, comm) -> None:
    """Record the exception being handled on this rank (see
    :func:`deep500.results.files.record_failure`); an interrupt is no error of the
    configuration, only the manifest's ``interrupted``."""
    exc = sys.exc_info()[1]
    try:
        if isinstance(exc, KeyboardInterrupt):
            record_failure(output_dir, rank, str(exc) or "KeyboardInterrupt",
                           status="interrupted",
                           manifest_fields={"signal": signal_name(exc)})
        elif not isinstance(exc, SystemExit) or exc.code not in (None, 0):
            lines = traceback.format_exc().strip().splitlines()
            record_failure(output_dir, rank, f"{type(exc).__name__}: {exc}",
                           traceback_text="\n".join(lines[-40:]),
                           note="mpirun ended every rank; results written before the "
                                "failure are kept" if comm is not None else None)
    except Exception as problem:  # noqa: BLE001 - the failure itself matters more
        sys.stderr.write(f"deep500: rank {rank} could not record its failure: "
                         f"{problem!r}\n")


def late_grace(timeout: float) -> float:
    """How much longer than ``timeout`` rank 0 waits for another rank's records: the
    late rank's own watchdog normally ends the job first, with the better message."""
    return max(2.0, 0.1 * timeout)


def timed_out(output_dir: str, rank: int, comm, timeout: float, header: dict,
              seconds: float, on_end=None) -> None:
    """The watchdog's action on this rank: say which configuration and rank, record it,
    call ``on_end()`` (a single process finishes its run there), end every rank."""
    message = (f"configuration {header['index']} ({header['label']}) did not finish "
               f"within {timeout:g} s on rank {rank}; the recipe's timeout ends every rank. "
               f"Results written before it are kept in {output_dir}")
    sys.stderr.write(f"\ndeep500: timeout: {message}\n")
    try:
        record_failure(output_dir, rank, f"TimeoutError: {message}", status="timed_out",
                       record_fields={"timeout": True, "timeout_s": timeout,
                                      "seconds": round(seconds, 3)})
    except Exception as problem:  # noqa: BLE001 - ending the job matters more
        sys.stderr.write(f"deep500: could not record the timeout: {problem!r}\n")
    hold_until_the_job_ends(output_dir, rank)  # this thread may still write, under it
    if on_end is not None:
        try:
            on_end()
        except Exception as problem:  # noqa: BLE001 - ending the job matters more
            sys.stderr.write(f"deep500: could not finish the run after the timeout: "
                             f"{problem!r}\n")
    abort_job(comm, TIMEOUT_EXIT_STATUS)


def ranks_timed_out(folder: RunFolder, late: LateRanks, header: dict, timeout: float,
                    comm) -> None:
    """Rank 0 waited past the timeout for other ranks' records: keep what arrived,
    record the late ranks' configuration as errors, end every rank."""
    message = (f"configuration {header['index']} ({header['label']}): rank(s) "
               f"{late.missing} did not finish within {timeout:g} s (rank 0 waited "
               f"{timeout + late_grace(timeout):g} s for their results); the recipe's "
               f"timeout ends every rank. Results written before it are kept in "
               f"{folder.path}")
    sys.stderr.write(f"\ndeep500: timeout: {message}\n")
    received = [r for r in late.received if r is not None]
    errors = [{**header, "rank": missing, "kind": "error",
               "error": f"TimeoutError: {message}", "timeout": True, "timeout_s": timeout}
              for missing in late.missing]
    folder.write(received + errors)
    folder.finish("timed_out", failure={"rank": late.missing[0], "error": message,
                                        "index": header["index"],
                                        "configuration": header["label"]})
    hold_until_the_job_ends(folder.path, 0)
    abort_job(comm, TIMEOUT_EXIT_STATUS)
