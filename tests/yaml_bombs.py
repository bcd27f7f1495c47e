"""Hostile YAML for the bounded readers' tests (recipes and machine files): a "billion
laughs" alias bomb, and the check that a reader refuses a text quickly."""
import time

import pytest


def alias_bomb(levels: int, width: int, last_line: str) -> str:
    """``levels`` anchors, each a list of ``width`` aliases of the one before, then
    ``last_line`` with ``{top}`` standing for the alias of the last (it expands to
    2·width^levels scalars)."""
    lines = ["name: bomb", "laugh0: &laugh0 [lol, lol]"]
    lines += [f"laugh{i}: &laugh{i} [{', '.join([f'*laugh{i - 1}'] * width)}]"
              for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n" + last_line.format(top=f"*laugh{levels}") + "\n"


def refused_in_time(path, text: str, load, error, match: str, limit_s: float,
                    digits: int = 1) -> str:
    """Write ``text`` to ``path``, check that ``load(path)`` raises ``error`` matching
    ``match`` within ``limit_s`` seconds; return the message."""
    path.write_text(text, encoding="utf-8")
    started = time.perf_counter()
    with pytest.raises(error, match=match) as caught:
        load(str(path))
    took = time.perf_counter() - started
    assert took < limit_s, f"refused after {took:.{digits}f} s"
    return str(caught.value)
