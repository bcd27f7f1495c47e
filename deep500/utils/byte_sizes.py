"""Byte counts written as people write them: ``67108864``, ``"64MiB"``, ``"1.5 GB"``.

Binary units (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones (kB, MB, GB, TB)
powers of 1000 (IEC 80000-13); ``B`` or no unit is bytes.
"""
from __future__ import annotations

import re

from deep500.utils.errors import Deep500Error

UNITS = {"": 1, "b": 1, "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40,
         "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_bytes(value, where: str = "a size") -> int:
    """``value`` (an integer number of bytes, or a number and a unit) in bytes; a
    Deep500Error naming ``where`` for anything else, or for a size that is not
    positive."""
    if isinstance(value, int) and not isinstance(value, bool):
        nbytes = value
    else:
        match = _SIZE.match(value) if isinstance(value, str) else None
        unit = match.group(2).lower() if match else None
        if unit not in UNITS:
            raise Deep500Error(f"{where}: expected a number of bytes such as 67108864, "
                               f"'64MiB' or '1.5GB' (units {sorted(set(UNITS) - {''})}, "
                               f"any case), got {value!r}")
        nbytes = int(float(match.group(1)) * UNITS[unit])
    if nbytes < 1:
        raise Deep500Error(f"{where}: a size must be at least one byte, got {value!r}")
    return nbytes


def format_bytes(nbytes: int | None) -> str:
    """``nbytes`` in the largest binary unit it reaches, three significant digits."""
    if nbytes is None:
        return "not reported"
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} B"
