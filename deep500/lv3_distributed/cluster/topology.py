"""Building and removing the namespaces and links of one emulated cluster.

``mode="nodes"``: a switch namespace holding a Linux bridge (``br0``, the address
``127.10.0.254`` that mpirun listens on), and per node a namespace whose ``eth0`` is one
end of a veth pair; the other end is a port of the bridge. Each end has a token bucket
(tc-tbf(8)) at the link rate, so a node sends and receives at the rate at once, as a
full-duplex NIC does; with ``latency`` (and netem in the kernel) the node's egress
delays every packet first. Node ``i`` is ``127.10.0.<i+1>``: loopback-range
addresses, which no packet outside the host may carry (RFC 1122 3.2.1.3), and which
exist only in these namespaces (``route_localnet`` lets them leave ``lo``). Every link
has the spec's MTU (1500, or e.g. 9000 for jumbo frames) and every namespace the
spec's TCP congestion control where it names one. A node's TCP segmentation-offload
packets are no larger than its bucket (``gso_max_size``, ``spec.segment_bytes``), so
tbf passes them whole instead of cutting them into frames on the cores.

``mode="loopback"``: one namespace; every rank runs in it and its ``lo`` (its MTU set
to the spec's, by default Ethernet's 1500 bytes) carries one token bucket that all
traffic shares.
"""
from __future__ import annotations

import dataclasses

from deep500.lv3_distributed.cluster import commands
from deep500.lv3_distributed.cluster.spec import ClusterSpec, segment_bytes
from deep500.utils.errors import Deep500Error

PREFIX = "d5c"
SUBNET = "127.10.0"
SWITCH_ADDRESS = f"{SUBNET}.254"
NODE_DEVICE = "eth0"
BRIDGE = "br0"
_QUEUE_SECONDS = 0.2  # tbf's queue, in time at the rate: deep enough that TCP never drops


def node_address(index: int) -> str:
    return f"{SUBNET}.{index + 1}"


@dataclasses.dataclass
class Topology:
    """The namespaces of one cluster, by name: ``switch`` (None in loopback mode) and
    one per node; ``entry`` is where mpirun runs."""
    name: str
    spec: ClusterSpec
    switch: str | None
    nodes: list

    @property
    def entry(self) -> str:
        return self.switch or self.nodes[0]

    @property
    def namespaces(self) -> list:
        return ([self.switch] if self.switch else []) + list(self.nodes)

    def node_device(self) -> str:
        return "lo" if self.switch is None else NODE_DEVICE


def plan(name: str, spec: ClusterSpec) -> Topology:
    if spec.mode == "loopback":
        return Topology(name, spec, None, [f"{name}n0"])
    return Topology(name, spec, f"{name}s", [f"{name}n{i}" for i in range(spec.nodes)])


def _shape(namespace: str, device: str, spec: ClusterSpec, delay: bool) -> None:
    """The link's egress on ``device``: a token bucket at the rate, behind netem's
    delay when ``delay``."""
    rate = f"{spec.rate_bits:.0f}bit"
    limit = max(spec.burst_bytes + 64 * 1024, int(spec.rate_bytes * _QUEUE_SECONDS))
    bucket = ["tbf", "rate", rate, "burst", str(spec.burst_bytes), "limit", str(limit)]
    if not delay:
        commands.tc("qdisc", "add", "dev", device, "root", *bucket, namespace=namespace)
        return
    commands.tc("qdisc", "add", "dev", device, "root", "handle", "1:", "netem", "delay",
                f"{spec.latency_seconds * 1e6:.0f}us", namespace=namespace)
    commands.tc("qdisc", "add", "dev", device, "parent", "1:1", "handle", "10:", *bucket,
                namespace=namespace)


def _segment_size(spec: ClusterSpec) -> list:
    """``ip link`` arguments that keep a node's offloaded TCP packets within its bucket
    (``spec.segment_bytes``: tbf would cut larger ones into frames in software)."""
    return ["gso_max_size", str(segment_bytes(spec.burst_bytes, spec.mtu))]


def _check_delay(topology: Topology) -> bool:
    if not topology.spec.latency_seconds:
        return False
    if not commands.qdisc_available("netem", topology.nodes[0]):
        raise Deep500Error(
            f"cluster latency={topology.spec.latency_seconds * 1e3:g}ms adds a one-way "
            f"delay with the netem qdisc, which this kernel lacks (tc: 'Specified qdisc "
            f"kind is unknown'; load it with 'modprobe sch_netem' where the kernel has "
            f"the module). Leave latency out: the link then has the rate's own delay "
            f"and the TCP stack's")
    return True


def _check_tcp(spec: ClusterSpec) -> None:
    """Deep500Error unless a namespace may use ``spec.tcp``: outside the host's own
    namespace Linux lets a namespace choose only from
    ``net.ipv4.tcp_allowed_congestion_control``, a host-wide setting."""
    if spec.tcp is None:
        return  # the host's own default needs no permission
    allowed = commands.allowed_congestion_controls()
    if allowed is not None and spec.tcp not in allowed:
        raise Deep500Error(
            f"cluster tcp={spec.tcp}: this host lets network namespaces use only "
            f"{', '.join(allowed) or 'none'} (sysctl net.ipv4."
            f"tcp_allowed_congestion_control). Give one of those, or allow it for the "
            f"whole host: sysctl -w net.ipv4.tcp_allowed_congestion_control=\"{' '.join(allowed)} "
            f"{spec.tcp}\" (after 'modprobe tcp_{spec.tcp}' where it is a module)")


def build(topology: Topology) -> None:
    """Create every namespace, link and qdisc of ``topology``; raise Deep500Error on
    the first command that fails (the caller removes what was made)."""
    _check_tcp(topology.spec)
    for namespace in topology.namespaces:
        commands.ip("netns", "add", namespace)
        commands.ip("link", "set", "lo", "up", namespace=namespace)
        if topology.spec.tcp:
            commands.sysctl(namespace, f"net.ipv4.tcp_congestion_control={topology.spec.tcp}")
    delay = _check_delay(topology)
    if topology.switch is None:
        # An Ethernet frame on lo too: with lo's 64 KiB MTU a segment can exceed the
        # bucket, which tbf drops every time it is retransmitted (the run hangs).
        commands.ip("link", "set", "lo", "mtu", str(topology.spec.mtu),
                    *_segment_size(topology.spec), namespace=topology.nodes[0])
        _shape(topology.nodes[0], "lo", topology.spec, delay)
        return
    switch = topology.switch
    commands.ip("link", "add", BRIDGE, "type", "bridge", namespace=switch)
    commands.ip("addr", "add", f"{SWITCH_ADDRESS}/24", "dev", BRIDGE, namespace=switch)
    commands.ip("link", "set", BRIDGE, "up", namespace=switch)
    commands.sysctl(switch, "net.ipv4.conf.all.route_localnet=1",
                    f"net.ipv4.conf.{BRIDGE}.route_localnet=1")
    for index, node in enumerate(topology.nodes):
        port = f"node{index}"
        commands.ip("link", "add", NODE_DEVICE, "netns", node, "type", "veth", "peer",
                    "name", port, "netns", switch)
        commands.ip("addr", "add", f"{node_address(index)}/24", "dev", NODE_DEVICE,
                    namespace=node)
        commands.ip("link", "set", NODE_DEVICE, "mtu", str(topology.spec.mtu),
                    *_segment_size(topology.spec), "up", namespace=node)
        commands.ip("link", "set", port, "mtu", str(topology.spec.mtu), "master", BRIDGE,
                    "up", namespace=switch)
        commands.sysctl(node, "net.ipv4.conf.all.route_localnet=1",
                        f"net.ipv4.conf.{NODE_DEVICE}.route_localnet=1")
        _shape(node, NODE_DEVICE, topology.spec, delay)
        _shape(switch, port, topology.spec, False)


def remove_namespace(namespace: str) -> None:
    """Kill what still runs in ``namespace`` (ranks a killed launcher left behind),
    then delete it; its veth ends and qdiscs go with it. Errors are ignored: the
    namespace may already be gone."""
    import os
    import signal
    for pid in commands.namespace_pids(namespace):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    commands.ip("netns", "del", namespace, check=False)


def teardown(topology: Topology) -> None:
    # Nodes first: their veth pairs leave the bridge before the switch goes.
    for namespace in reversed(topology.namespaces):
        remove_namespace(namespace)
