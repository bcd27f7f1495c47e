"""Recipe fuzzer: seeded text and structure mutations of every shipped recipe (and two
small ones written here: operators without C++ kernels, a network from an ONNX file),
each passed through ``load_recipe`` or ``parse_recipe``. A clean parse is fine; an
error must be a ``Deep500Error`` (a ``RecipeError`` naming the key). Anything else
escaping (``TypeError``, ``KeyError``, ``UnicodeDecodeError``, ``RecursionError``, ...)
fails the test with the case's number and mutation, so it is reproduced from the seed;
so does a library error that only the loader's last-resort nets caught.

Text mutations work on the file's bytes: byte flips, truncations, inserted YAML
punctuation, deleted spans, broken indentation, duplicated lines, deep bracket nesting,
encodings other than UTF-8, alias bombs ('billion laughs', and an alias inside its own
anchor), deep block nesting and huge scalars (strings, integers, floats, binary). Every
case must answer within ``CASE_LIMIT_S`` (the reader's bounds, deep500.recipe.
recipe_yaml: unbounded, a 9-level alias bomb ran for minutes). Structure mutations change one node of the parsed
recipe: another type in its place, a list for a scalar and back, a deleted, duplicated
or renamed key, deep nesting, huge, negative, infinite and NaN numbers; for the ONNX
recipe, the model file is also truncated or flipped.
"""
from __future__ import annotations

import copy
import math
import os
import pathlib
import random
import shutil
import time
import traceback
import warnings

import numpy as np
import pytest
import yaml

from deep500.recipe import load_recipe, parse_recipe
from deep500.utils.errors import Deep500Error

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
SEED = 17
CASES = 420
CASE_LIMIT_S = 20.0  # generous under load; an unbounded reader takes minutes

OPERATORS_RECIPE = """\
name: small-operators
experiment: operators
fixed: {dtype: float32, threads: 1, device: cpu, seed: 0}
mutable:
  framework: [reference, pytorch]
  operator:
    - {op: Relu, shape: [4, 5]}
    - {op: Softmax, shape: [3, 7], axis: -1}
    - {op: Gemm, from: deepbench_gemm.csv, row: 138}
    - {op: Conv, inputs: [[1, 2, 5, 5], [3, 2, 3, 3]], attributes: {pads: [1, 1, 1, 1]}}
metrics:
  WallclockTime: {reruns: 5, warmup: 1}
  L2Error: {}
  MaxError: {}
acceptance: ["L2Error.relative <= 1e-4", "MaxError <= 1e-3"]
timeout: 60
machine: machine.yaml
"""

# The machine file the operators recipe names (deep500.utils.machine).
MACHINE_FILE = """\
name: fuzz-machine
source: written by the recipe fuzzer
network: {alpha_s: 2.0e-6, beta_s_per_byte: 1.0e-10}
reduction: {gamma_cache_s_per_byte: 1.0e-10}
memory: {bandwidth_bytes_per_s: 1.0e+10}
software: {allreduce_call_overhead_s: {ring: {value: 3.0e-6}}}
"""

ONNX_RECIPE = """\
name: small-network
experiment: networks
fixed: {dtype: float32, threads: 1, seed: 0, batch_size: 2, mode: inference}
mutable:
  network: [{file: model.onnx}, {model: mlp, input_shape: [1, 4, 4], hidden: [8]}]
  executor: [reference, onnxruntime]
metrics:
  WallclockTime: {reruns: 3, warmup: 1}
  L2Error: {}
acceptance: ["L2Error.relative <= 1e-5"]
"""

# Values put in place of a node: every YAML type, and the numbers that break arithmetic.
REPLACEMENTS = [None, True, False, 0, 1, -1, -7, 0.5, 10**30, 2**63, -2**63, 1e308,
                float("inf"), float("-inf"), float("nan"), "", "x", "reference",
                "../../nowhere", "é" * 3, "a" * 2000, [], {}, [[]], [["reference"]],
                {"a": 1}, {"op": "Relu"}, [1, "two", None], {1: 2}]
# What the loader says when an unexpected library error reached its safety nets.
LAST_RESORT = ("the recipe could not be checked (", " cannot be used here (")
YAML_PUNCTUATION = list(":{}[],-#&*!|>'\"%@`?\t\n ") + ["\\", "\x00", "\r", "~", "..."]


def _base_recipes(folder: pathlib.Path) -> dict[str, pathlib.Path]:
    """Every shipped recipe plus the two written here, all in ``folder`` (the shipped
    recipes' C++ kernel sources next to them, as in ``recipes/``)."""
    shutil.copytree(REPO_ROOT / "recipes", folder, dirs_exist_ok=True)
    (folder / "small_operators.yaml").write_text(OPERATORS_RECIPE)
    (folder / "small_network.yaml").write_text(ONNX_RECIPE)
    (folder / "machine.yaml").write_text(MACHINE_FILE)
    from deep500.networks import create_model
    import onnx
    onnx.save(create_model("mlp", batch_size=2, input_shape=(1, 4, 4), hidden=(8,)),
              str(folder / "model.onnx"))
    return {p.name: p for p in sorted(folder.glob("*.yaml")) if p.name != "machine.yaml"}


# -- text mutations: (rng, bytes) -> (bytes, description) -----------------------------

def _flip(rng, data):
    i = rng.randrange(len(data))
    bit = 1 << rng.randrange(8)
    return data[:i] + bytes([data[i] ^ bit]) + data[i + 1:], f"flip bit {bit} of byte {i}"


def _truncate(rng, data):
    i = rng.randrange(len(data))
    return data[:i], f"truncate at {i}"


def _insert(rng, data):
    i = rng.randrange(len(data) + 1)
    text = rng.choice(YAML_PUNCTUATION) * rng.choice((1, 1, 2, 5))
    return data[:i] + text.encode() + data[i:], f"insert {text!r} at {i}"


def _delete(rng, data):
    i = rng.randrange(len(data))
    n = rng.randint(1, 40)
    return data[:i] + data[i + n:], f"delete {n} bytes at {i}"


def _indent(rng, data):
    lines = data.split(b"\n")
    candidates = [i for i, line in enumerate(lines) if line.strip()
                  and not line.lstrip().startswith(b"#")]
    i = rng.choice(candidates)
    change = rng.choice(("+1", "+3", "-1", "-2", "tab", "dedent"))
    line = lines[i]
    if change.startswith("+"):
        line = b" " * int(change[1:]) + line
    elif change.startswith("-"):
        line = line[min(int(change[1:]), len(line) - len(line.lstrip())):]
    elif change == "tab":
        line = b"\t" + line
    else:
        line = line.lstrip()
    lines[i] = line
    return b"\n".join(lines), f"indentation {change} on line {i + 1}"


def _duplicate_line(rng, data):
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    j = rng.randrange(len(lines))
    lines.insert(j, lines[i])
    return b"\n".join(lines), f"copy line {i + 1} before line {j + 1}"


def _nest(rng, data):
    depth = rng.choice((50, 2000, 20000))
    opening, closing = rng.choice((("[", "]"), ("{a: ", "}")))
    i = data.find(b"\n", rng.randrange(len(data)))
    i = len(data) if i < 0 else i
    text = f"\nnested: {opening * depth}1{closing * depth}".encode()
    return data[:i] + text + data[i:], f"nesting of depth {depth} at {i}"


def _not_utf8(rng, data):
    how = rng.choice(("latin-1", "utf-16", "bytes", "bom"))
    if how == "latin-1":
        text = data.decode("utf-8").replace("name:", "name: café #", 1)
        return text.encode("latin-1", errors="replace"), "latin-1 encoded with é"
    if how == "utf-16":
        return data.decode("utf-8").encode("utf-16"), "UTF-16 encoded"
    if how == "bom":
        return b"\xef\xbb\xbf" + data, "UTF-8 byte-order mark"
    i = rng.randrange(len(data) + 1)
    junk = rng.choice((b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80\x81\x82"))
    return data[:i] + junk + data[i:], f"insert bytes {junk!r} at {i}"


def _alias_bomb(rng, data):
    """'Billion laughs': each anchor a list of ``width`` aliases of the one before, put
    at the top level or in place of ``fixed``; or an alias inside its own anchor."""
    levels, width = rng.choice(((3, 3), (9, 9), (12, 10), (40, 2)))
    if rng.random() < 0.2:
        bomb = "\nloop: &loop [1, {a: *loop}]\n"
        return data.rstrip(b"\n") + bomb.encode(), "an alias inside its own anchor"
    lines = ["laugh0: &laugh0 [lol, lol]"]
    lines += [f"laugh{i}: &laugh{i} [{', '.join([f'*laugh{i - 1}'] * width)}]"
              for i in range(1, levels + 1)]
    where = rng.choice(("top", "fixed"))
    text = "\n".join(lines) + "\n"
    if where == "fixed":
        text += f"fixed: {{dtype: *laugh{levels}}}\n"
        data = b"\n".join(line for line in data.split(b"\n")
                          if not line.startswith(b"fixed:"))
    return (text.encode() + data,
            f"alias bomb of {levels} levels x {width} at the {where}")


def _deep_block(rng, data):
    depth = rng.choice((60, 70, 3000, 60000))
    text = rng.choice(("\nnested:\n  " + "- " * depth + "1\n",
                       "\nnested:\n" + "".join(f"{' ' * i}k{i}:\n"
                                                 for i in range(1, min(depth, 700)))
                       + " " * min(depth, 700) + "1\n"))
    return data.rstrip(b"\n") + text.encode(), f"block nesting of depth {depth}"


def _huge_scalar(rng, data):
    """A value of the recipe (after its first ': ') replaced by a huge scalar."""
    size = rng.choice((5_000, 200_000, 300_000))
    scalar = rng.choice(("x" * size, '"' + "é" * (size // 2) + '"', "9" * size,
                         "0x" + "f" * size, "1" + "0" * size + ".5", "1e" + "9" * size,
                         "!!binary " + "QUFB" * (size // 4)))
    starts = [i for i in range(len(data) - 1) if data[i:i + 2] == b": "]
    i = rng.choice(starts) + 2
    end = data.find(b"\n", i)
    end = len(data) if end < 0 else end
    return (data[:i] + scalar.encode() + data[end:],
            f"value at byte {i} replaced by a scalar of {len(scalar)} characters "
            f"{scalar[:12]!r}...")


TEXT_MUTATIONS = [_flip, _truncate, _insert, _delete, _indent, _duplicate_line, _nest,
                  _not_utf8, _alias_bomb, _deep_block, _huge_scalar]


# -- structure mutations: (rng, raw) -> description, changing raw in place ------------

def _paths(node, prefix=()):
    """Every path (tuple of keys and indices) in a parsed recipe, the root included."""
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, prefix + (index,))


def _get(raw, path):
    for key in path:
        raw = raw[key]
    return raw


def _set(raw, path, value):
    if not path:
        return value
    _get(raw, path[:-1])[path[-1]] = value
    return raw


def _replacement(rng):
    return copy.deepcopy(rng.choice(REPLACEMENTS))


def _structure_mutation(rng, raw):
    paths = list(_paths(raw))
    path = rng.choice(paths)
    value = _get(raw, path)
    shown = ".".join(str(k) for k in path) or "<root>"
    parent = _get(raw, path[:-1]) if path else None
    operation = rng.choice(("retype", "retype", "to_list", "to_mapping", "to_scalar",
                            "delete", "duplicate", "rename", "nest", "number", "number"))
    if operation == "retype":
        new = _replacement(rng)
        return _set(raw, path, new), f"{shown} = {new!r:.60}"
    if operation == "to_list":
        return _set(raw, path, [value]), f"{shown} wrapped in a list"
    if operation == "to_mapping":
        key = value if isinstance(value, (str, int, float, bool)) else "x"
        return _set(raw, path, {key: value}), f"{shown} wrapped in a mapping"
    if operation == "to_scalar":
        if isinstance(value, list) and value:
            new = value[0]
        elif isinstance(value, dict) and value:
            new = next(iter(value))
        else:
            new = 5
        return _set(raw, path, new), f"{shown} = {new!r:.60} (a scalar)"
    if operation == "delete" and path:
        del parent[path[-1]]
        return raw, f"delete {shown}"
    if operation == "duplicate" and path:
        if isinstance(parent, list):
            parent.append(copy.deepcopy(value))
            return raw, f"duplicate {shown} at the end of its list"
        parent[f"{path[-1]}"[::-1]] = copy.deepcopy(value)
        return raw, f"copy {shown} under a reversed key"
    if operation == "rename" and path and isinstance(parent, dict):
        siblings = [k for k in parent if k != path[-1]]
        new_key = rng.choice([path[-1].upper() if isinstance(path[-1], str) else 1,
                              1, None, True, 2.5, "", "fixed", "mutable", "metrics",
                              "op", "shape", "threads", *siblings])
        parent[new_key] = parent.pop(path[-1])
        return raw, f"rename {shown} to {new_key!r}"
    if operation == "nest":
        depth = rng.choice((3, 60, 400))
        for _ in range(depth):
            value = rng.choice(([value], {"a": value}))
        return _set(raw, path, value), f"{shown} nested {depth} deep"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        new = rng.choice((-value, -1, 0, 10**30, 2**63 - 1, 1e308, float("nan"),
                          float("inf"), value + 0.5))
    else:
        new = rng.choice((-1, 0, 10**30, float("nan"), float("-inf")))
    return _set(raw, path, new), f"{shown} = {new!r:.60} (a number)"


def _file_mutation(rng, folder: pathlib.Path) -> str:
    """Break the ONNX file the small network recipe reads."""
    path = folder / "model.onnx"
    data = path.read_bytes()
    how = rng.choice(("truncate", "flip", "empty"))
    if how == "truncate":
        i = rng.randrange(1, len(data))
        path.write_bytes(data[:i])
        return f"model.onnx truncated at {i} of {len(data)} bytes"
    if how == "empty":
        path.write_bytes(b"")
        return "model.onnx emptied"
    i = rng.randrange(len(data))
    path.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:])
    return f"model.onnx byte {i} inverted"


def _run_case(index, bases, folder):
    """One case: returns (description, exception or None)."""
    rng = random.Random(SEED * 1_000_003 + index)
    name = rng.choice(sorted(bases))
    path = bases[name]
    original = path.read_bytes()
    model = folder / "model.onnx"
    model_bytes = model.read_bytes()
    choice = rng.random()
    try:
        if name == "small_network.yaml" and choice < 0.15:
            description = _file_mutation(rng, folder)
            call = lambda: load_recipe(str(path))
        elif choice < 0.5:
            mutation = rng.choice(TEXT_MUTATIONS)
            data, description = mutation(rng, original)
            mutated = folder / f"mutated_{index}.yaml"
            mutated.write_bytes(data)
            call = lambda: load_recipe(str(mutated))
        else:
            raw = yaml.safe_load(original)
            raw, description = _structure_mutation(rng, raw)
            call = lambda: parse_recipe(raw, str(path))
        description = f"case {index}: {name}: {description}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                call()
        except Deep500Error as exc:
            # The loader's last-resort nets catch library errors that no check expected;
            # the fuzzer counts them as escapes, so that each gets a proper check.
            if any(net in str(exc) for net in LAST_RESORT):
                return description, exc
            return description, None
        except Exception as exc:  # what the fuzzer looks for
            return description, exc
        return description, None
    finally:
        model.write_bytes(model_bytes)


@pytest.mark.slow
def test_fuzzed_recipes_raise_only_deep500_errors(tmp_path):
    bases = _base_recipes(tmp_path)
    for path in bases.values():  # the unmutated recipes are valid
        load_recipe(str(path))
    started = time.perf_counter()
    escaped = []
    slowest = (0.0, "")
    for index in range(CASES):
        case_started = time.perf_counter()
        description, exc = _run_case(index, bases, tmp_path)
        took = time.perf_counter() - case_started
        slowest = max(slowest, (took, description))
        if took > CASE_LIMIT_S:
            escaped.append(f"{description}\n    took {took:.1f} s (limit {CASE_LIMIT_S} s)")
        if exc is not None:
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            escaped.append(f"{description}\n    {type(exc).__name__}: {str(exc)[:200]} "
                           f"({os.path.basename(frame.filename)}:{frame.lineno})")
    elapsed = time.perf_counter() - started
    print(f"{CASES} recipe mutations in {elapsed:.1f} s: {len(escaped)} escaped; "
          f"slowest {slowest[0]:.2f} s ({slowest[1]})")
    assert not escaped, f"{len(escaped)} of {CASES} cases let a non-Deep500Error out " \
        f"or took too long:\n" + \
        "\n".join(escaped)
