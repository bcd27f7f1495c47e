"""The machine file of a run (``deep500.utils.machine``): named by the recipe's
top-level ``machine:`` (a path relative to the recipe's folder, or the name of a
machine file shipped with Deep500) or by ``deep500 run --machine FILE`` (which wins),
loaded and validated when the recipe is checked, before anything runs, and recorded in
the run's manifest as ``machine: {path, sha256, name, source, given_by}``.
"""
from __future__ import annotations

import hashlib
import os

from deep500.utils.machine import MachineModel, load_machine, resolve_machine_path


def resolve(value: str, base_dir: str | None = None) -> str:
    """The path of the machine file ``value`` names: relative paths from ``base_dir``
    (the recipe's folder; else the working directory), then a shipped machine's name.
    Raises MachineError when it is neither."""
    value = os.fspath(value)
    if base_dir is not None and not os.path.isabs(value):
        candidate = os.path.join(base_dir, value)
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return os.path.abspath(resolve_machine_path(value))


def load(value: str, base_dir: str | None = None) -> tuple[MachineModel, str]:
    """``(MachineModel, absolute path)`` of the machine file ``value`` names (see
    :func:`resolve`); MachineError (a Deep500Error naming the field) when it does not
    load."""
    path = resolve(value, base_dir)
    return load_machine(path), path


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_entry(machine: MachineModel | None, path: str | None,
                   given_by: str | None) -> dict | None:
    """The manifest's ``machine`` entry: where the file is, its SHA-256 (the file may
    change after the run), and the machine's ``name`` and ``source``; None without a
    machine file."""
    if machine is None or path is None:
        return None
    return {"path": path, "sha256": sha256(path), "name": machine.name,
            "source": machine.source, "given_by": given_by}
