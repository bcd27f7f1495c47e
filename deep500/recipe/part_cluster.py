"""One emulated cluster per part of a rank grid: a scaling study on the emulated
cluster (``recipes/scaling.yaml``: ``cluster:`` and ``mutable: {ranks: [1, 2, 4]}``)
runs each rank count on as many nodes, one rank per node, so that every point
communicates over the links as a cluster of that size would.

``deep500 run`` (``deep500.cli``) enters :func:`clusters_per_part` instead of building
one cluster for the whole run when the recipe names more than one rank count; the grid
(:mod:`deep500.recipe.rank_grid`) then wraps each part's ``mpirun`` in
:func:`part_cluster`, which builds a cluster of ``nodes = ranks`` (``ppn = 1``) with the
spec's rate, burst and latency, and removes it when the part ends, however it ends. The
``nodes`` and ``ppn`` the spec gives are replaced by the part's (``mode=loopback`` is
one namespace whatever the ranks, and is kept). One rank gets a one-node cluster: its
rank runs in a node's namespace under the same transport as the others (MPICH ch4:ofi
over TCP; nothing crosses its link), so the 1-rank point that speedups are relative
to differs from the others only in the number of nodes.

A recipe with one rank count (several MPICH algorithms on 2 ranks, say) runs all its
parts in the one cluster the spec describes, as before.
"""
from __future__ import annotations

import contextlib
import dataclasses

from deep500.lv3_distributed.cluster import (ClusterSpec, emulated_cluster,
                                             require_privileges)
from deep500.lv3_distributed.cluster.session import TRANSPORT_TEXT

_per_part: list = []  # (spec, progress) of the innermost clusters_per_part block


@contextlib.contextmanager
def clusters_per_part(spec: ClusterSpec, progress: bool = False):
    """Within the block, every part of a rank grid runs in a cluster of its own,
    built from ``spec`` (module docstring). Raises as building a cluster would where
    this process may not (root, ``ip``, ``tc``), before any part runs."""
    require_privileges()
    _per_part.append((spec, progress))
    try:
        yield spec
    finally:
        _per_part.remove((spec, progress))


def per_part_spec() -> ClusterSpec | None:
    """The spec of the innermost :func:`clusters_per_part` block, or None."""
    return _per_part[-1][0] if _per_part else None


def spec_for(spec: ClusterSpec, ranks: int) -> ClusterSpec:
    """``spec`` as the cluster of a part on ``ranks`` ranks: ``ranks`` nodes of one
    rank each (a loopback-mode spec unchanged)."""
    if spec.mode != "nodes":
        return spec
    return dataclasses.replace(spec, nodes=int(ranks), ranks_per_node=1)


def part_cluster(ranks: int):
    """The context a part on ``ranks`` ranks runs its ``mpirun`` in: its own emulated
    cluster inside :func:`clusters_per_part`, else nothing (the run's cluster, if any,
    is already running)."""
    if not _per_part:
        return contextlib.nullcontext()
    spec, progress = _per_part[-1]
    return emulated_cluster(spec_for(spec, ranks), progress=progress)


def grid_description(spec: ClusterSpec, counts: list) -> dict:
    """The manifest's ``cluster`` for a grid whose parts each start a cluster: what
    they share; each part's own cluster is listed with the part
    (``rank_grid.parts[i].cluster``), and its namespaces are added here as it runs."""
    largest = spec_for(spec, max(counts))
    links = largest.describe().split("; ", 1)[-1]
    where = ("one namespace, its loopback the link" if spec.mode != "nodes" else
             f"one cluster per rank count, as many nodes as ranks "
             f"({', '.join(map(str, counts))}), one rank per node, on a switch")
    return {"emulated": True, "per_part": True, **largest.as_dict(),
            "nodes": list(counts), "text": largest.text().replace(
                f"nodes={largest.nodes}", "nodes=<ranks>"),
            "summary": f"{where}; {links}", "namespaces": [],
            "transport": TRANSPORT_TEXT}
