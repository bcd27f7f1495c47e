"""An emulated cluster for the length of a ``with`` block, and running MPI jobs in it.

``with emulated_cluster(spec) as cluster:`` builds the namespaces and links
(``topology``), and every ``mpirun`` that Deep500 starts inside the block
(``run_under_mpirun``: ``deep500 run --np``, a recipe's rank grid, ``deep500
calibrate``) runs in it; ``cluster.run(argv)`` runs any command there (``deep500
cluster exec``). The block always removes what it built: on success, on an error and
on SIGINT/SIGTERM (raised as ``Interrupted`` under ``signals_raise``); after SIGKILL,
the next start removes it (``leftovers``).

How an MPI job reaches the nodes. mpirun (MPICH's Hydra) runs in the switch namespace
and reads its options from the environment (Hydra's ``HYDRA_*`` variables): a hostfile
naming each node by its address, and an "ssh" launcher that is a script of ours
(``HYDRA_LAUNCHER_EXEC``) starting each node's proxy inside that node's namespace
(``ip netns exec``, and a UTS namespace whose host name is the node's). Hydra thus
knows which ranks share a node: those use shared memory, all others MPICH's ch4:ofi
netmod with libfabric's tcp provider on ``eth0``, across the links. (MPICH's default
netmod here, UCX, finds the other ranks on the same host and bypasses the links
through shared memory: the pitfall docs/cluster_emulation.md measures.)
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import sys
import tempfile

from deep500.lv3_distributed.child_process import run_child
from deep500.lv3_distributed.cluster import commands, leftovers, topology
from deep500.lv3_distributed.cluster.spec import ClusterSpec

ENVIRONMENT_VARIABLE = "DEEP500_CLUSTER"  # the cluster's description, in every rank
# The transport that crosses the links: ch4:ofi over libfabric's tcp provider.
TRANSPORT = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp"}
TRANSPORT_TEXT = "MPICH ch4:ofi, libfabric tcp provider"
_active: list = []


def active_cluster():
    """The EmulatedCluster of the innermost ``emulated_cluster`` block, or None."""
    return _active[-1] if _active else None


def cluster_description() -> dict | None:
    """What a rank started in an emulated cluster records of it (its manifest, its
    report's banner), from the environment; None outside one."""
    text = os.environ.get(ENVIRONMENT_VARIABLE)
    if not text:
        return None
    try:
        description = json.loads(text)
    except ValueError:
        return None
    return description if isinstance(description, dict) else None


def current_description() -> dict | None:
    """The emulated cluster this process runs in (a rank) or launches into (a rank
    grid's launcher inside ``emulated_cluster``), or None."""
    cluster = active_cluster()
    return cluster.description() if cluster is not None else cluster_description()


class EmulatedCluster:
    """The namespaces of a running cluster and how to run a command in it."""

    def __init__(self, spec: ClusterSpec, layout: topology.Topology, folder: str):
        self.spec = spec
        self.topology = layout
        self.folder = folder
        self.hostfile = os.path.join(folder, "hosts")
        self.launcher = os.path.join(folder, "launch-node")
        self.tcp = spec.tcp or commands.congestion_control(layout.nodes[0])

    def description(self) -> dict:
        summary = self.spec.describe() + ("" if self.spec.tcp else
                                          f"; TCP {self.tcp} (the host's default)")
        return {"emulated": True, "name": self.topology.name, **self.spec.as_dict(),
                "tcp_congestion_control": self.tcp,
                "text": self.spec.text(), "summary": summary,
                "namespaces": self.topology.namespaces, "transport": TRANSPORT_TEXT,
                "qdisc": "tbf" + (" + netem" if self.spec.latency_seconds else "")}

    def environment(self, base: dict | None = None) -> dict:
        """``base`` (default this process's environment) with what an MPI job needs to
        run in the cluster. The user's own ``MPIR_CVAR_*``/``FI_*`` settings pass
        through; Deep500 only adds the transport where they name none."""
        environment = dict(os.environ if base is None else base)
        for name, value in TRANSPORT.items():
            environment.setdefault(name, value)
        if self.topology.switch is None:
            environment.setdefault("MPIR_CVAR_NOLOCAL", "1")
            environment.setdefault("FI_TCP_IFACE", "lo")
        else:
            environment.update({"HYDRA_HOST_FILE": self.hostfile,
                                "HYDRA_LAUNCHER": "ssh",
                                "HYDRA_LAUNCHER_EXEC": self.launcher,
                                "HYDRA_IFACE": topology.BRIDGE})
            environment.setdefault("FI_TCP_IFACE", topology.NODE_DEVICE)
        environment[ENVIRONMENT_VARIABLE] = json.dumps(self.description())
        changed = {n: environment[n] for n, v in TRANSPORT.items() if environment[n] != v}
        if changed:
            given = ", ".join(f"{n}={v}" for n, v in changed.items())
            print(f"deep500 cluster: warning: {given} from the environment replaces "
                  f"the transport across the links "
                  f"({TRANSPORT_TEXT}); MPICH's UCX and shared-memory transports reach the "
                  f"other ranks of this host without crossing the links",
                  file=sys.stderr, flush=True)
        return environment

    def command(self, argv) -> list:
        """``argv`` as run in the cluster's entry namespace (where mpirun starts)."""
        return ["ip", "netns", "exec", self.topology.entry, *argv]

    def counters(self) -> dict:
        """``{node namespace: {tx_bytes, rx_bytes, ...}}`` of each node's link."""
        device = self.topology.node_device()
        return {node: commands.link_counters(node, device) for node in self.topology.nodes}

    def run(self, argv, environment: dict | None = None) -> int:
        """Run ``argv`` in the cluster, wait and return its exit status (128 + signal
        when a signal ended it). SIGINT/SIGTERM here are passed on to it."""
        return run_child(self.command(argv), self.environment(environment), tied=True)

    def write_launch_files(self) -> None:
        """The hostfile (each node's address, ``ppn`` slots) and the launcher script
        that Hydra calls as ``launch-node [-x] HOST COMMAND...``."""
        spec = self.spec
        with open(self.hostfile, "w", encoding="ascii") as handle:
            for index in range(len(self.topology.nodes)):
                handle.write(f"{topology.node_address(index)}:{spec.ranks_per_node}\n")
        cases = "\n".join(
            f"  {topology.node_address(i)}) ns={shlex.quote(node)}; name=node{i};;"
            for i, node in enumerate(self.topology.nodes))
        uts = shutil.which("unshare")
        enter = (f'exec ip netns exec "$ns" {shlex.quote(uts)} --uts /bin/sh -c '
                 f'"hostname $name && exec $*"' if uts else
                 'exec ip netns exec "$ns" /bin/sh -c "$*"')
        script = (f"#!/bin/sh\n# Deep500 emulated cluster {self.topology.name}: Hydra's "
                  f"'ssh' into a node's namespace\nwhile [ \"${{1#-}}\" != \"$1\" ]; do "
                  f"shift; done\nhost=$1; shift\ncase \"$host\" in\n{cases}\n  *) echo "
                  f"\"deep500 cluster: no node $host\" >&2; exit 255;;\nesac\n{enter}\n")
        with open(self.launcher, "w", encoding="ascii") as handle:
            handle.write(script)
        os.chmod(self.launcher, 0o755)


@contextlib.contextmanager
def emulated_cluster(spec: ClusterSpec, progress: bool = False):
    """Build the cluster ``spec`` describes, yield its EmulatedCluster, remove it."""
    from deep500.utils.interrupts import deferred, signals_raise
    commands.require_privileges()
    leftovers.remove_leftovers()
    name = f"{topology.PREFIX}{os.getpid()}"
    layout = topology.plan(name, spec)
    folder = tempfile.mkdtemp(prefix=f"deep500-{name}-")
    with signals_raise():
        try:
            leftovers.write_state(name, layout.namespaces)
            if progress:
                print(f"deep500: emulated cluster {name}: {spec.describe()}",
                      file=sys.stderr, flush=True)
            topology.build(layout)
            cluster = EmulatedCluster(spec, layout, folder)
            cluster.write_launch_files()
            _active.append(cluster)
            try:
                yield cluster
            finally:
                _active.remove(cluster)
        finally:
            with deferred():  # a second signal waits until everything is removed
                topology.teardown(layout)
                leftovers.remove_state(name)
                shutil.rmtree(folder, ignore_errors=True)
