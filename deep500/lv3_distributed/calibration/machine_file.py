"""``calibrate``: every phase measured (or read back) and written as a machine file
(``deep500.utils.machine``), rank 0 writing.

Each phase appends its samples to the samples file beside the machine file as it
measures them, so that a calibration stopped halfway leaves what it measured on disk;
the YAML is written at the end, after it was checked to load.
"""
from __future__ import annotations

import datetime
import os
import socket

from deep500.lv3_distributed.calibration import coherence, software
from deep500.lv3_distributed.calibration.overlap import overlap_section
from deep500.lv3_distributed.calibration.compute import (compute_phase, memory_phase,
                                                         reduction_phase)
from deep500.lv3_distributed.calibration.hockney import network_section
from deep500.lv3_distributed.calibration.network_phases import (NetworkSamples,
                                                                measure_network)
from deep500.lv3_distributed.calibration.plan import Plan
from deep500.lv3_distributed.calibration.progress import progress_bar
from deep500.lv3_distributed.calibration.samples import SampleLog, samples_path_for
from deep500.lv3_distributed.calibration.wire_casts import measure_wire_casts
from deep500.utils.machine import machine_from_dict, save_machine

NO_NETWORK = {"skipped": "calibrated with --no-network: no ping-pong; re-run "
                         "'deep500 calibrate --np 2' to measure it"}


def _header(samples_path: str, quick: bool) -> dict:
    """Name and source; the network of an emulated cluster (``--cluster``) is named,
    since its numbers are the emulated link's, not this host's."""
    from deep500.lv3_distributed.cluster import current_description
    host = socket.gethostname()
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')
    cluster = current_description()
    link = (f"; network: emulated cluster, {cluster['summary']} (--cluster "
            f"{cluster['text']})" if cluster else "")
    return {"name": host + (" (emulated cluster)" if cluster else ""),
            "source": (f"calibrated on host {host} at {now} by deep500 calibrate"
                       f"{' --quick' if quick else ''}{link}"),
            "samples_file": os.path.basename(samples_path)}


def _network(measured: NetworkSamples) -> dict:
    """The ``network`` section: the Hockney fits (link-bound on an emulated cluster:
    ``hockney``), and δ where it was measured."""
    from deep500.lv3_distributed.cluster import current_description
    section = network_section(measured.pingpong, measured.exchange,
                              link_bound=current_description() is not None)
    if measured.coherence and measured.coherence.get("sum"):
        section["coherence"] = coherence.coherence_section(measured.coherence)
    return section


def _software(data: dict, out: str, plan: Plan, log: SampleLog, progress: bool,
              measured: NetworkSamples | None) -> dict:
    """The ``software`` section: the fusion copy, the wire casts, and with the network
    phases the per-call overheads o, the in-context ratios, priced on the machine so
    far, and the overlap stretches."""
    bar = progress_bar(1, "fusion copy", progress)
    fusion = software.measure_fusion_copy(plan.repeats, log)
    bar.close()
    bar = progress_bar(1, "wire casts", progress)
    casts = measure_wire_casts(plan.repeats, log)
    bar.close()
    section = {**software.software_section(
        measured.allreduce if measured else None,
        measured.allreduce_ranks if measured else None,
        machine_from_dict(data, path=out), fusion,
        measured.in_context if measured else None), "wire_casts": casts}
    overlap = (overlap_section(measured.overlap, measured.allreduce_ranks)
               if measured and measured.overlap and measured.allreduce_ranks else None)
    if overlap:
        section["overlap"] = overlap
    return section


def calibrate(out: str, comm=None, network: bool = True, quick: bool = False,
              progress: bool = True,
              measured: NetworkSamples | None = None) -> dict | None:
    """Measure every phase and write the machine file ``out`` (rank 0; returns its
    content). ``comm``: a communicator of two or more ranks for the network phases, or
    ``measured``: their samples, measured elsewhere (``read_network_samples``).
    ``network=False`` skips the network part (the file then says so, and network
    predictions refuse to use it) and the allreduce overheads."""
    plan = Plan.make(quick)
    rank = comm.Get_rank() if comm is not None else 0
    samples_path = samples_path_for(out)
    log = SampleLog(samples_path if rank == 0 else None)
    if rank == 0 and os.path.exists(samples_path) and measured is None:
        open(samples_path, "w").close()  # a new calibration starts a new samples file
    try:
        if network and measured is None and comm is not None:
            measured = measure_network(comm, plan, log, progress)
        if rank != 0:
            return None
        data = _header(samples_path, quick)
        data["network"] = _network(measured) if network else NO_NETWORK
        data["reduction"] = reduction_phase(plan, log, progress)
        data["memory"] = memory_phase(plan, log, progress)
        data["compute"] = compute_phase(plan, log, progress)
        section = _software(data, out, plan, log, progress, measured if network else None)
        if section:
            data["software"] = section
        machine_from_dict(data, path=out)  # the file written must load
        save_machine(data, out)
        return data
    finally:
        log.close()
