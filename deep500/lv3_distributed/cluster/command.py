"""``deep500 cluster``: run any program in an emulated cluster, list the clusters of
this host, remove the ones a killed launcher left."""
from __future__ import annotations

import sys

from deep500.lv3_distributed.cluster import commands, leftovers
from deep500.lv3_distributed.cluster.session import emulated_cluster
from deep500.lv3_distributed.cluster.spec import parse_cluster
from deep500.utils.errors import Deep500Error


def _megabytes(count: int) -> str:
    return f"{count / 1e6:.3f} MB"


def link_summary(before: dict, after: dict) -> str:
    """What crossed each node's link between two ``EmulatedCluster.counters()``."""
    parts = []
    for index, node in enumerate(after):
        sent = after[node]["tx_bytes"] - before[node]["tx_bytes"]
        received = after[node]["rx_bytes"] - before[node]["rx_bytes"]
        parts.append(f"node{index} sent {_megabytes(sent)}, received {_megabytes(received)}")
    return "; ".join(parts)


def exec_in_cluster(cluster_text: str, program: list, quiet: bool = False) -> int:
    """Run ``program`` (e.g. ``mpirun -np 2 python my.py``) in the emulated cluster
    ``cluster_text`` describes and return its exit status; the bytes that crossed each
    node's link are printed to stderr after it (unless ``quiet``)."""
    if program and program[0] == "--":
        program = program[1:]
    if not program:
        raise Deep500Error("deep500 cluster exec: give the program to run after '--', "
                           "e.g. deep500 cluster exec --cluster nodes=2,rate=1gbit -- "
                           "mpirun -np 2 python my_program.py")
    spec = parse_cluster(cluster_text)
    with emulated_cluster(spec, progress=not quiet) as cluster:
        before = cluster.counters()
        status = cluster.run(program)
        if not quiet:
            print(f"deep500 cluster: exit status {status}; links: "
                  f"{link_summary(before, cluster.counters())}", file=sys.stderr)
    return status


def cleanup(quiet: bool = False) -> int:
    """Remove every emulated cluster whose launcher is gone; say what was removed and
    which clusters still run."""
    commands.require_privileges()
    removed = leftovers.remove_leftovers()
    if not quiet:
        print(f"removed {len(removed)} namespace(s) of ended clusters"
              + (f": {', '.join(removed)}" if removed else ""))
        for name, pid in leftovers.live_clusters().items():
            print(f"kept {name}: its launcher (pid {pid}) still runs")
    return 0


def status() -> int:
    """List the emulated clusters on this host."""
    live = leftovers.live_clusters()
    owned = leftovers.owned_clusters()
    if not owned:
        print("no emulated cluster on this host")
    for name, namespaces in owned.items():
        state = f"running (launcher pid {live[name]})" if name in live else \
            "left over (its launcher is gone; deep500 cluster --cleanup removes it)"
        print(f"{name}: {state}; namespaces {', '.join(sorted(namespaces))}")
    return 0
