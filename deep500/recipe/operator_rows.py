"""Which rows of a DeepBench-style CSV one operator entry of a recipe stands for.

The Deep500 paper (Ben-Nun et al., IPDPS 2019, Fig. 6) shows Level 0 as distributions
over every DeepBench kernel; an entry with ``rows:`` selects many rows at once::

    {op: Gemm, from: deepbench_gemm.csv, rows: all}
    {op: Conv, from: deepbench_conv.csv, rows: "0-40"}          # 0 to 40, both included
    {op: Conv, from: deepbench_conv.csv, rows: [0, 3, "10-20"]}
    {op: Gemm, from: deepbench_gemm.csv, rows: all, kind: training, max_gflop: 2,
     max_elements: 16000000, sample: 20, seed: 0}

Selection runs in that order: the ``rows`` given, then the filters (``kind``: the CSV's
``set`` column, DeepBench's ``training_set``, ``inference_server_set`` and
``inference_device_set``; ``max_gflop``: the row's analytic FLOPs,
``deep500.utils.flops``; ``max_elements``: its inputs' elements, summed, which bound
memory where FLOPs do not: DeepBench's m=1024 n=1 k=500000 GEMM is 1 GFLOP on 2 GB of
float32), then ``sample: N`` rows drawn without replacement by
``numpy.random.default_rng(seed)`` and kept in file order. :class:`RowSelection` says
what was chosen, so that a report can say which rows were measured.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from deep500.recipe.problems import describe, show
from deep500.utils.errors import RecipeError

SELECTION_KEYS = ("rows", "kind", "max_gflop", "max_elements", "sample", "seed")

# kind -> the values of DeepBench's ``set`` column it takes
KINDS = {
    "training": ("training_set",),
    "inference": ("inference_server_set", "inference_device_set"),
    "inference_server": ("inference_server_set",),
    "inference_device": ("inference_device_set",),
}

_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")


@dataclass(frozen=True)
class RowSelection:
    """The rows of ``file`` chosen by an entry, and in words how they were chosen."""
    file: str
    rows: tuple          # indices into the CSV's data rows, in file order
    total: int           # data rows the file holds
    how: str             # e.g. "rows all, kind training, 20 sampled (seed 0) of 160"

    @property
    def sampled(self) -> bool:
        return "sampled" in self.how

    def text(self) -> str:
        """One sentence for a report: the file, how rows were chosen, and which."""
        return (f"{self.file}: {len(self.rows)} of its {self.total} rows ({self.how}): "
                f"rows {compact_ranges(self.rows)}")


def compact_ranges(indices) -> str:
    """``[0, 1, 2, 5, 7, 8]`` → ``"0-2, 5, 7-8"``."""
    parts, start, last = [], None, None
    for index in sorted(indices):
        if start is not None and index == last + 1:
            last = index
            continue
        if start is not None:
            parts.append(f"{start}" if start == last else f"{start}-{last}")
        start = last = index
    if start is not None:
        parts.append(f"{start}" if start == last else f"{start}-{last}")
    return ", ".join(parts)


def _listed_rows(value, count: int, where: str) -> list[int]:
    """The indices ``rows:`` names: ``all``, ``"a-b"`` (both included), an integer, or a
    list of integers and ranges; each within the file's ``count`` rows."""
    if value == "all":
        return list(range(count))
    items = value if isinstance(value, list) else [value]
    if not items:
        raise RecipeError(f"{where}: an empty list selects no rows; give 'all', a range "
                          f"such as \"0-40\", or a list of rows")
    chosen = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool):
            first = last = item
        elif isinstance(item, str) and _RANGE.match(item):
            first, last = (int(g) for g in _RANGE.match(item).groups())
            if first > last:
                raise RecipeError(f"{where}: the range {item!r} runs backwards; write it "
                                  f"as \"{last}-{first}\"")
        else:
            raise RecipeError(f"{where}: expected 'all', a range such as \"0-40\" (both "
                              f"ends included), a row number or a list of them, got "
                              f"{describe(item)}")
        if not 0 <= first <= last < count:
            raise RecipeError(f"{where}: row {last if first >= 0 else first} is outside "
                              f"the file's rows 0-{count - 1}")
        chosen.extend(range(first, last + 1))
    return sorted(set(chosen))


def _kinds(value, where: str) -> list[str]:
    names = value if isinstance(value, list) else [value]
    unknown = [n for n in names if not isinstance(n, str) or n not in KINDS]
    if unknown or not names:
        raise RecipeError(f"{where}: unknown kind {show(unknown[0] if unknown else value)}; "
                          f"known: {sorted(KINDS)}")
    return names


def _count(value, where: str, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise RecipeError(f"{where}: expected an integer of at least {least}, got "
                          f"{describe(value)}")
    return value


def select_rows(entry: dict, table: list[dict], file: str, where: str,
                gflop_of=None, elements_of=None) -> RowSelection:
    """The rows of ``table`` (the CSV's rows) that ``entry``'s selection keys choose.

    ``gflop_of(index)`` and ``elements_of(index)`` give the analytic GFLOP and the
    input elements of row ``index`` (needed for ``max_gflop``, ``max_elements``). Raises a
    RecipeError naming the key at ``where`` for a bad range, an unknown kind, a filter
    that leaves nothing, or a sample larger than what is left."""
    if "pass" in entry:
        raise RecipeError(f"{where}.pass: DeepBench's CSVs have no pass column (their "
                          f"training rows are timed forward and backward at the same "
                          f"size), and the operators experiment times forward calls "
                          f"only; remove 'pass' (kind: training selects the training "
                          f"rows)")
    unknown = sorted(k for k in entry if k not in SELECTION_KEYS)
    if unknown:
        raise RecipeError(f"{where}: unexpected keys {unknown} next to 'rows' (a selection "
                          f"takes {list(SELECTION_KEYS)})")
    indices = _listed_rows(entry.get("rows"), len(table), f"{where}.rows")
    how = ["rows " + (entry["rows"] if entry.get("rows") == "all"
                      else compact_ranges(indices))]
    if "kind" in entry:
        kinds = _kinds(entry["kind"], f"{where}.kind")
        sets = {s for k in kinds for s in KINDS[k]}
        if any("set" not in table[i] for i in indices):
            raise RecipeError(f"{where}.kind: {file} has no 'set' column to tell training "
                              f"from inference rows")
        indices = [i for i in indices if table[i]["set"] in sets]
        how.append("kind " + "/".join(kinds))
    for key, size_of, unit, said in (
            ("max_gflop", gflop_of, "GFLOP", "at most {:g} GFLOP"),
            ("max_elements", elements_of, "input elements",
             "inputs of at most {:g} elements")):
        if key not in entry:
            continue
        bound = entry[key]
        if not isinstance(bound, (int, float)) or isinstance(bound, bool) or not bound > 0:
            raise RecipeError(f"{where}.{key}: expected a positive number of {unit}, "
                              f"got {describe(bound)}")
        indices = [i for i in indices if size_of(i) <= bound]
        how.append(said.format(bound))
    if not indices:
        raise RecipeError(f"{where}: the selection ({', '.join(how)}) leaves no row of "
                          f"{file}; widen 'rows' or loosen the filters")
    seed = _count(entry.get("seed", 0), f"{where}.seed", 0)
    if "seed" in entry and "sample" not in entry:
        raise RecipeError(f"{where}.seed: a seed only chooses a sample; add 'sample: N' "
                          f"or remove 'seed'")
    if "sample" in entry:
        size = _count(entry["sample"], f"{where}.sample", 1)
        if size > len(indices):
            raise RecipeError(f"{where}.sample: {size} rows asked, but the selection "
                              f"({', '.join(how)}) holds only {len(indices)}; ask for at "
                              f"most {len(indices)}, or drop 'sample' to take them all")
        picked = np.random.default_rng(seed).choice(len(indices), size, replace=False)
        how.append(f"{size} sampled (seed {seed}) of {len(indices)}")
        indices = [indices[i] for i in sorted(picked)]
    return RowSelection(file, tuple(indices), len(table), ", ".join(how))


def row_selections(recipe) -> list[str]:
    """How each entry of ``recipe`` with ``rows:`` chose its rows, once each, for the
    manifest (``row_selections``) and so the report."""
    return list(dict.fromkeys(
        value.selection for values in recipe.mutable.values() for value in values
        if isinstance(getattr(value, "selection", None), str)))
