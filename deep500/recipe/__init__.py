"""Recipes: YAML descriptions of experiments, checked up front and run by
``deep500 run``."""
from deep500.recipe.run_summary import RunSummary
from deep500.recipe.runner import run_recipe
from deep500.recipe.schema import Recipe, load_recipe, parse_recipe

__all__ = ["Recipe", "RunSummary", "load_recipe", "parse_recipe", "run_recipe"]
