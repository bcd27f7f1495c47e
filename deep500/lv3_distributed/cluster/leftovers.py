"""Which emulated clusters are still owned, and removing the ones that are not.

Every cluster is named ``d5c<pid>`` after the process that starts it, and that process
writes ``<state dir>/d5c<pid>.json`` (its pid and start time) before it creates a
namespace. A namespace ``d5c<pid>s`` or ``d5c<pid>n<i>`` is a leftover when that
process no longer runs: the launcher was killed (SIGKILL leaves no chance to clean
up), or its pid now belongs to a process started after the namespace (pid reuse).
Every start removes the leftovers first; ``deep500 cluster --cleanup`` does it alone.
"""
from __future__ import annotations

import json
import os
import re
import tempfile

import psutil

from deep500.lv3_distributed.cluster import commands
from deep500.lv3_distributed.cluster.topology import PREFIX, remove_namespace

_NAMESPACE = re.compile(rf"^{PREFIX}([0-9]+)(?:s|n[0-9]+)$")


def state_directory() -> str:
    """``/run/deep500/clusters`` (tmpfs: gone after a reboot, as the namespaces are),
    else a folder in the temporary directory."""
    for base in ("/run", tempfile.gettempdir()):
        path = os.path.join(base, "deep500", "clusters")
        try:
            os.makedirs(path, exist_ok=True)
            return path
        except OSError:
            continue
    raise OSError("no writable folder for the emulated clusters' state")


def state_path(name: str) -> str:
    return os.path.join(state_directory(), f"{name}.json")


def write_state(name: str, namespaces: list) -> None:
    me = psutil.Process()
    state = {"pid": me.pid, "create_time": me.create_time(), "namespaces": namespaces}
    with open(state_path(name), "w", encoding="utf-8") as handle:
        json.dump(state, handle)


def remove_state(name: str) -> None:
    try:
        os.unlink(state_path(name))
    except FileNotFoundError:
        pass


def _owner_alive(pid: int, name: str) -> bool:
    try:
        process = psutil.Process(pid)
        started = process.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    try:
        with open(state_path(name), encoding="utf-8") as handle:
            recorded = float(json.load(handle)["create_time"])
        return abs(recorded - started) < 0.5
    except (OSError, ValueError, KeyError, TypeError):
        # No state: a live owner started before its namespaces; a process started
        # after them only reuses the pid.
        mount = f"/run/netns/{PREFIX}{pid}s"
        for candidate in (mount, f"/run/netns/{PREFIX}{pid}n0"):
            try:
                return started <= os.stat(candidate).st_mtime + 0.5
            except OSError:
                continue
        return False


def owned_clusters() -> dict:
    """``{cluster name: [namespaces]}`` of every emulated cluster on this host."""
    found: dict = {}
    for namespace in commands.namespaces():
        match = _NAMESPACE.match(namespace)
        if match:
            found.setdefault(f"{PREFIX}{match.group(1)}", []).append(namespace)
    return found


def remove_leftovers() -> list:
    """Remove every cluster whose owner is gone; return the namespaces removed."""
    removed = []
    for name, namespaces in owned_clusters().items():
        pid = int(name[len(PREFIX):])
        if pid == os.getpid() or _owner_alive(pid, name):
            continue
        for namespace in sorted(namespaces, key=lambda n: n.endswith("s")):  # switch last
            remove_namespace(namespace)
            removed.append(namespace)
        remove_state(name)
    return removed


def live_clusters() -> dict:
    """``{cluster name: owner pid}`` of the clusters whose owner still runs."""
    return {name: int(name[len(PREFIX):]) for name in owned_clusters()
            if _owner_alive(int(name[len(PREFIX):]), name)}
