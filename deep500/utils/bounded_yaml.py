"""Reading a small YAML file (a recipe, a machine file) in bounded time and memory,
whatever it holds.

:func:`read_bounded_yaml` refuses, each with a :class:`BoundedYamlError` whose message
says what was wrong and where (the caller puts the file's name in front):

- a file larger than ``bounds.max_bytes``, before it is parsed;
- brackets nested deeper than ``bounds.max_nesting`` (PyYAML's scanner is quadratic in
  them), before it is parsed;
- a document of more than ``bounds.max_values`` values, or nested deeper than
  ``bounds.max_nesting``, *counting what aliases expand to*: each node's size and height
  are computed once, when it is composed, and an alias adds its anchor's, so a
  "billion laughs" file (nested ``&a [*b, *b, ...]``) is refused at the first alias
  that would exceed the bound, in milliseconds, and nothing downstream ever walks more
  than ``max_values`` values;
- an alias inside the node it names (``&a [*a]``, a loop);
- an integer literal of more than ``bounds.max_integer_digits`` characters (Python
  refuses to print such numbers, so no message could show it);
- a key given twice in one mapping (PyYAML keeps the last one silently).
"""
from __future__ import annotations

import reprlib
from dataclasses import dataclass

import yaml

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60


@dataclass(frozen=True)
class YamlBounds:
    """What a kind of file may hold, and the words its messages use for it."""
    noun: str                    # "recipe": "a recipe needs a few levels of nesting"
    max_bytes: int = 256 * 1024
    max_values: int = 10_000
    max_nesting: int = 64
    max_integer_digits: int = 100
    size_advice: str = ""        # after "a recipe is a few kilobytes"
    values_advice: str = ""      # after "where a recipe needs a few hundred"


class BoundedYamlError(Exception):
    """A file the bounded reader refuses; the message says why and where, without the
    file's name, which the caller's own error adds."""


def read_bounded_yaml(path, bounds: YamlBounds, name: str | None = None):
    """The parsed YAML of the file ``path``, read within ``bounds``; ``name`` is what
    PyYAML's marks call the file (``in "recipe.yaml", line 3``). Raises
    BoundedYamlError (and OSError where the file cannot be read)."""
    with open(path, "rb") as handle:
        data = handle.read(bounds.max_bytes + 1)
    noun = bounds.noun
    if len(data) > bounds.max_bytes:
        raise BoundedYamlError(f"larger than {bounds.max_bytes // 1024} KiB; a {noun} is "
                               f"a few kilobytes{bounds.size_advice}")
    try:
        text = data.decode("utf-8-sig")  # a leading byte-order mark is fine
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise BoundedYamlError(f"line {line}, column {column}: byte "
                               f"0x{data[exc.start]:02x} is not UTF-8 text; save the "
                               f"{noun} as UTF-8") from None
    line = _too_deep(text, bounds.max_nesting)
    if line:
        raise BoundedYamlError(f"line {line}: brackets nested more than "
                               f"{bounds.max_nesting} deep; a {noun} needs a few levels")
    loader = None
    try:
        loader = _BoundedLoader(text, bounds)  # reads the first characters already
        if name is not None:
            loader.name = name
        return loader.get_single_data()
    except _TooLarge as exc:
        raise BoundedYamlError(str(exc)) from None
    except yaml.YAMLError as exc:
        raise BoundedYamlError(f"not valid YAML: {exc}") from None
    except RecursionError:  # a limit lower than max_nesting, set by another library
        raise BoundedYamlError(f"not valid YAML: nested too deeply to read; a {noun} "
                               f"needs a few levels of nesting") from None
    except (ValueError, OverflowError, TypeError) as exc:  # e.g. a date like 2024-13-45
        raise BoundedYamlError(f"not valid YAML: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()


class _TooLarge(Exception):
    """A document beyond the reader's bounds; the message says which and where."""


def _too_deep(text: str, max_nesting: int) -> int | None:
    """The line where ``[``/``{`` brackets nest more than ``max_nesting`` deep, or None.
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
            if depth > max_nesting:
                return line
        elif char in "]}":
            depth = max(0, depth - 1)
    return None


def _where(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that counts values as it composes them (aliases by what they
    expand to), refuses a key given twice in one mapping (a merge key's may be
    overridden) and integers too long to print."""

    def __init__(self, stream, bounds: YamlBounds):
        super().__init__(stream)
        self._bounds = bounds
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
        bounds = self._bounds
        self._values += values
        if self._values > bounds.max_values:
            what = (f" (the alias *{alias} stands for {values}); aliases that expand to "
                    f"more are refused: write the values out" if alias else
                    bounds.values_advice)
            raise _TooLarge(f"{_where(mark)}: more than {bounds.max_values} values, "
                            f"where a {bounds.noun} needs a few hundred{what}")
        if depth > bounds.max_nesting:
            # PyYAML's own limit is Python's recursion limit, which other libraries
            # raise (torch.compile sets 2000): one rule whatever was imported before.
            what = f", the alias *{alias} included" if alias else ""
            raise _TooLarge(f"not valid YAML: nested too deeply to read: more than "
                            f"{bounds.max_nesting} levels at {_where(mark)}{what}; a "
                            f"{bounds.noun} needs a few levels of nesting")

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
        if len(node.value) > self._bounds.max_integer_digits:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {len(node.value)} characters "
                f"({_REPR.repr(node.value)}); a {self._bounds.noun}'s numbers are far "
                f"smaller", node.start_mark)
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
                        f"found key {_REPR.repr(key)} twice (first "
                        f"{first.start_mark.line + 1}:{first.start_mark.column + 1}); "
                        f"give each key once", key_node.start_mark)
        return super().construct_mapping(node, deep)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)
