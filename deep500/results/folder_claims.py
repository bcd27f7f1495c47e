"""Which folder a run may take, decided before anything is written to it.

- A run without ``--out`` gets ``results/<name>-<date>-<time>``, where ``<name>`` is
  the recipe's name made one safe path component (:func:`run_name_component`: a
  ``name: ../../x`` or ``name: /abs/path`` stays inside ``results/``), and the folder
  is claimed with ``mkdir(2)``, which fails for every process but one: concurrent runs
  started in the same second get ``-2``, ``-3``, ... (:func:`new_run_folder`).
- A folder given with ``--out`` is checked before the run writes into it
  (:func:`check_claimable`): one that holds something is refused unless ``--append``
  is given, and ``--append`` is refused for a folder that ``deep500 run`` did not
  write (no Deep500 manifest) or that holds a symbolic link. A refused folder is left
  exactly as it was.
"""
from __future__ import annotations

import json
import os
import re

from deep500.results.files import MANIFEST_FILE, RunFolderError, read_manifest
from deep500.results.safe_write import UnsafePathError, refuse_link

LOCK_FILE = ".deep500.lock"
_NAME_LENGTH = 80


def run_name_component(name) -> str:
    """``name`` as one path component that stays where it is put: every run of
    characters other than letters, digits, ``.``, ``+`` and ``-`` becomes ``_``, and
    leading and trailing dots and underscores go (no ``..``, no hidden folder); at
    most 80 characters; ``run`` when nothing is left."""
    text = re.sub(r"[^\w.+-]+", "_", str(name), flags=re.ASCII)
    return text.strip("._")[:_NAME_LENGTH].rstrip("._") or "run"


def new_run_folder(parent: str, base: str) -> str:
    """Create and return ``parent/base``, or the first of ``parent/base-2``,
    ``-3``, ... that no one has created yet (``mkdir`` decides: two processes never
    get the same folder)."""
    os.makedirs(parent, exist_ok=True)
    number = 1
    while True:
        path = os.path.join(parent, base if number == 1 else f"{base}-{number}")
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            number += 1
        except OSError as error:
            raise RunFolderError(f"{path}: cannot create the run folder "
                                 f"({error.strerror or error}); give a folder you can "
                                 f"create with --out") from None


def is_run_manifest(manifest) -> bool:
    """Whether ``manifest`` is one ``deep500 run`` wrote (its recipe, status and start)."""
    return (isinstance(manifest, dict) and isinstance(manifest.get("recipe"), dict)
            and isinstance(manifest.get("status"), str)
            and isinstance(manifest.get("started"), str))


def check_claimable(path: str, append: bool, held: bool = False) -> None:
    """Raise RunFolderError, touching nothing, unless a run may take ``path``: it does
    not exist yet, is empty (a lock left by an earlier claim aside), or, with
    ``append``, is a run folder that ``deep500 run`` wrote, without symbolic links. A
    folder another live run holds is said to be in use; ``held``: this process holds
    the folder's lock already."""
    if not os.path.isdir(path):
        return  # created by the claim (or refused there, when it is a file)
    try:
        entries = sorted(e for e in os.listdir(path) if e != LOCK_FILE)
    except OSError as error:
        raise RunFolderError(f"--out {path}: cannot be read ({error.strerror or error}); "
                             f"give a folder you can write") from None
    _refuse_links(path, [LOCK_FILE])  # the lock is written even into an empty folder
    if not entries:
        return
    if not append:
        if not held and _locked(os.path.join(path, LOCK_FILE)):  # a run holds it now
            raise RunFolderError(in_use_message(path))
        shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
        raise RunFolderError(
            f"{path} is not empty ({shown}): one run per folder keeps results "
            f"apart; give a new folder with --out, or add --append to add this "
            f"run to the folder as a new session")
    # Deep500 makes no links; one in a run folder would take a later write (the run's
    # plots/, training/, heatmaps/, ... and files) outside it.
    _refuse_links(path, entries)
    manifest = read_manifest(path)
    if not is_run_manifest(manifest):
        found = (f"its {MANIFEST_FILE} is not one deep500 run wrote" if manifest
                 else f"it has no {MANIFEST_FILE}")
        raise RunFolderError(
            f"--append {path}: not a Deep500 run folder ({found}; it holds "
            f"{', '.join(entries[:4])}{', ...' if len(entries) > 4 else ''}); --append "
            f"adds a session to a folder that 'deep500 run' wrote: give a new folder "
            f"with --out")


def in_use_message(path: str) -> str:
    """What a run says of ``path`` while another run holds its lock."""
    owner = _lock_owner(os.path.join(path, LOCK_FILE))
    holder = (f"process {owner['pid']} on {owner['hostname']}" if owner
              else "another process")
    return (f"{path} is in use by another deep500 run ({holder}); wait for it to end, "
            f"or give another folder with --out")


def _locked(lock_path: str) -> bool:
    """Whether a process holds the lock file's ``flock`` (as ``filelock`` takes it);
    the file is only opened to ask, never written."""
    try:
        import fcntl
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except (ImportError, OSError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:  # EWOULDBLOCK: held exclusively
        return True
    finally:
        os.close(fd)


def _lock_owner(lock_path: str) -> dict:
    """The process a lock file names (``process_identity``), or ``{}``."""
    try:
        with open(lock_path, encoding="utf-8") as handle:
            owner = json.load(handle)
        str(owner["pid"]), str(owner["hostname"])
        return owner
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _refuse_links(path: str, names) -> None:
    for name in names:
        try:
            refuse_link(os.path.join(path, name), "a run's files")
        except UnsafePathError as error:  # every rank stops alike on a RunFolderError
            raise RunFolderError(str(error)) from None
