"""What an emulated cluster is: ``nodes=N,rate=1gbit[,burst=...][,latency=...][,mode=...]
[,ppn=...][,tcp=...][,mtu=...]``
as ``deep500 run/calibrate --cluster`` and ``deep500 cluster exec --cluster`` take it,
and a recipe's ``cluster:`` mapping with the same fields.

Units follow tc(8) ("PARAMETERS"): a rate is ``bit``, ``kbit``, ``mbit``, ``gbit``,
``tbit`` (bits per second, decimal prefixes) or ``bps``, ``kbps``, ``mbps``, ``gbps``
(bytes per second); a size is ``b``, ``kb``/``k``, ``mb``/``m``, ``gb``/``g`` (binary
prefixes, as tc reads them); a time is ``s``, ``ms``, ``us``.
"""
from __future__ import annotations

import dataclasses
import re

from deep500.utils.errors import Deep500Error

MODES = ("nodes", "loopback")
FIELDS = ("nodes", "rate", "burst", "latency", "mode", "ppn", "tcp", "mtu")
#: Ethernet's MTU; ``mtu=9000`` gives jumbo frames, as HPC and data-centre Ethernet
#: runs them (a sixth of the packets, so of the kernel's per-packet work on the cores).
DEFAULT_MTU = 1500
#: An Ethernet frame's header beyond the MTU (tbf counts whole frames).
FRAME_HEADER = 14
#: Linux's largest TCP segment-offload packet (``gso_max_size``'s default).
LARGEST_OFFLOAD = 65536
_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
               "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12}
_SIZE_UNITS = {"b": 1, "k": 1024, "kb": 1024, "m": 1024 ** 2, "mb": 1024 ** 2,
               "g": 1024 ** 3, "gb": 1024 ** 3}
_TIME_UNITS = {"s": 1.0, "sec": 1.0, "ms": 1e-3, "msec": 1e-3, "us": 1e-6, "usec": 1e-6}
_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$")
_EXAMPLE = ("nodes=2,rate=1gbit (optionally burst=256kb, latency=1ms, mode=loopback, ppn=2, "
            "tcp=reno, mtu=9000)")
#: A ``tcp=`` name: the TCP congestion control of the cluster's namespaces; without it they
#: keep the host's default (recorded in the cluster's description). BBR, this host's
#: default, halved a 256 KiB ring allreduce's rate at 1 Gbit/s after one bulk transfer,
#: yet the simulator's sweeps fitted better under it than under Reno
#: (docs/cluster_emulation.md, "TCP congestion control").
_TCP_NAME = re.compile(r"^[a-z][a-z0-9_]{0,15}$")


def _quantity(field: str, text, units: dict, default_unit: str | None) -> float:
    match = _QUANTITY.match(str(text).lower())
    unit = match.group(2) if match else None
    if match is None or (unit or default_unit) not in units:
        raise Deep500Error(f"cluster {field}={text!r}: not a number with one of the units "
                           f"{', '.join(units)}; e.g. {_EXAMPLE}")
    return float(match.group(1)) * units[unit or default_unit]


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """One emulated cluster: ``nodes`` nodes, each joined to a switch by a full-duplex
    link of ``rate_bits`` bit/s (a token bucket of ``burst_bytes``, tc-tbf(8)),
    ``latency_seconds`` of one-way delay added by netem where the kernel has it,
    ``ranks_per_node`` slots per node in the MPI hostfile (Hydra fills them in order),
    ``tcp`` the TCP congestion control of its namespaces (None: the host's default),
    ``mtu`` its links' MTU.
    ``mode="loopback"`` puts every rank in one namespace whose loopback carries the
    link (one token bucket shared by all traffic), the fallback of docs/cluster_emulation.md."""
    nodes: int
    rate_bits: float
    burst_bytes: int
    latency_seconds: float = 0.0
    mode: str = "nodes"
    ranks_per_node: int = 1
    tcp: str | None = None
    mtu: int = DEFAULT_MTU

    def __post_init__(self):
        if not 1 <= self.nodes <= 64:
            raise Deep500Error(f"cluster nodes={self.nodes}: give 1 to 64 nodes")
        if not 1e3 <= self.rate_bits <= 1e12:
            raise Deep500Error(f"cluster rate={self.rate_bits:g} bit/s: give a rate "
                               f"between 1kbit and 1tbit (e.g. rate=1gbit)")
        if not 1600 <= self.burst_bytes <= 1 << 30:
            raise Deep500Error(f"cluster burst={self.burst_bytes} B: give 1600 B (one "
                               f"full frame) to 1gb")
        if not 0 <= self.latency_seconds <= 10:
            raise Deep500Error(f"cluster latency={self.latency_seconds}s: give 0 to 10 s")
        if self.mode not in MODES:
            raise Deep500Error(f"cluster mode={self.mode!r}: one of {', '.join(MODES)}")
        if not 1 <= self.ranks_per_node <= 256:
            raise Deep500Error(f"cluster ppn={self.ranks_per_node}: give 1 to 256")
        if not 1280 <= self.mtu <= 65535:
            raise Deep500Error(f"cluster mtu={self.mtu}: give 1280 to 65535 bytes (1500 is "
                               f"Ethernet's, 9000 jumbo frames)")
        if self.burst_bytes < self.mtu + FRAME_HEADER:
            raise Deep500Error(f"cluster burst={self.burst_bytes} B is smaller than one "
                               f"frame of mtu={self.mtu} ({self.mtu + FRAME_HEADER} B): tbf "
                               f"drops every such frame; give burst >= "
                               f"{self.mtu + FRAME_HEADER}b or leave burst out")
        if self.tcp is not None and not _TCP_NAME.match(self.tcp):
            raise Deep500Error(f"cluster tcp={self.tcp!r}: give a TCP congestion control "
                               f"algorithm's name as sysctl net.ipv4.tcp_congestion_control "
                               f"takes it (e.g. reno, cubic, bbr)")
        if self.mode == "loopback" and self.nodes != 1:
            raise Deep500Error("cluster mode=loopback is one namespace, one node: give "
                               "nodes=1 with it, or mode=nodes for one namespace per node")

    @property
    def rate_bytes(self) -> float:
        return self.rate_bits / 8.0

    def text(self) -> str:
        """The spec as ``--cluster`` takes it (round-trips through parse_cluster)."""
        parts = [f"nodes={self.nodes}", f"rate={self.rate_bits:.0f}bit",
                 f"burst={self.burst_bytes}b"]
        if self.latency_seconds:
            parts.append(f"latency={self.latency_seconds * 1e6:.0f}us")
        if self.mode != "nodes":
            parts.append(f"mode={self.mode}")
        if self.ranks_per_node != 1:
            parts.append(f"ppn={self.ranks_per_node}")
        if self.tcp is not None:
            parts.append(f"tcp={self.tcp}")
        if self.mtu != DEFAULT_MTU:
            parts.append(f"mtu={self.mtu}")
        return ",".join(parts)

    def describe(self) -> str:
        """One line for a banner: ``2 nodes, 1 Gbit/s links (tbf burst 128 KiB)``."""
        rate = self.rate_bits
        shown = next(f"{rate / scale:g} {name}" for scale, name in
                     ((1e12, "Tbit/s"), (1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s"),
                      (1, "bit/s")) if rate >= scale)
        where = ("one namespace, its loopback the link" if self.mode == "loopback"
                 else f"{self.nodes} node{'s' if self.nodes != 1 else ''}, one namespace "
                      f"each, on a switch")
        delay = f", {self.latency_seconds * 1e3:g} ms one-way delay" \
            if self.latency_seconds else ""
        return (f"{where}; {shown} links (tc tbf, burst {self.burst_bytes / 1024:.0f} "
                f"KiB){delay}" + (f"; TCP {self.tcp}" if self.tcp else "")
                + (f"; MTU {self.mtu}" if self.mtu != DEFAULT_MTU else ""))

    def as_dict(self) -> dict:
        return {"nodes": self.nodes, "rate_bits_per_second": self.rate_bits,
                "burst_bytes": self.burst_bytes, "latency_seconds": self.latency_seconds,
                "mode": self.mode, "ranks_per_node": self.ranks_per_node,
                "tcp_congestion_control": self.tcp, "mtu": self.mtu,
                "gso_max_size": segment_bytes(self.burst_bytes, self.mtu)}


def segment_bytes(burst_bytes: int, mtu: int = DEFAULT_MTU) -> int:
    """The largest TCP segment-offload packet (``gso_max_size``) a node may send: as
    many whole frames of payload as fit in the bucket with their headers, at most
    64 KiB (Linux's limit).

    A NIC with TCP segmentation offload takes 64 KiB from the stack and cuts it into
    frames itself; the veth of an emulated node hands the bucket 64 KiB packets too, but
    tbf cuts every packet larger than its bucket into frames in software (tc-tbf(8)),
    and each frame then crosses the switch and the receiver's TCP on the cores that
    also compute. Packets no larger than the bucket pass whole: the rate is unchanged
    (tbf charges a packet's every frame) and no burst exceeds the bucket, and with the
    default 8 KiB bucket the cores handle one packet per five 1500 B frames
    (docs/cluster_emulation.md has what that gives back to the compute)."""
    frames = max(1, int(burst_bytes) // (mtu + FRAME_HEADER))
    return int(min(LARGEST_OFFLOAD, frames * mtu))


def default_burst(rate_bits: float, mtu: int = DEFAULT_MTU) -> int:
    """The token bucket's size: 64 µs at the rate, at least 8 KiB and two frames.

    A NIC puts every frame on the wire at the line rate; a bucket lets ``burst`` bytes
    pass at once after an idle gap. At 1 Gbit/s with 122 KiB (1 ms) of bucket, 16-64 KiB
    ping-pongs took 0.4-0.5x their serialization time; with 8 KiB they are within 1% of
    it from 64 KiB up and the 8 MiB bandwidth is 0.96 of the TCP ceiling (tbf's
    refills are timer-driven; docs/cluster_emulation.md has the measurements)."""
    return int(max(8 * 1024, rate_bits / 8.0 * 64e-6, 2 * (mtu + FRAME_HEADER)))


def cluster_from_mapping(fields: dict, where: str = "cluster") -> ClusterSpec:
    """A ClusterSpec from ``{"nodes": 2, "rate": "1gbit", ...}`` (a recipe's
    ``cluster:`` or the parsed ``--cluster`` text); unknown or missing fields raise
    Deep500Error naming them."""
    if not isinstance(fields, dict):
        raise Deep500Error(f"{where}: a mapping of {', '.join(FIELDS)}, e.g. {_EXAMPLE}")
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise Deep500Error(f"{where}: unknown field(s) {', '.join(map(str, unknown))}; "
                           f"the fields are {', '.join(FIELDS)}")
    missing = [name for name in ("nodes", "rate") if name not in fields]
    if missing:
        raise Deep500Error(f"{where}: give {' and '.join(missing)}, e.g. {_EXAMPLE}")
    nodes = _integer(where, "nodes", fields["nodes"])
    rate = _quantity("rate", fields["rate"], _RATE_UNITS, None)
    mtu = _integer(where, "mtu", fields.get("mtu", DEFAULT_MTU))
    burst = (int(_quantity("burst", fields["burst"], _SIZE_UNITS, "b"))
             if fields.get("burst") is not None else default_burst(rate, mtu))
    latency = (_quantity("latency", fields["latency"], _TIME_UNITS, None)
               if fields.get("latency") is not None else 0.0)
    return ClusterSpec(nodes=nodes, rate_bits=rate, burst_bytes=burst,
                       latency_seconds=latency, mode=str(fields.get("mode", "nodes")),
                       ranks_per_node=_integer(where, "ppn", fields.get("ppn", 1)),
                       tcp=(str(fields["tcp"]).strip().lower()
                            if fields.get("tcp") is not None else None), mtu=mtu)


def _integer(where: str, name: str, value) -> int:
    if isinstance(value, bool) or not str(value).strip().isdecimal():
        raise Deep500Error(f"{where}: {name}={value!r} is not a positive integer")
    return int(str(value).strip())


def parse_cluster(text: str) -> ClusterSpec:
    """``"nodes=2,rate=1gbit,burst=256kb"`` as a ClusterSpec."""
    fields = {}
    for part in str(text).split(","):
        if not part.strip():
            continue
        name, equals, value = part.partition("=")
        if not equals or not value.strip():
            raise Deep500Error(f"--cluster {text!r}: {part.strip()!r} is not name=value; "
                               f"e.g. {_EXAMPLE}")
        if name.strip() in fields:
            raise Deep500Error(f"--cluster {text!r}: {name.strip()} is given twice")
        fields[name.strip()] = value.strip()
    return cluster_from_mapping(fields, where=f"--cluster {text!r}")
