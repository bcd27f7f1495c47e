"""A small tmpfs mounted for one test (root may mount one; a container may forbid it),
for file systems that fill up or are read-only."""
import contextlib
import subprocess

import pytest


@contextlib.contextmanager
def tmpfs(mount, size: str):
    """A tmpfs of ``size`` (``mount``'s ``-o size=``) at the new folder ``mount``,
    unmounted afterwards; the test is skipped, saying why, where it cannot be mounted."""
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                           str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"a tmpfs cannot be mounted here (not root, or no mount permission "
                    f"in this container): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
