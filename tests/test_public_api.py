"""Every ``d5.<name>`` the README and the docs show a user exists, so a newcomer who
copies an example does not meet an AttributeError."""
import pathlib
import re

import deep500 as d5

ROOT = pathlib.Path(__file__).resolve().parents[1]


def documented_names() -> set:
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    names = set()
    for path in texts:
        names |= set(re.findall(r"\bd5\.([A-Za-z_]\w*)", path.read_text(encoding="utf-8")))
    return names


def test_every_documented_name_is_exported():
    names = documented_names()
    assert "IndexedTarDataset" in names  # the README names it: the scan sees the README
    missing = sorted(n for n in names if not hasattr(d5, n))
    assert not missing, f"named in README.md or docs/ but not in deep500: {missing}"
