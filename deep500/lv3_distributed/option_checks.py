"""Checks of the options Level 3's schemes and collectives take: each error names the
owner and the option, shows the value given, and says what to give instead."""
from __future__ import annotations

import numpy as np

from deep500.utils.errors import Deep500Error


def check_choice(owner: str, option: str, value, choices) -> str:
    """``value`` if it is one of ``choices``, else a ``Deep500Error`` listing them."""
    if value not in choices:
        raise Deep500Error(f"{owner}: {option}={value!r}; choose one of "
                           f"{', '.join(choices)}")
    return value


def check_byte_count(value, where: str, default) -> int:
    """``value`` if it is a positive integer number of bytes, else a ``Deep500Error``
    naming ``where`` and the ``default``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise Deep500Error(f"{where}={value!r}: give a positive integer number of bytes "
                           f"(the default is {default})")
    return int(value)
