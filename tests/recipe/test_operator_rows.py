"""Operator entries that take many DeepBench rows (``rows:``): all, ranges and lists,
filters by kind and size, seeded samples, and the errors for selections that cannot
be made (deep500.recipe.operator_rows)."""
import csv
import math

import numpy as np
import pytest

from deep500.recipe.operator_rows import KINDS, compact_ranges, select_rows
from deep500.recipe.operator_spec import parse_operator
from deep500.recipe.schema import parse_recipe
from deep500.utils import deepbench
from deep500.utils.errors import RecipeError
from deep500.utils.flops import flop_count

GEMM = deepbench.read_rows(deepbench.packaged_data_path("deepbench_gemm.csv"))
CONV = deepbench.read_rows(deepbench.packaged_data_path("deepbench_conv.csv"))


def _specs(entry):
    return parse_operator(entry, "mutable.operator[0]", ".")


def _rows(specs):
    return [int(s.source.rsplit(" ", 1)[1]) for s in specs]


def test_all_rows_of_both_packaged_files():
    gemm = _specs({"op": "Gemm", "from": "deepbench_gemm.csv", "rows": "all"})
    conv = _specs({"op": "Conv", "from": "deepbench_conv.csv", "rows": "all"})
    assert _rows(gemm) == list(range(len(GEMM))) and len(GEMM) == 248
    assert _rows(conv) == list(range(len(CONV))) and len(CONV) == 218
    # each the same operator as the row taken alone
    assert gemm[12] == _specs({"op": "Gemm", "from": "deepbench_gemm.csv", "row": 12})
    assert conv[36].attributes == _specs({"op": "Conv", "from": "deepbench_conv.csv",
                                          "row": 36}).attributes


def test_ranges_and_lists_include_both_ends():
    assert _rows(_specs({"op": "Gemm", "from": "deepbench_gemm.csv",
                         "rows": "0-40"})) == list(range(41))
    assert _rows(_specs({"op": "Gemm", "from": "deepbench_gemm.csv",
                         "rows": [7, "10-12", 3, 11]})) == [3, 7, 10, 11, 12]
    assert _rows(_specs({"op": "Gemm", "from": "deepbench_gemm.csv", "rows": 5})) == [5]


def test_kind_filters_follow_the_set_column():
    training = _specs({"op": "Conv", "from": "deepbench_conv.csv", "rows": "all",
                       "kind": "training"})
    inference = _specs({"op": "Conv", "from": "deepbench_conv.csv", "rows": "all",
                        "kind": "inference"})
    device = _specs({"op": "Conv", "from": "deepbench_conv.csv", "rows": "all",
                     "kind": ["inference_device"]})
    assert len(training) == 94  # the 94 training sizes the paper benchmarks
    assert {CONV[i]["set"] for i in _rows(training)} == {"training_set"}
    assert len(inference) == len(CONV) - 94
    assert {CONV[i]["set"] for i in _rows(device)} == {"inference_device_set"}
    assert set(_rows(device)) < set(_rows(inference))
    assert sorted(KINDS) == ["inference", "inference_device", "inference_server",
                             "training"]


def test_size_filter_keeps_rows_of_at_most_that_many_gflop():
    specs = _specs({"op": "Gemm", "from": "deepbench_gemm.csv", "rows": "all",
                    "max_gflop": 1})
    gflop = [flop_count("Gemm", s.input_shapes, s.attributes) / 1e9 for s in specs]
    assert specs and max(gflop) <= 1
    left_out = set(range(len(GEMM))) - set(_rows(specs))
    assert all(flop_count("Gemm", *deepbench.gemm_spec(GEMM[i])) > 1e9 for i in left_out)


def test_element_filter_bounds_the_inputs_size():
    """DeepBench's m=1024 n=1 k=500000 GEMM is 1 GFLOP but 2 GB of float32 inputs."""
    specs = _specs({"op": "Gemm", "from": "deepbench_gemm.csv", "rows": "all",
                    "max_gflop": 4, "max_elements": 16e6})
    elements = {i: sum(math.prod(s) for s in deepbench.gemm_spec(r)[0])
                for i, r in enumerate(GEMM)}
    assert _rows(specs) == [i for i, r in enumerate(GEMM) if elements[i] <= 16e6
                            and flop_count("Gemm", *deepbench.gemm_spec(r)) <= 4e9]
    assert elements[179] > 5e8 and 179 not in _rows(specs) and len(specs) == 86
    assert "inputs of at most 1.6e+07 elements" in specs[0].selection


def test_a_sample_is_seeded_in_file_order_and_said():
    entry = {"op": "Gemm", "from": "deepbench_gemm.csv", "rows": "all",
             "kind": "training", "sample": 12, "seed": 3}
    first, again = _specs(dict(entry)), _specs(dict(entry))
    other = _specs({**entry, "seed": 4})
    rows = _rows(first)
    assert rows == _rows(again) and rows != _rows(other)
    assert rows == sorted(rows) and len(set(rows)) == 12
    assert {GEMM[i]["set"] for i in rows} == {"training_set"}
    # the draw is numpy's default_rng(seed) over the 160 training rows
    training = [i for i, r in enumerate(GEMM) if r["set"] == "training_set"]
    expected = sorted(training[i] for i in np.random.default_rng(3).choice(160, 12,
                                                                          replace=False))
    assert rows == expected
    text = first[0].selection
    assert text == (f"deepbench_gemm.csv: 12 of its 248 rows (rows all, kind training, "
                    f"12 sampled (seed 3) of 160): rows {compact_ranges(rows)}")


@pytest.mark.parametrize("extra, message", [
    ({"rows": "40-0"}, r"rows: the range '40-0' runs backwards"),
    ({"rows": "0-248"}, r"rows: row 248 is outside the file's rows 0-247"),
    ({"rows": -1}, r"rows: row -1 is outside"),
    ({"rows": "first"}, r"rows: expected 'all', a range such as \"0-40\""),
    ({"rows": []}, r"rows: an empty list selects no rows"),
    ({"rows": "all", "kind": "validation"}, r"kind: unknown kind 'validation'; known: "
                                            r"\['inference', 'inference_device'"),
    ({"rows": "all", "sample": 0}, r"sample: expected an integer of at least 1"),
    ({"rows": "0-3", "sample": 5}, r"sample: 5 rows asked, but the selection \(rows "
                                   r"0-3\) holds only 4"),
    ({"rows": "all", "seed": 2}, r"seed: a seed only chooses a sample"),
    ({"rows": "all", "max_gflop": 1e-6}, r"leaves no row of deepbench_gemm.csv"),
    ({"rows": "all", "max_gflop": "big"}, r"max_gflop: expected a positive number"),
    ({"rows": "all", "max_elements": 0}, r"max_elements: expected a positive number"),
    ({"rows": "all", "row": 3}, r"either 'row' \(one row\) or 'rows' \(many\)"),
    ({"rows": "all", "pass": "forward"}, r"pass: DeepBench's CSVs have no pass column"),
    ({"rows": "all", "set": "training"}, r"unexpected keys \['set'\] next to 'rows'"),
    ({"row": 3, "kind": "training"}, r"those select many rows: use them with 'rows'"),
])
def test_selections_that_cannot_be_made_say_why(extra, message):
    with pytest.raises(RecipeError, match=message) as error:
        _specs({"op": "Gemm", "from": "deepbench_gemm.csv", **extra})
    assert str(error.value).startswith("mutable.operator[0]")


def test_a_file_without_a_set_column_cannot_filter_by_kind(tmp_path):
    path = tmp_path / "sizes.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerows([["m", "n", "k"], [4, 4, 4], [8, 8, 8]])
    assert len(select_rows({"rows": "all"}, deepbench.read_rows(str(path)), "sizes.csv",
                           "op").rows) == 2
    with pytest.raises(RecipeError, match="sizes.csv has no 'set' column"):
        _specs({"op": "Gemm", "from": str(path), "rows": "all", "kind": "training"})


def _recipe(section, entries):
    body = {"experiment": "operators",
            "fixed": {"framework": "reference", "dtype": "float32", "threads": 1}}
    body.setdefault(section, {})["operator"] = entries
    return parse_recipe(body, "rows.yaml")


def test_a_recipe_runs_each_row_and_locates_it_at_its_entry():
    recipe = _recipe("mutable", [
        {"op": "Softmax", "shape": [4, 10], "axis": 1},
        {"op": "Gemm", "from": "deepbench_gemm.csv", "rows": "all", "max_gflop": 0.05},
        {"op": "Conv", "from": "deepbench_conv.csv", "rows": [0, 1]}])
    located = recipe.located("operator")
    small = [i for i, r in enumerate(GEMM)
             if flop_count("Gemm", *deepbench.gemm_spec(r)) <= 0.05e9]
    assert len(located) == 1 + len(small) + 2 == len(recipe.configurations())
    assert [path for path, _ in located] == (["mutable.operator[0]"] +
                                             ["mutable.operator[1]"] * len(small) +
                                             ["mutable.operator[2]"] * 2)
    assert [s.source for _, s in located[-2:]] == ["deepbench_conv.csv row 0",
                                                   "deepbench_conv.csv row 1"]


def test_many_rows_are_refused_where_one_value_is_held_fixed():
    with pytest.raises(RecipeError, match=r"fixed.operator: this entry stands for 3 "
                                          r"alternatives; list it under 'mutable'"):
        _recipe("fixed", {"op": "Gemm", "from": "deepbench_gemm.csv", "rows": "0-2"})
