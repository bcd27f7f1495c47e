"""``deep500 run --select 'framework=pytorch,operator~Conv'``: run a subset of a recipe's
configurations, as pytest-benchmark's ``-k`` and asv's ``--bench`` run a subset of the
benchmarks.

The selection is terms joined by commas; a configuration is run when every term holds:

- ``key=value``: the setting ``key`` equals ``value`` as text, or is a component whose
  name, operator type or label is ``value`` or starts with ``value`` and a space
  (``operator=Relu`` picks ``Relu 8x16``, not ``Relu6 8x16``), as ``deep500 history
  --config`` matches;
- ``key~text``: ``text`` occurs in the setting (its text, name, label or whole
  description), ignoring case.

``key`` is one of the recipe's settings (its ``fixed`` and ``mutable`` keys); an unknown
key, a term of neither form, or a selection that keeps no configuration is an error
(exit status 2) before anything runs. A selected configuration is the same
configuration as in a run of the whole recipe, so the two compare (``deep500 compare``,
``--baseline``).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from deep500.recipe.schema import Recipe
from deep500.utils.errors import RecipeError


@dataclass(frozen=True)
class Term:
    key: str
    value: str
    exact: bool  # '=' (exact) or '~' (substring, ignoring case)

    def holds(self, configuration: dict) -> bool:
        if self.key not in configuration:
            return False
        texts = value_texts(configuration[self.key])
        if self.exact:
            return any(t == self.value or t.startswith(self.value + " ") for t in texts)
        wanted = self.value.lower()
        return any(wanted in t.lower() for t in texts)


def value_texts(value) -> list[str]:
    """The texts a setting is matched by: itself as text, and for a component (an
    operator, a kernel, an optimizer) its label, name and type first, then every value
    of its description (never its keys: ``~s`` must not match every operator by the
    word "shape")."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return [str(value)]
    texts = []
    for attribute in ("label", "name", "op_type", "type"):
        text = getattr(value, attribute, None)
        if text is None and isinstance(value, dict):
            text = value.get(attribute)
        if isinstance(text, str):
            texts.append(text)
    described = value.to_dict() if hasattr(value, "to_dict") else value
    return texts + _leaves(described)


def _leaves(value) -> list[str]:
    if isinstance(value, dict):
        return [text for item in value.values() for text in _leaves(item)]
    if isinstance(value, (list, tuple)):
        return [json.dumps(value, default=str)]
    return [] if value is None else [str(value)]


def parse_selection(text: str, recipe: Recipe) -> list[Term]:
    """The terms of ``text``, checked against ``recipe``'s settings (RecipeError)."""
    keys = sorted(set(recipe.fixed) | set(recipe.mutable))
    terms = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        at = min((i for i in (part.find("="), part.find("~")) if i > 0), default=-1)
        if at < 0:
            raise RecipeError(f"--select {text!r}: {part!r} is neither key=value nor "
                              f"key~text; write e.g. framework=pytorch,operator~Conv")
        key, value = part[:at].strip(), part[at + 1:].strip()
        if key not in keys:
            raise RecipeError(f"--select {text!r}: {recipe.path} has no setting {key!r}; "
                              f"its settings are {', '.join(keys)}")
        terms.append(Term(key, value, part[at] == "="))
    if not terms:
        raise RecipeError(f"--select {text!r}: give at least one key=value or key~text "
                          f"term")
    return terms


@dataclass
class SelectedRecipe(Recipe):
    """A recipe whose configurations are those of the whole recipe that the selection
    keeps (:func:`select`)."""
    selection: str = ""
    terms: list = dataclasses.field(default_factory=list, repr=False)

    def configurations(self) -> list[dict]:
        return [c for c in super().configurations()
                if all(term.holds(c) for term in self.terms)]


def select(recipe: Recipe, text: str | None) -> Recipe:
    """``recipe`` restricted to the configurations ``text`` selects (``recipe`` itself
    when ``text`` is None); RecipeError when the selection keeps none."""
    if text is None:
        return recipe
    terms = parse_selection(text, recipe)
    fields = {f.name: getattr(recipe, f.name) for f in dataclasses.fields(Recipe)}
    selected = SelectedRecipe(**fields, selection=text, terms=terms)
    if not selected.configurations():
        total = len(recipe.configurations())
        raise RecipeError(f"--select {text!r} keeps none of the {total} configurations of "
                          f"{recipe.path}; 'deep500 run --select' matches key=value "
                          f"exactly (or by the first words of a label) and key~text as a "
                          f"substring")
    return selected
