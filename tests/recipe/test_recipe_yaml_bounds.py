"""A recipe is read in bounded time and memory (deep500.recipe.recipe_yaml): alias bombs,
aliases inside their anchors, deep nesting, huge files and huge numbers are refused
with a RecipeError naming the file and the place; a recipe that uses a few aliases
still loads."""

import pytest

from deep500.recipe import load_recipe
from deep500.recipe.recipe_yaml import MAX_BYTES, MAX_NESTING, MAX_VALUES
from deep500.utils.errors import RecipeError
from tests.yaml_bombs import alias_bomb, refused_in_time

RECIPE = """\
name: aliases
experiment: operators
fixed: &fixed {dtype: float32, threads: 1, device: cpu, seed: 0}
mutable:
  framework: [reference]
  operator:
    - &relu {op: Relu, shape: [4, 5]}
    - {<<: *relu, shape: [2, 3]}
    - *relu
metrics: {WallclockTime: {reruns: 2, warmup: 0}}
"""

# An unbounded reader took 16 s for 8 levels of this, minutes for 9.
LIMIT_S = 5.0  # generous under load; the bounded reader answers in milliseconds


def _bomb(levels: int, width: int) -> str:
    return alias_bomb(levels, width, "fixed: {{dtype: {top}}}")


def _refused(tmp_path, text: str, match: str) -> str:
    return refused_in_time(tmp_path / "hostile.yaml", text, load_recipe, RecipeError,
                           match, LIMIT_S)


def test_a_recipe_with_a_few_aliases_and_a_merge_key_loads(tmp_path):
    path = tmp_path / "aliases.yaml"
    path.write_text(RECIPE)
    recipe = load_recipe(str(path))
    assert [o["shape"] for o in recipe.raw["mutable"]["operator"]] == [[4, 5], [2, 3],
                                                                       [4, 5]]
    path.write_text(RECIPE.replace("shape: [2, 3]}", "shape: [2, 3], shape: [1]}"))
    with pytest.raises(RecipeError, match=r"found key 'shape' twice \(first 8:19\)"):
        load_recipe(str(path))  # a key given twice beside a merge key is still refused


@pytest.mark.parametrize("levels, width", [(9, 9), (12, 10), (60, 2)])
def test_alias_bombs_are_refused_at_the_alias_that_passes_the_bound(tmp_path, levels,
                                                                     width):
    message = _refused(tmp_path, _bomb(levels, width),
                       rf"^hostile.yaml: line \d+, column \d+: more than {MAX_VALUES} "
                       rf"values, where a recipe needs a few hundred \(the alias "
                       rf"\*laugh\d+ stands for \d+\); aliases that expand to more are "
                       rf"refused")
    assert "write the values out" in message


def test_an_alias_nested_past_the_bound_is_refused_by_what_it_expands_to(tmp_path):
    deep = "[" * 40 + "1" + "]" * 40
    text = f"name: x\na: &a {deep}\nb: {'[' * 40}*a{']' * 40}\n"
    _refused(tmp_path, text, rf"not valid YAML: nested too deeply to read: more than "
                             rf"{MAX_NESTING} levels at line 3, column 44, the alias "
                             rf"\*a included")


@pytest.mark.parametrize("text", ["name: x\nfixed: &a [1, *a]\n",
                                  "name: x\nfixed: &a {b: {c: *a}}\n"])
def test_an_alias_inside_its_own_anchor_is_refused(tmp_path, text):
    _refused(tmp_path, text, r"^hostile.yaml: line 2, column \d+: the alias \*a is inside "
                             r"the node &a names \(a loop\)")


def test_deep_block_nesting_is_refused_at_the_level_that_passes_the_bound(tmp_path):
    _refused(tmp_path, "name: x\nnested:\n  " + "- " * 50000 + "1\n",
             rf"^hostile.yaml: not valid YAML: nested too deeply to read: more than "
             rf"{MAX_NESTING} levels at line 3, column")


def test_a_file_larger_than_the_bound_is_refused_before_it_is_parsed(tmp_path):
    _refused(tmp_path, "name: x\ndescription: " + "x" * MAX_BYTES + "\n",
             rf"^hostile.yaml: larger than {MAX_BYTES // 1024} KiB; a recipe is a few "
             rf"kilobytes")


def test_more_values_than_the_bound_are_refused_where_they_pass_it(tmp_path):
    values = ", ".join(["1"] * (MAX_VALUES + 10))
    _refused(tmp_path, f"name: x\nfixed: {{seed: [{values}]}}\n",
             rf"^hostile.yaml: line 2, column \d+: more than {MAX_VALUES} values, where a "
             rf"recipe needs a few hundred; give long lists")


@pytest.mark.parametrize("number", ["9" * 5000, "0x" + "f" * 5000, "0" + "7" * 300,
                                    "0b" + "1" * 300])
def test_an_integer_too_long_to_print_is_refused(tmp_path, number):
    _refused(tmp_path, f"name: x\nfixed: {{threads: {number}}}\n",
             r"^hostile.yaml: not valid YAML: an integer of \d+ characters \('.{20,}'\); "
             r"a recipe's numbers are far smaller")


def test_a_huge_string_is_reported_shortened(tmp_path):
    message = _refused(
        tmp_path, "name: x\nexperiment: operators\nfixed: {dtype: " + "x" * 200_000 +
        "}\nmutable: {framework: [reference], operator: [{op: Relu, shape: [2]}]}\n",
        r"^hostile.yaml: fixed.dtype: dtype must be float32 or float64, got the string "
        r"'x+\.\.\.x+'$")
    assert len(message) < 300
