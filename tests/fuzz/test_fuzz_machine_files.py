"""Machine-file fuzzer: seeded mutations of a machine description that uses every
section (Hockney segments, exchange segments, δ curves, γ curve, peak FLOP/s, per-call
overheads, fusion copy, in-context ratios), each passed to ``load_machine`` (as a dict,
or as a YAML file), then to ``predict_allreduce``/``predict_allreduce_call`` for every
allreduce algorithm, and a few to ``deep500 predict``.

A mutation replaces one to three nodes with another type, a missing value, zero, a
negative, a subnormal, a huge or non-finite number, an integer beyond float range, a
list or mapping, or deletes the node. Loading may refuse the file only with a
``MachineError`` that names the field; a prediction from a file that loaded must be
a finite number >= 0 (or a ``Deep500Error``); ``deep500 predict`` must exit 0 or 2, never
with a traceback. Every failure is reported with its case number, reproduced from the
seed.
"""
from __future__ import annotations

import copy
import math
import random
import reprlib
import traceback

import pytest
import yaml

from deep500.cli import main
from deep500.lv3_distributed import allreduce_names
from deep500.lv3_distributed.collective_models import (predict_allreduce,
                                                       predict_allreduce_call)
from deep500.utils.errors import Deep500Error
from deep500.utils.machine import MachineError, load_machine

SEED = 29
CASES = 500
CLI_CASES = 4
SIZES = (4, 12345, 1 << 20, 1 << 30)
RANKS = (2, 3, 8, 64, 1000)

MACHINE = {
    "name": "fuzzed",
    "source": "the machine-file fuzzer",
    "network": {
        "alpha_s": {"value": 2e-6, "ci": [1.8e-6, 2.2e-6]},
        "segments": [
            {"min_bytes": 0, "max_bytes": 65536, "alpha_s": 2e-6, "beta_s_per_byte": 2e-10,
             "ci_beta": [1.9e-10, 2.1e-10]},
            {"min_bytes": 65536, "max_bytes": None, "alpha_s": 9e-6, "beta_s_per_byte": 1e-10}],
        "exchange_segments": [
            {"min_bytes": 0, "max_bytes": None, "alpha_s": 3e-6, "beta_s_per_byte": 3e-10}],
        "coherence": {"sum_curve": [{"buffer_bytes": 1 << 20, "value": 4e-11},
                                    {"buffer_bytes": 1 << 26, "value": 0}],
                      "receive_curve": [{"buffer_bytes": 1 << 20, "value": 2e-11}]},
    },
    "reduction": {
        "gamma_cache_s_per_byte": {"value": 1e-10, "buffer_bytes": 65536},
        "gamma_memory_s_per_byte": {"value": 3e-10, "buffer_bytes": 1 << 26},
        "gamma_curve": [{"buffer_bytes": 1 << 20, "value": 1.5e-10},
                        {"buffer_bytes": 1 << 24, "value": 2.5e-10}],
    },
    "memory": {"bandwidth_bytes_per_s": {"value": 1.2e10, "ci": [1.1e10, 1.3e10]}},
    "compute": {"peak_flops_per_s": {"gemm": {1: {"value": 9e10}, 2: 1.7e11},
                                     "conv": {1: 6e10}}},
    "software": {
        "allreduce_call_overhead_s": {"ring": {"value": 3e-6}, "recursive_doubling": 2e-6},
        "fusion_copy": {"per_tensor_s": {"value": 1.5e-6}, "s_per_byte": 1e-10},
        "allreduce_in_context": {"ranks": 2, "algorithms": {
            "ring": [{"nbytes": 65536, "ratio": 1.6}, {"nbytes": 1 << 22, "ratio": 1.1}]}},
    },
}

BAD_VALUES = ("abc", "", None, 0, 0.0, -1, -2.5e-6, 5e-324, 1e-300, 1e308, -1e308,
              math.inf, -math.inf, math.nan, 10 ** 400, True, False, [], [1, 2], {},
              {"value": "x"}, {"value": 1e308}, {"value": None}, {"ci": [1, 2]}, "1e5",
              [None, "x"], 2 ** 70, 1e19, 1e25, 1e-30)


def _paths(node, prefix=()):
    """Every path (tuple of keys and indices) to a node below ``node``."""
    items = (node.items() if isinstance(node, dict)
             else enumerate(node) if isinstance(node, list) else ())
    for key, child in items:
        yield prefix + (key,)
        yield from _paths(child, prefix + (key,))


def _mutate(rng: random.Random) -> tuple[dict, list]:
    data = copy.deepcopy(MACHINE)
    changes = []
    for _ in range(rng.randint(1, 3)):
        paths = list(_paths(data))
        if not paths:
            break
        path = rng.choice(paths)
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        if rng.random() < 0.15 and isinstance(parent, dict):
            del parent[path[-1]]
            changes.append(("delete", path))
        else:
            value = rng.choice(BAD_VALUES)
            parent[path[-1]] = copy.deepcopy(value)
            changes.append((path, value))
    return data, changes


def _short(changes) -> str:
    short = reprlib.Repr()
    short.maxlong = short.maxstring = 40
    return short.repr(changes)


def _load(data, case: int, tmp_path, rng):
    if case % 4 == 0:  # through a YAML file too (unrepresentable values stay in the dict)
        try:
            text = yaml.safe_dump(data)
        except yaml.YAMLError:
            return load_machine(data)
        path = tmp_path / f"m{case}.yaml"
        path.write_text(text)
        return load_machine(str(path))
    return load_machine(data)


def _predictions(machine, rng):
    """(what, seconds) of some predictions from ``machine``."""
    for algorithm in allreduce_names():
        nbytes, ranks = rng.choice(SIZES), rng.choice(RANKS)
        yield ((algorithm, nbytes, ranks),
               predict_allreduce(algorithm, nbytes, ranks, machine, repeated=rng.random() < .5))
        yield ((algorithm, nbytes, ranks, "call"),
               predict_allreduce_call(algorithm, nbytes, ranks, machine, in_context=True))


def test_machine_files_fail_only_with_named_errors_and_predict_finite_times(tmp_path):
    rng = random.Random(SEED)
    failures, refused, loaded, predictions = [], 0, 0, 0
    for case in range(CASES):
        data, changes = _mutate(rng)
        try:
            machine = _load(data, case, tmp_path, rng)
        except MachineError as error:
            refused += 1
            if "field '" not in str(error) and "top level" not in str(error):
                failures.append(f"case {case} {_short(changes)}: error names no field: {error}")
            continue
        except Exception:  # noqa: BLE001 - the fuzzer's finding
            failures.append(f"case {case} {_short(changes)}: {traceback.format_exc(limit=-2)}")
            continue
        loaded += 1
        try:
            for what, seconds in _predictions(machine, rng):
                predictions += 1
                if not (math.isfinite(seconds) and seconds >= 0):
                    failures.append(f"case {case} {_short(changes)}: {what} predicted {seconds}")
                    break
        except Deep500Error:
            pass
        except Exception:  # noqa: BLE001
            failures.append(f"case {case} {_short(changes)}: {traceback.format_exc(limit=-2)}")
    assert not failures, f"{len(failures)} of {CASES} cases:\n" + "\n".join(failures[:15])
    # the mutations reach both sides: files refused, and files loaded and predicted from
    assert refused > CASES // 4 and loaded > CASES // 10 and predictions > 500


def test_deep500_predict_with_fuzzed_machine_files_exits_0_or_2(tmp_path, capsys):
    recipe = {"name": "fuzzed", "experiment": "distributed",
              "fixed": {"dataset": {"name": "digits"}, "network": {"model": "mlp", "hidden": [8]},
                        "optimizer": {"type": "sgd", "learning_rate": 0.1}, "batch_size": 8,
                        "epochs": 1, "threads": 1, "seed": 0,
                        "scheme": {"scheme": "ConsistentDecentralized", "algorithm": "ring"}}}
    recipe_path = tmp_path / "recipe.yaml"
    recipe_path.write_text(yaml.safe_dump(recipe))
    rng = random.Random(SEED + 1)
    statuses = []
    for case in range(CLI_CASES):
        data, changes = _mutate(rng) if case else (copy.deepcopy(MACHINE), [])
        machine = tmp_path / f"m{case}.yaml"
        machine.write_text(yaml.safe_dump(data) if case % 2 else
                           yaml.safe_dump(data).replace("1.0e-10", "1.0e+308"))
        out = tmp_path / f"c{case}.json"
        try:
            status = main(["predict", str(recipe_path), "--machine", str(machine),
                           "--ranks", "1,2,64", "--compute", "analytic", "--plot", "none",
                           "--json", str(out)])
        except SystemExit as exit_:  # argparse
            status = exit_.code
        captured = capsys.readouterr()
        assert status in (0, 2), f"case {case} {_short(changes)}: exit {status}\n{captured.err}"
        assert "Traceback" not in captured.err
        if status == 2:
            assert "machine file" in captured.err, captured.err
        else:
            text = out.read_text()
            assert "Infinity" not in text and "NaN" not in text, f"case {case}: {text[:300]}"
        statuses.append(status)
    assert 0 in statuses and 2 in statuses  # the unchanged file predicts; β = 1e308 refused


ARGUMENTS = {"nbytes": (0, 1, 4.5, 1e-3, 2 ** 64, 2 ** 65, 1e300, -1, math.nan, math.inf,
                        10 ** 400, "x", None, True),
             "ranks": (0, 1, 2, 3, 1000, 2 ** 31 - 1, 10 ** 12, 1.5, -1, math.nan, math.inf,
                       10 ** 400, "4", None),
             "segment_bytes": (None, 1, 4096, 0, -1, 1e300, math.nan, "x", True)}


def _extreme_machine() -> dict:
    """MACHINE with every value at the end of its plausible range that makes times
    longest: what a file may hold that comes nearest to overflowing a prediction."""
    data = copy.deepcopy(MACHINE)
    network = data["network"]
    for segment in network["segments"] + network["exchange_segments"]:
        segment.update(alpha_s=3600, beta_s_per_byte=1.0)
    reduction = data["reduction"]
    reduction["gamma_cache_s_per_byte"]["value"] = reduction["gamma_memory_s_per_byte"][
        "value"] = 1.0
    reduction["gamma_curve"] = [{"buffer_bytes": 1, "value": 1.0}]
    for curve in network["coherence"].values():
        curve[0]["value"] = 1.0
    data["software"]["allreduce_call_overhead_s"]["ring"] = 3600
    data["software"]["allreduce_in_context"]["algorithms"]["ring"] = [
        {"nbytes": 1, "ratio": 1e6}]
    return data


def test_predictions_from_bad_arguments_and_extreme_machines_are_finite_or_refused():
    rng = random.Random(SEED + 2)
    machines = [load_machine(MACHINE), load_machine(_extreme_machine())]
    failures = []
    for case in range(3000):
        machine = rng.choice(machines)
        algorithm = rng.choice(allreduce_names())
        nbytes, ranks, segment = (rng.choice(ARGUMENTS[k]) for k in ARGUMENTS)
        segment = segment if algorithm == "segmented_ring" else None
        what = _short((algorithm, nbytes, ranks, segment, machine is machines[1]))
        try:
            seconds = predict_allreduce_call(algorithm, nbytes, ranks, machine,
                                             segment_bytes=segment, in_context=True)
        except Deep500Error:
            continue
        except Exception:  # noqa: BLE001
            failures.append(f"case {case} {what}: {traceback.format_exc(limit=-2)}")
            continue
        if not (math.isfinite(seconds) and seconds >= 0):
            failures.append(f"case {case} {what}: predicted {seconds}")
    assert not failures, f"{len(failures)} cases:\n" + "\n".join(failures[:15])
