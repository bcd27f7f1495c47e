"""Every problem found in a recipe, each with its key path, raised as one RecipeError.

Checks report into a :class:`Problems` and go on, so a user sees all that is wrong
with a recipe at once (``recipe.yaml: mutable.framework[0]: ...``), not one problem per
attempt.
"""
from __future__ import annotations

import reprlib
from contextlib import contextmanager

from deep500.utils.errors import Deep500Error, RecipeError

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 3, 60, 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6

# Errors that library code raises on values of an unexpected type or size; a check that
# meets one reports it as a problem of the value it was checking.
VALUE_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError,
                ArithmeticError, RecursionError, MemoryError, UnicodeError)


def show(value) -> str:
    """A short ``repr`` (deep or long values are cut), for messages."""
    return _REPR.repr(value)


def describe(value) -> str:
    """What a value is, for "expected X, got <describe(value)>"."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {value}"
    if isinstance(value, (int, float)):
        return f"the number {show(value)}"
    if isinstance(value, str):
        return f"the string {show(value)}" if value else "an empty string"
    if isinstance(value, list):
        return f"a list {show(value)}" if value else "an empty list []"
    if isinstance(value, dict):
        return f"a mapping {show(value)}" if value else "an empty mapping {}"
    return f"a {type(value).__name__} {show(value)}"


def key_path(*parts) -> str:
    """``("mutable", "framework", 0)`` -> ``"mutable.framework[0]"``."""
    text = ""
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            text += f"[{part}]"
        elif part not in ("", None):
            text += f".{part}" if text else str(part)
    return text


class Problems:
    """Collects ``"<key path>: <problem>"`` messages of one recipe file."""

    def __init__(self, source: str):
        self.source = source
        self.messages: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def add(self, path: str, message: str) -> None:
        self.messages.append(f"{path}: {message}" if path else message)

    @contextmanager
    def check(self, path: str, value=None):
        """Run a check; a RecipeError (or another Deep500Error) becomes a problem at
        ``path``, and so does an unexpected library error on ``value``."""
        try:
            yield
        except Deep500Error as exc:
            text = str(exc)
            if isinstance(exc, RecipeError) and getattr(exc, "problems", None):
                self.messages.extend(exc.problems)
            elif path and not text.startswith(path):
                self.add(path, text)
            else:
                self.messages.append(text)
        except VALUE_ERRORS as exc:
            self.add(path, f"{show(value)} cannot be used here "
                           f"({type(exc).__name__}: {exc})")

    def error(self) -> RecipeError:
        """One RecipeError listing every problem (``problems`` holds them one by one)."""
        if len(self.messages) == 1:
            text = f"{self.source}: {self.messages[0]}"
        else:
            text = "\n".join([f"{self.source}: {len(self.messages)} problems (nothing "
                              f"was run):"] +
                             [f"  {self.source}: {m}" for m in self.messages])
        error = RecipeError(text)
        error.problems = list(self.messages)
        return error

    def raise_if_any(self) -> None:
        if self.messages:
            raise self.error()
