"""Reading a recipe's YAML in bounded time and memory, whatever the file holds.

A recipe is a few kilobytes of a few hundred values, so the reader
(:mod:`deep500.utils.bounded_yaml`) refuses, each with a ``RecipeError`` that names the
file and line: a file larger than :data:`MAX_BYTES`; brackets or aliases nested deeper
than :data:`MAX_NESTING`; more than :data:`MAX_VALUES` values counting what aliases
expand to (a "billion laughs" recipe is refused in milliseconds); an alias inside the
node it names; an integer literal of more than :data:`MAX_INTEGER_DIGITS` characters;
a key given twice in one mapping.
"""
from __future__ import annotations

import os

from deep500.recipe.problems import describe
from deep500.utils.bounded_yaml import BoundedYamlError, YamlBounds, read_bounded_yaml
from deep500.utils.errors import RecipeError

MAX_BYTES = 256 * 1024
MAX_VALUES = 10_000
MAX_NESTING = 64
MAX_INTEGER_DIGITS = 100

RECIPE_BOUNDS = YamlBounds(
    noun="recipe", max_bytes=MAX_BYTES, max_values=MAX_VALUES, max_nesting=MAX_NESTING,
    max_integer_digits=MAX_INTEGER_DIGITS,
    size_advice=" (give long lists of operators with 'from: FILE.csv', models with "
                "'file: MODEL.onnx')",
    values_advice="; give long lists of operators with 'from: FILE.csv'")


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
        # marks in messages say 'in "recipe.yaml", line 3, column 1'
        return read_bounded_yaml(path, RECIPE_BOUNDS, name=where)
    except OSError as exc:
        raise RecipeError(f"{where}: cannot be read: {exc.strerror or exc}") from None
    except BoundedYamlError as exc:
        raise RecipeError(f"{where}: {exc}") from None
