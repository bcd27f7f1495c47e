"""The progress bar of a calibration phase (on stderr, off when not wanted)."""
from __future__ import annotations

import sys


def progress_bar(total: int, desc: str, enabled: bool):
    """A tqdm bar of ``total`` steps named ``calibrate: <desc>``; disabled, it only
    counts."""
    from tqdm import tqdm
    return tqdm(total=total, desc=f"calibrate: {desc}", disable=not enabled, leave=False,
                file=sys.stderr)
