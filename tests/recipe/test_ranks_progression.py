"""``--ranks`` progressions: ``1,2,4,...,1024`` (the documented command) is the powers
of two, ``1,2,3,...,8`` every count, and the forms that say nothing for sure are
Deep500Errors naming what is wrong."""
import json
import os
import re

import pytest
import yaml

from deep500.cli import main
from deep500.recipe.predict import DEFAULT_RANKS, parse_ranks
from deep500.utils.errors import Deep500Error

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("text, expected", [
    ("1,2,4,...,1024", list(DEFAULT_RANKS)),
    ("1,2,3,...,8", [1, 2, 3, 4, 5, 6, 7, 8]),
    ("4,8,12,...,24", [4, 8, 12, 16, 20, 24]),
    ("1,4,16,...,1024", [1, 4, 16, 64, 256, 1024]),
    ("3,6,12,...,48", [3, 6, 12, 24, 48]),
    ("2,3,...,5", [2, 3, 4, 5]),            # 2 does not divide 3: only arithmetic fits
    (" 1 , 2 , 4 , … , 16 ", [1, 2, 4, 8, 16]),   # spaces and the one-character ellipsis
    ("1,2,4,...,4", [1, 2, 4]),
    ("8,1,4,4", [1, 4, 8]),                 # a plain list, sorted without repeats
])
def test_progressions_and_lists(text, expected):
    assert parse_ranks(text) == expected


@pytest.mark.parametrize("text, message", [
    ("1,...", "at least two terms before it"),
    ("...,8", "at least two terms before it"),
    ("1,2,4,...", "followed by exactly one term"),
    ("1,2,4,...,64,128", "the last rank count alone"),
    ("1,2,...,7", re.escape("fits both a difference of 1 and a ratio of 2; give a third "
                            "term: 1,2,3,... (arithmetic) or 1,2,4,... (geometric)")),
    ("1,2,...,8", "fits both"),
    ("1,2,4,...,1000", r"never reaches 1000: it goes 512, 1024"),
    ("1,2,3,...,7.5", "'7.5' is not a rank count"),
    ("2,4,6,...,9", r"\(adding 2\) never reaches 9"),
    ("1,2,4,...,2", "below the terms before"),
    ("1,3,4,...,9", "neither one difference nor one whole-number ratio"),
    ("4,2,...,1", "must increase"),
    ("1,2,4,...,8,...,32", "one '...' at most"),
    ("1,,4", "an empty term"),
    ("1,2,3,...,100000", "more than 10000 rank counts"),
    ("0,1,2,...,4", "integers >= 1"),
    ("", "separated by commas"),
])
def test_ill_formed_progressions_say_why(text, message):
    with pytest.raises(Deep500Error, match=message):
        parse_ranks(text)


def _documented_ranks() -> list[str]:
    """Every ``--ranks VALUE`` written in the README and the docs."""
    found = []
    for path in [os.path.join(REPO, "README.md")] + [
            os.path.join(REPO, "docs", name) for name in os.listdir(os.path.join(REPO, "docs"))
            if name.endswith(".md")]:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        found += re.findall(r"--ranks\s+([0-9][0-9.,…]*[0-9])", text)
    return found


def test_every_documented_ranks_value_parses():
    values = _documented_ranks()
    assert "1,2,4,...,1024" in values
    for value in values:
        assert parse_ranks(value)


def test_the_documented_command_runs(tmp_path, capsys):
    """``deep500 predict RECIPE --machine infiniband-hdr --ranks 1,2,4,...,1024`` as
    README.md and docs/performance_models.md write it (a small recipe, analytic
    compute: well under a second)."""
    recipe = {"name": "predicted", "experiment": "distributed",
              "fixed": {"dataset": {"name": "digits", "normalize": "standardize"},
                        "network": {"model": "mlp", "hidden": [16]},
                        "optimizer": {"type": "sgd", "learning_rate": 0.1},
                        "batch_size": 8, "epochs": 1, "threads": 1, "seed": 0,
                        "scheme": {"scheme": "ConsistentDecentralized",
                                   "algorithm": "ring"}}}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    out = tmp_path / "curves.json"
    assert main(["predict", str(path), "--machine", "infiniband-hdr", "--ranks",
                 "1,2,4,...,1024", "--compute", "analytic", "--plot", "none",
                 "--json", str(out)]) == 0
    (workload,) = json.loads(out.read_text())["workloads"]
    assert [row["ranks"] for row in workload["weak"]] == [2 ** k for k in range(11)]
    capsys.readouterr()
    assert main(["predict", str(path), "--machine", "infiniband-hdr", "--ranks",
                 "1,2,...,1024", "--compute", "analytic", "--plot", "none"]) == 2
    assert "give a third term" in capsys.readouterr().err
