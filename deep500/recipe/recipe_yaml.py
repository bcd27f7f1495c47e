"""Reading a recipe's YAML in bounded time and memory, whatever the file holds.

A recipe is a few kilobytes of a few hundred values, so the reader refuses, each with a
``RecipeError`` that names the file and line:

- a file larger than :data:`MAX_BYTES`, before it is parsed;
- brackets nested deeper than :data:`MAX_NESTING` (PyYAML's scanner is quadratic in
  them), before it is parsed;
- a document of more than :data:`MAX_VALUES` values, or nested deeper than
  :data:`MAX_NESTING`, *counting what aliases expand to*: each node's size and height
  are computed once, when it is composed, and an alias adds its anchor's, so a
  "billion laughs" recipe (nested ``&a [*b, *b, ...]``) is refused at the first alias
  that would exceed the bound, in milliseconds, and nothing downstream ever walks more
  than :data:`MAX_VALUES` values;
- an alias inside the node it names (``&a [*a]``, a loop);
- an integer literal of more than :data:`MAX_INTEGER_DIGITS` characters (Python
  refuses to print such numbers, so no message could show it);
- a key given twice in one mapping (PyYAML keeps the last one silently).
"""
from __future__ import annotations

import os

import yaml

from deep500.recipe.problems import describe, show
from deep500.utils.errors import RecipeError

MAX_BYTES = 256 * 1024
MAX_VALUES = 10_000
MAX_NESTING = 64
MAX_INTEGER_DIGITS = 100


def read_recipe_yaml(path):
    """The parsed YAML of the recipe file ``path`` (a mapping, if it is a recipe), read
    within the bounds above; raises RecipeError saying what was wrong and where."""
    if not isinstance(path, (str, os.PathLike)):
        raise RecipeError(f"A recipe is a file name, got {describe(path)}")
    if not os.path.isfile(path):
        what = "is not a file" if os.path.exists(path) else "does not exist"
        raise RecipeError(f"Recipe file {str(path)!r} {what}")
    where = os.path.basename(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise RecipeError(f"{where}: cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise RecipeError(f"{where}: larger than {MAX_BYTES // 1024} KiB; a recipe is a "
                          f"few kilobytes (give long lists of operators with 'from: "
                          f"FILE.csv', models with 'file: MODEL.onnx')")
    try:
        text = data.decode("utf-8-sig")  # a leading byte-order mark is fine
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise RecipeError(f"{where}: line {line}, column {column}: byte "
                          f"0x{data[exc.start]:02x} is not UTF-8 text; save the recipe "
                          f"as UTF-8") from None
    line = _too_deep(text)
    if line:
        raise RecipeError(f"{where}: line {line}: brackets nested more than "
                          f"{MAX_NESTING} deep; a recipe needs a few levels")
    loader = None
    try:
        loader = _RecipeLoader(text)  # reads the first characters already
        loader.name = where  # marks in messages say 'in "recipe.yaml", line 3, column 1'
        return loader.get_single_data()
    except _TooLarge as exc:
        raise RecipeError(f"{where}: {exc}") from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"{where}: not valid YAML: {exc}") from None
    except RecursionError:  # a limit lower than MAX_NESTING, set by another library
        raise RecipeError(f"{where}: not valid YAML: nested too deeply to read; a recipe "
                          f"needs a few levels of nesting") from None
    except (ValueError, OverflowError, TypeError) as exc:  # e.g. a date like 2024-13-45
        raise RecipeError(f"{where}: not valid YAML: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()


class _TooLarge(Exception):
    """A document beyond the reader's bounds; the message says which and where."""


def _too_deep(text: str) -> int | None:
    """The line where ``[``/``{`` brackets nest more than ``MAX_NESTING`` deep, or None.
    PyYAML's scanner takes time quadratic in the nesting of flow collections (seconds
    for a few hundred levels) before it runs out of recursion, so such text is refused
    before it is parsed. Quoted text and comments are skipped (roughly: a stray quote
    only makes the count lower)."""
    depth, line, quote, comment = 0, 1, None, False
    for char in text:
        if char == "\n":
            line, comment = line + 1, False
        elif comment:
            continue
        elif quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#":
            comment = True
        elif char in "[{":
            depth += 1
            if depth > MAX_NESTING:
                return line
        elif char in "]}":
            depth = max(0, depth - 1)
    return None


def _where(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


class _RecipeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that counts values as it composes them (aliases by what they
    expand to), refuses a key given twice in one mapping (a merge key's may be
    overridden) and integers too long to print."""

    def __init__(self, stream):
        super().__init__(stream)
        self._values = 0      # values composed so far, aliases expanded
        self._depth = 0       # nesting of the node being composed
        self._size = {}       # id(node) -> (values, height) once it is composed
        self._keep = []       # the nodes measured, so that their ids stay theirs

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            measured = self._size.get(id(node))
            if measured is None:
                raise _TooLarge(f"{_where(event.start_mark)}: the alias *{event.anchor} "
                                f"is inside the node &{event.anchor} names (a loop); "
                                f"write the values out")
            self._add(measured[0], self._depth + measured[1], event.start_mark,
                      event.anchor)
            return node
        mark = self.peek_event().start_mark
        self._depth += 1
        self._add(1, self._depth, mark, None)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._measure(node)
        return node

    def _add(self, values: int, depth: int, mark, alias: str | None) -> None:
        self._values += values
        if self._values > MAX_VALUES:
            what = (f" (the alias *{alias} stands for {values}); aliases that expand to "
                    f"more are refused: write the values out" if alias else
                    "; give long lists of operators with 'from: FILE.csv'")
            raise _TooLarge(f"{_where(mark)}: more than {MAX_VALUES} values, where a "
                            f"recipe needs a few hundred{what}")
        if depth > MAX_NESTING:
            # PyYAML's own limit is Python's recursion limit, which other libraries
            # raise (torch.compile sets 2000): one rule whatever was imported before.
            what = f", the alias *{alias} included" if alias else ""
            raise _TooLarge(f"not valid YAML: nested too deeply to read: more than "
                            f"{MAX_NESTING} levels at {_where(mark)}{what}; a recipe "
                            f"needs a few levels of nesting")

    def _measure(self, node) -> None:
        """Record ``node``'s values and height, its children's being known."""
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        sizes = [self._size[id(child)] for child in children]
        self._size[id(node)] = (1 + sum(s[0] for s in sizes),
                                1 + max((s[1] for s in sizes), default=0))
        self._keep.append(node)

    def construct_yaml_int(self, node):
        if len(node.value) > MAX_INTEGER_DIGITS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {len(node.value)} characters "
                f"({show(node.value)}); a recipe's numbers are far smaller",
                node.start_mark)
        return super().construct_yaml_int(node)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            # the mapping's own keys: those a merge (<<: *base) brings may be overridden
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:
                    continue  # an unhashable key: the base class says so
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping", node.start_mark,
                        f"found key {show(key)} twice (first {first.start_mark.line + 1}"
                        f":{first.start_mark.column + 1}); give each key once",
                        key_node.start_mark)
        return super().construct_mapping(node, deep)


_RecipeLoader.add_constructor("tag:yaml.org,2002:int", _RecipeLoader.construct_yaml_int)
