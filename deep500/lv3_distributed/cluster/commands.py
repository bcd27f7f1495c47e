"""The iproute2 commands an emulated cluster is built with (ip-netns(8), ip-link(8),
tc-tbf(8)), and the check that this process may run them: creating network
namespaces and shaping links needs CAP_NET_ADMIN and CAP_SYS_ADMIN (root, or a
process granted both), and the ``ip`` and ``tc`` programs."""
from __future__ import annotations

import json
import shutil
import subprocess

from deep500.utils.errors import Deep500Error

# Bit numbers in the capability sets of /proc/<pid>/status (linux/capability.h).
CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21
_NEEDED = ("CAP_NET_ADMIN (namespaces' links, tc qdiscs) and CAP_SYS_ADMIN "
           "(ip netns add mounts the namespace)")


def effective_capabilities(status_path: str = "/proc/self/status") -> int:
    """The CapEff mask of this process (proc(5))."""
    with open(status_path, encoding="ascii") as handle:
        for line in handle:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def require_privileges(status_path: str = "/proc/self/status") -> None:
    """Raise Deep500Error saying what is missing when this process cannot build an
    emulated cluster."""
    mask = effective_capabilities(status_path)
    missing = [name for bit, name in ((CAP_NET_ADMIN, "CAP_NET_ADMIN"),
                                      (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"))
               if not mask >> bit & 1]
    if missing:
        raise Deep500Error(
            f"an emulated cluster needs {_NEEDED}; this process lacks "
            f"{' and '.join(missing)}. Run it as root (sudo -E deep500 ...), in a "
            f"container started with --cap-add NET_ADMIN --cap-add SYS_ADMIN, or "
            f"without --cluster (ranks then talk through shared memory)")
    for program in ("ip", "tc"):
        if shutil.which(program) is None:
            raise Deep500Error(f"an emulated cluster is built with iproute2's '{program}', "
                               f"which is not on PATH; install iproute2 "
                               f"(apt-get install iproute2)")


def ip(*arguments: str, namespace: str | None = None, check: bool = True) -> str:
    """Run ``ip [-n NS] ARGS`` and return its stdout; a failure raises Deep500Error
    with the command and ip's own message (unless ``check`` is false)."""
    command = ["ip", *(("-n", namespace) if namespace else ()), *arguments]
    return _run(command, check)


def tc(*arguments: str, namespace: str | None = None, check: bool = True) -> str:
    """Run ``tc ARGS`` inside ``namespace`` (``ip netns exec``)."""
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    return _run([*prefix, "tc", *arguments], check)


def sysctl(namespace: str, *settings: str) -> None:
    """``sysctl -w`` each ``key=value`` inside ``namespace``."""
    _run(["ip", "netns", "exec", namespace, "sysctl", "-qw", *settings], True)


def _run(command: list, check: bool) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except FileNotFoundError as exc:
        raise Deep500Error(f"{command[0]}: not found ({exc}); install iproute2") from None
    except subprocess.TimeoutExpired:
        raise Deep500Error(f"'{' '.join(command)}' did not finish in 60 s") from None
    if check and done.returncode != 0:
        message = (done.stderr or done.stdout).strip()
        raise Deep500Error(f"'{' '.join(command)}' failed (exit {done.returncode}): "
                           f"{message}")
    return done.stdout


def namespaces() -> list[str]:
    """The names of every network namespace ``ip netns`` knows (ip-netns(8) list)."""
    text = ip("-j", "netns", "list", check=False).strip()
    if not text:
        return []
    try:
        return [entry["name"] for entry in json.loads(text)]
    except (ValueError, KeyError, TypeError):
        return [line.split()[0] for line in text.splitlines() if line.strip()]


def namespace_pids(namespace: str) -> list[int]:
    """The processes running in ``namespace`` (ip netns pids)."""
    text = ip("netns", "pids", namespace, check=False)
    return [int(word) for word in text.split() if word.isdecimal()]


def link_counters(namespace: str, device: str) -> dict:
    """``{"tx_bytes", "rx_bytes", "tx_packets", "rx_packets"}`` of ``device`` in
    ``namespace`` (ip -s link: the interface's own counters)."""
    entry = json.loads(ip("-j", "-s", "link", "show", "dev", device,
                          namespace=namespace))[0]
    stats = entry["stats64"]
    return {"tx_bytes": stats["tx"]["bytes"], "rx_bytes": stats["rx"]["bytes"],
            "tx_packets": stats["tx"]["packets"], "rx_packets": stats["rx"]["packets"]}


def qdisc_available(kind: str, namespace: str) -> bool:
    """Whether this kernel has the ``kind`` qdisc: tried on the namespace's loopback
    and removed again."""
    added = subprocess.run(["ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev",
                            "lo", "root", kind], capture_output=True, text=True)
    if added.returncode != 0:
        return False
    tc("qdisc", "del", "dev", "lo", "root", namespace=namespace, check=False)
    return True


def allowed_congestion_controls(
        path: str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control") -> list | None:
    """The TCP congestion controls a network namespace other than the host's may choose
    (None where the kernel does not say)."""
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().split()
    except OSError:
        return None


def congestion_control(namespace: str) -> str:
    """The TCP congestion control new sockets of ``namespace`` use."""
    return _run(["ip", "netns", "exec", namespace, "sysctl", "-n",
                 "net.ipv4.tcp_congestion_control"], True).strip()
