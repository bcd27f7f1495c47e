"""Checking where a command will write a file, before it does any work.

A command that measures for minutes and then cannot write its result (``--out`` in a
folder that does not exist, or naming a folder) loses the measurement; these checks run
first and raise a Deep500Error that names the option and the path.
"""
from __future__ import annotations

import os

from deep500.utils.errors import Deep500Error


def check_output_file(path, option: str, missing_folder_ok: bool = False) -> str:
    """The absolute path of ``path`` if a file can be written there: not an existing
    folder, in a folder that exists and is writable. ``option`` (``"--out"``) names
    where the path came from in the error. ``missing_folder_ok``: the command creates
    the folders it writes into (nothing is created here, so a command refused later
    leaves nothing behind)."""
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    if os.path.isdir(path):
        raise Deep500Error(f"{option} {path} is a folder, but a file is written there; give "
                           f"the path of a file (inside it, if you like)")
    if os.path.lexists(path) and not os.path.isfile(path):
        raise Deep500Error(f"{option} {path} exists and is not a regular file; give the path "
                           f"of a new or existing file")
    folder = os.path.dirname(path)
    if missing_folder_ok and not os.path.lexists(folder):
        return path
    if not os.path.isdir(folder):
        raise Deep500Error(f"{option} {path}: the folder {folder} does not exist; create it "
                           f"first (mkdir -p {folder}) or give a path in an existing folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise Deep500Error(f"{option} {path}: the folder {folder} is not writable; give a "
                           f"path in a folder you can write to")
    return path

