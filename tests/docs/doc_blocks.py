"""The fenced code blocks of README.md and docs/*.md, as a reader would copy them.

A block is a fenced code block (CommonMark §4.5): a line of three or more backticks,
indented or not (inside a list item), whose info string's first word is the language,
closed by a line of at least as many backticks; it is kept with the file and line of
its opening fence and its text without the fence's indent. HTML comments on the lines just above the fence
(blank lines between them allowed) say how it is used:

- ``<!-- not run: REASON -->``: the block is shown, never run (it needs a cluster, root,
  Slurm, a GPU, a download, or minutes of machine time); the reason is the skip reason.
- ``<!-- file: NAME -->``: the block is the file NAME, written into the document's
  folder for the blocks after it (a C++ source the tutorial compiles).
- ``<!-- recipe fragment: BASE -->``: a YAML block that is part of a recipe: it is laid
  over the recipe BASE (a path from the repository root) and the result is checked.

Which blocks are code: ``python``; ``sh``, ``bash``, ``shell`` and ``console`` (shell
commands; in ``console`` only the lines after a ``$`` prompt); ``yaml`` (recipes). Every
other block (a directory tree, output, C++ or SQL excerpts) is text, unless it names a
file.
"""
from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass

PYTHON = "python"
SHELL = "shell"
RECIPE = "recipe"
FILE = "file"
TEXT = "text"

_LANGUAGES = {"python": PYTHON, "py": PYTHON, "sh": SHELL, "bash": SHELL, "shell": SHELL,
              "console": SHELL, "yaml": RECIPE, "yml": RECIPE}
_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,})(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<key>not run|file|recipe fragment)\s*:\s*"
                     r"(?P<value>.*?)\s*-->\s*$")
# Lines that start a command a reader would type: an untagged block holding one is a
# block the test cannot see.
_COMMAND = re.compile(r"^\s*(\$ )?(deep500|python|make|mpirun|pip) ")


@dataclass(frozen=True)
class DocBlock:
    """One fenced block: where it is, what kind, its text and its markers."""
    path: str            # relative to the repository root, e.g. "docs/distributed.md"
    line: int            # 1-based line of the opening fence
    language: str        # the info string's first word ("" when untagged)
    text: str            # the content, the fence's indent removed
    not_run: str | None = None
    file_name: str | None = None
    fragment_of: str | None = None

    @property
    def kind(self) -> str:
        if self.file_name:
            return FILE
        return _LANGUAGES.get(self.language.lower(), TEXT)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def looks_like_commands(self) -> bool:
        """Whether an untagged block holds a command line (it should say ``bash``)."""
        return any(_COMMAND.match(line) for line in self.text.splitlines())

    def commands(self) -> str:
        """The shell text to run: a ``console`` block's prompted lines, else all."""
        if self.language.lower() != "console":
            return self.text
        return "\n".join(line.lstrip()[2:] for line in self.text.splitlines()
                         if line.lstrip().startswith("$ "))


def read_blocks(path: pathlib.Path, root: pathlib.Path) -> list[DocBlock]:
    """Every fenced block of the Markdown file ``path``, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    relative = path.relative_to(root).as_posix()
    blocks, index = [], 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        closing = re.compile(rf"^ {{0,{indent + 3}}}`{{{len(fence)},}}\s*$")
        end = index + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        body = [line[indent:] if not line[:indent].strip() else line.lstrip()
                for line in lines[index + 1:end]]
        markers = _markers_above(lines, index)
        blocks.append(DocBlock(
            path=relative, line=index + 1, language=(opening["info"].split() or [""])[0],
            text="\n".join(body) + "\n", not_run=markers.get("not run"),
            file_name=markers.get("file"), fragment_of=markers.get("recipe fragment")))
        index = end + 1
    return blocks


def documented_blocks(root: pathlib.Path) -> list[DocBlock]:
    """The blocks of README.md and of every docs/*.md, file by file, in order."""
    paths = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return [block for path in paths for block in read_blocks(path, root)]


def _markers_above(lines: list[str], fence_index: int) -> dict[str, str]:
    markers, index = {}, fence_index - 1
    while index >= 0 and (not lines[index].strip() or _MARKER.match(lines[index])):
        found = _MARKER.match(lines[index])
        if found:
            markers.setdefault(found["key"], found["value"])
        index -= 1
    return markers
