"""Real run folders for the report tests: small recipes run once per session, and the
records of a real ``deep500 run --np 2`` of a distributed recipe with two seeds
(``data/distributed_seeds.*``, written by that run; MPI runs are too slow to repeat in
every session, ``test_distributed_report.py`` reruns one under ``slow``)."""
import gzip
import json
import shutil
import textwrap
from pathlib import Path
from xml.etree import ElementTree

import pytest

from deep500.recipe import run_recipe

DATA = Path(__file__).parent / "data"

OPERATORS = textwrap.dedent("""
    name: varied-operators
    fixed: {dtype: float32, device: cpu}
    mutable:
      framework: [reference, pytorch]
      operator:
        - {op: Relu, shape: [64, 256]}
        - {op: Gemm, inputs: [[32, 16], [16, 8]]}
      threads: [1, 2]
      seed: [0, 1]
    metrics:
      WallclockTime: {reruns: 8, warmup: 2}
      FLOPs: {}
      L2Error: {}
    acceptance: ["L2Error.relative <= 1e-4"]
""")

TRAINING = textwrap.dedent("""
    name: seeded-training
    experiment: training
    fixed:
      dataset: {name: digits, normalize: standardize}
      network: {model: mlp, hidden: [32]}
      batch_size: 64
      epochs: 3
      threads: 1
      executor: reference
    mutable:
      optimizer:
        - {type: momentum, learning_rate: 0.05, momentum: 0.9}
        - {type: momentum, learning_rate: 0.02, momentum: 0.9}
        - {type: momentum, learning_rate: 0.05, momentum: 0.9, implementation: reference}
      seed: [0, 1, 2]
    metrics:
      TrainingAccuracy: {}
      TestAccuracy: {}
      TimeToAccuracy: {target: 0.8}
      LossCurve: {}
    acceptance: ["TestAccuracy.final >= 0.5"]
""")


def _run(tmp_path_factory, name, text):
    folder = tmp_path_factory.mktemp(name)
    recipe = folder / f"{name}.yaml"
    recipe.write_text(text)
    run_recipe(str(recipe), str(folder / "run"), argv=["deep500", "run"], progress=False,
               write_report=False)
    return folder / "run"


@pytest.fixture(scope="session")
def operators_run(tmp_path_factory) -> Path:
    """Relu and Gemm on reference and PyTorch, threads 1 and 2, seeds 0 and 1."""
    return _run(tmp_path_factory, "operators", OPERATORS)


@pytest.fixture(scope="session")
def training_run(tmp_path_factory) -> Path:
    """Two momentum learning rates on the reference executor, seeds 0, 1 and 2; the
    reference implementation on the reference executor is skipped (3 records)."""
    return _run(tmp_path_factory, "training", TRAINING)


def copy_run(source: Path, target: Path) -> Path:
    """A fresh copy of a run folder (results and manifest only) to report into."""
    target.mkdir(parents=True, exist_ok=True)
    for name in ("results.jsonl", "manifest.json"):
        shutil.copy(source / name, target / name)
    return target


@pytest.fixture
def distributed_run(tmp_path) -> Path:
    """The records and manifest of ``deep500 run --np 2`` on schemes
    ConsistentDecentralized and ModelAverageDecentralized(period=4), seeds 0 and 1."""
    folder = tmp_path / "distributed"
    folder.mkdir()
    with gzip.open(DATA / "distributed_seeds.results.jsonl.gz", "rt") as handle:
        (folder / "results.jsonl").write_text(handle.read())
    shutil.copy(DATA / "distributed_seeds.manifest.json", folder / "manifest.json")
    return folder


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip()[1:-1].split(" | ")]


def table(markdown: str, title: str) -> tuple[list[str], list[list[str]]]:
    """(header, body rows) of the Markdown table under ``### title``."""
    assert f"### {title}\n" in markdown, f"no table {title!r}"
    lines = markdown.split(f"### {title}\n", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    block = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        block.append(line)
    return _cells(block[0]), [_cells(line) for line in block[2:]]


def column(markdown: str, title: str, name: str) -> list[str]:
    header, rows = table(markdown, title)
    return [row[header.index(name)] for row in rows]


def svg_legend_texts(path: Path) -> list[str]:
    """The texts of every legend in an SVG written by the report (text kept as text)."""
    root = ElementTree.parse(path).getroot()
    texts = []
    for group in root.iter("{http://www.w3.org/2000/svg}g"):
        if group.get("id", "").startswith("legend_"):
            texts += ["".join(t.itertext()) for t in
                      group.iter("{http://www.w3.org/2000/svg}text")]
    return texts
