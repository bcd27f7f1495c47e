"""The dataset latency recipe (experiment: datasets): every storage and order measured
with a CI, decoders on the tar of JPEGs only, a missing decoder reported as not
available, files written inside the run folder; bad recipes refused up front."""
import os
import sys
import textwrap

import pytest

from deep500.datasets import jpeg_decoders
from deep500.recipe import load_recipe, parse_recipe, run_recipe
from deep500.results.files import read_results
from deep500.utils.errors import RecipeError

RECIPE = textwrap.dedent("""
    name: tiny-datasets
    experiment: datasets
    fixed: {dataset: digits, batch_size: 16, batches: 6, threads: 1, seed: 0}
    mutable:
      storage: [memory, idx, jpeg-tar, synthetic]
      order: [sequential, shuffled]
      decoder: [pil, torchvision]
    metrics:
      DatasetLatency: {warmup: 1}
""")


def test_every_storage_order_and_decoder_row_is_reported(tmp_path, monkeypatch):
    # torchvision made missing here, whether or not it is installed
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.delitem(jpeg_decoders._SHARED, "torchvision", raising=False)
    path = tmp_path / "datasets.yaml"
    path.write_text(RECIPE)
    out = tmp_path / "out"
    summary = run_recipe(str(path), str(out), progress=False)
    assert summary.ok
    records = read_results(str(out))
    measured = {(r["configuration"]["storage"], r["configuration"]["order"],
                 r["configuration"]["decoder"]): r
                for r in records if r["kind"] == "measurement"}
    assert set(measured) == {(s, o, "pil" if s == "jpeg-tar" else None)
                             for s in ("memory", "idx", "jpeg-tar", "synthetic")
                             for o in ("sequential", "shuffled")}
    for record in measured.values():
        latency = next(m for m in record["result"]["metrics"]
                       if m["metric"] == "DatasetLatency")
        s = latency["summary"]
        assert s["n"] == 6 and s["batch_size"] == 16 and len(latency["samples"]) == 6
        assert 0 < s["ci_low"] <= s["median"] <= s["ci_high"]
    skipped = [r for r in records if r["kind"] == "skipped"]
    unavailable = [r for r in skipped if r["configuration"]["storage"] == "jpeg-tar"]
    assert len(skipped) == 8 and len(unavailable) == 2
    assert all(r["reason"].startswith("not available: torchvision is not installed")
               for r in unavailable)
    files = measured["jpeg-tar", "shuffled", "pil"]["result"]["details"]["storage"]["files"]
    assert set(files) == {os.path.join("dataset_files", "digits-seed0", name)
                          for name in ("images-q90.tar", "images-q90.tar.index.npz")}
    report = (out / "report.md").read_text()
    assert "### Dataset latency — time per minibatch" in report
    table = report.split("### Dataset latency")[1].split("![")[0]
    rows = [line for line in table.splitlines() if line.startswith("| digits |")]
    assert len(rows) == 10   # 8 measured, 2 with the decoder not available
    assert sum("not available: torchvision is not installed" in row for row in rows) == 2
    assert (out / "plots" / "dataset_latency.png").is_file()


@pytest.mark.parametrize("change, message", [
    ({"mutable": {"storage": ["memory", "jpeg-tar"], "decoder": ["tensorflow"]}},
     "storages ['memory'] read no JPEGs and are measured once"),
    ({"fixed": {"dataset": "digits", "storage": "memory", "batch_size": 4096}},
     "batch_size 4096 is larger than dataset digits (1797 images"),
    ({"fixed": {"dataset": "digits", "storage": "tape"}}, "'tape' is not one of"),
    ({"fixed": {"dataset": "imagenet", "storage": "memory"}}, "'imagenet' is not one of"),
    ({"fixed": {"dataset": "digits", "storage": "jpeg-tar", "decoder": "libjpeg"}},
     "'libjpeg' is not one of"),
    ({"fixed": {"dataset": "digits", "storage": "jpeg-tar", "jpeg_quality": 100}},
     "a JPEG quality is an integer from 1 to 95"),
    ({"fixed": {"dataset": "digits", "storage": "memory"}, "metrics": {"WallclockTime": {}}},
     "unknown metric 'WallclockTime'"),
])
def test_bad_datasets_recipes(change, message):
    raw = {"experiment": "datasets", "fixed": {"dataset": "digits"}, **change}
    with pytest.raises(RecipeError) as error:
        parse_recipe(raw, "datasets.yaml")
    assert message in str(error.value)


def test_the_shipped_recipe_checks_out():
    recipe = load_recipe(os.path.join(os.path.dirname(__file__), "..", "..", "recipes",
                                      "datasets.yaml"))
    assert recipe.experiment == "datasets"
    assert recipe.alternatives("decoder") == ["pil", "torchvision", "tensorflow"]
    assert len(recipe.configurations()) == 2 * 4 * 2 * 3

