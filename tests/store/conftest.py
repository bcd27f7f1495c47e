"""Run folders for the store's tests: a real one from a tiny recipe (reference
operators, seconds), and synthetic ones whose samples are drawn from known
distributions (what a comparison must find is then known)."""
import json
import os
import textwrap

import numpy as np
import pytest

from deep500.results.files import append_record, read_results, write_manifest

TINY = textwrap.dedent("""
    name: storetiny
    fixed: {dtype: float32, threads: 1, seed: 3}
    mutable:
      framework: [reference]
      operator:
        - {op: Relu, shape: [8, 16]}
        - {op: Softmax, shape: [4, 10], axis: 1}
    metrics:
      WallclockTime: {reruns: 12, warmup: 1}
""")


@pytest.fixture(scope="session")
def tiny_recipe(tmp_path_factory):
    path = tmp_path_factory.mktemp("recipe") / "storetiny.yaml"
    path.write_text(TINY)
    return str(path)


@pytest.fixture(scope="session")
def real_run(tiny_recipe, tmp_path_factory):
    """A run folder written by deep500's runner from a real (tiny) recipe."""
    from deep500.recipe import run_recipe
    out = tmp_path_factory.mktemp("real") / "run"
    summary = run_recipe(tiny_recipe, str(out), argv=["deep500", "run"], progress=False,
                         write_report=False)
    assert summary.ok and summary.measurements == 2
    return str(out)


def measurement(label: str, samples, index: int = 0, rank: int = 0, **configuration):
    """A measurement record as the runner writes it, with WallclockTime ``samples``."""
    from deep500.utils.statistics import summarize
    return {"kind": "measurement", "level": 0, "experiment": "operators", "index": index,
            "rank": rank, "size": 1, "label": label, "session": 0,
            "configuration": {"operator": {"op_type": label, "label": label},
                              "framework": "reference", **configuration},
            "result": {"metrics": [{"metric": "WallclockTime", "primary": "median",
                                    "unit": "s", "summary": summarize(samples),
                                    "samples": [float(s) for s in samples],
                                    "warnings": []}]},
            "acceptance": [], "passed": True}


def write_run(folder, records, revision="a" * 40, started="2026-01-01T00:00:00+00:00",
              recipe="synthetic"):
    """A run folder holding ``records`` and a complete manifest."""
    os.makedirs(folder, exist_ok=True)
    for record in records:
        append_record(str(folder), record)
    write_manifest(str(folder), {
        "recipe": {"name": recipe, "experiment": "operators"}, "started": started,
        "status": "complete", "configurations": len(records),
        "git_revision": {"deep500": revision, "working_directory": revision},
        "hardware": {"hostname": "testhost", "cpu_model": "test cpu"}})
    return str(folder)


def lognormal(seed: int, n: int, scale: float = 1e-3, sigma: float = 0.05):
    return scale * np.random.default_rng(seed).lognormal(0.0, sigma, n)


def scaled_copy(source: str, target: str, factor: float):
    """``source``'s records with every WallclockTime sample multiplied by ``factor``."""
    records = read_results(source)
    for record in records:
        for entry in record.get("result", {}).get("metrics", []):
            if entry["metric"] == "WallclockTime":
                entry["samples"] = [s * factor for s in entry["samples"]]
                for key in ("median", "ci_low", "ci_high"):
                    entry["summary"][key] *= factor
    with open(os.path.join(source, "manifest.json")) as handle:
        manifest = json.load(handle)
    os.makedirs(target, exist_ok=True)
    for record in records:
        append_record(target, record)
    write_manifest(target, manifest)
    return target
