"""A recipe's machine file: the top-level ``machine:`` key and ``deep500 run --machine``
load and validate it before anything runs, experiments read it as ``recipe.machine``,
and the manifest records its path, SHA-256, name and source."""
import hashlib
import subprocess
import sys
import textwrap

import pytest
import yaml

from deep500.recipe import load_recipe, run_recipe
from deep500.recipe.experiments import EXPERIMENTS
from deep500.results.files import read_manifest
from deep500.utils.errors import RecipeError
from deep500.utils.machine import MachineError, MachineModel, shipped_machines

RECIPE = textwrap.dedent("""
    name: with-machine
    fixed: {dtype: float32, threads: 1, seed: 0, framework: reference}
    mutable:
      operator: [{op: Relu, shape: [4, 5]}]
    metrics: {WallclockTime: {reruns: 2, warmup: 0}}
""")

MACHINE = {
    "name": "test-machine", "source": "written by a test",
    "network": {"alpha_s": 2e-6, "beta_s_per_byte": 1e-10},
    "reduction": {"gamma_cache_s_per_byte": 1e-10},
    "memory": {"bandwidth_bytes_per_s": 1e10},
    "software": {"allreduce_call_overhead_s": {"ring": {"value": 3e-6}}},
}


def write(tmp_path, machine_key=None, machine=MACHINE, machine_name="m.yaml"):
    (tmp_path / "machines").mkdir(exist_ok=True)
    if machine is not None:
        (tmp_path / "machines" / machine_name).write_text(yaml.safe_dump(machine))
    text = RECIPE + (f"machine: {machine_key}\n" if machine_key is not None else "")
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return str(path)


def test_recipe_without_machine_has_none(tmp_path):
    recipe = load_recipe(write(tmp_path))
    assert recipe.machine is None and recipe.machine_path is None


def test_machine_path_is_relative_to_the_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir("/")  # not the recipe's folder
    recipe = load_recipe(write(tmp_path, "machines/m.yaml"))
    assert isinstance(recipe.machine, MachineModel)
    assert recipe.machine.name == "test-machine"
    assert recipe.machine.allreduce_overhead("ring") == 3e-6
    assert recipe.machine_path == str(tmp_path / "machines" / "m.yaml")
    assert recipe.machine_given_by == "recipe"


def test_shipped_machine_by_name(tmp_path):
    recipe = load_recipe(write(tmp_path, "infiniband-hdr"))
    assert recipe.machine.name == "infiniband-hdr"
    assert recipe.machine_path == shipped_machines()["infiniband-hdr"]


@pytest.mark.parametrize("machine_key, machine, expected", [
    ("machines/m.yaml", {**MACHINE, "network": {"alpha_s": -1e-6, "beta_s_per_byte": 1e-10}},
     "network.alpha_s"),
    ("machines/m.yaml", {**MACHINE, "memory": {"bandwidth_bytes_per_s": "fast"}},
     "memory.bandwidth_bytes_per_s"),
    ("machines/m.yaml", {**MACHINE, "software": {"allreduce_call_overhead_s": {"ring": -1}}},
     "software.allreduce_call_overhead_s.ring"),
    ("machines/missing.yaml", MACHINE, "does not exist"),
    ("5", MACHINE, "machine: a machine file"),
])
def test_bad_machine_is_a_recipe_problem(tmp_path, machine_key, machine, expected):
    with pytest.raises(RecipeError) as error:
        load_recipe(write(tmp_path, machine_key, machine))
    message = str(error.value)
    assert "machine" in message and expected in message


def test_manifest_records_the_machine_and_experiments_read_it(tmp_path, monkeypatch):
    seen = []
    kind = EXPERIMENTS["operators"]
    original = kind.measure

    def measure(recipe, *args):
        seen.append(recipe.machine)
        return original(recipe, *args)

    monkeypatch.setattr(kind, "measure", measure)
    path = write(tmp_path, "machines/m.yaml")
    out = tmp_path / "run"
    summary = run_recipe(path, str(out), progress=False, write_report=False)
    assert summary.ok
    assert len(seen) == 1 and seen[0].name == "test-machine"
    entry = read_manifest(str(out))["machine"]
    machine_path = tmp_path / "machines" / "m.yaml"
    assert entry == {"path": str(machine_path),
                     "sha256": hashlib.sha256(machine_path.read_bytes()).hexdigest(),
                     "name": "test-machine", "source": "written by a test",
                     "given_by": "recipe"}


def test_command_line_machine_replaces_the_recipes(tmp_path):
    path = write(tmp_path, "machines/m.yaml")
    out = tmp_path / "run"
    run_recipe(path, str(out), progress=False, write_report=False,
               machine="infiniband-edr")
    entry = read_manifest(str(out))["machine"]
    assert entry["name"] == "infiniband-edr" and entry["given_by"] == "--machine"
    assert entry["path"] == shipped_machines()["infiniband-edr"]


def test_manifest_without_machine_says_none(tmp_path):
    out = tmp_path / "run"
    run_recipe(write(tmp_path), str(out), progress=False, write_report=False)
    assert read_manifest(str(out))["machine"] is None


def test_bad_machine_option_stops_before_anything_runs(tmp_path):
    bad = {**MACHINE, "reduction": {"gamma_cache_s_per_byte": "slow"}}
    path = write(tmp_path, None, bad)
    out = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "deep500", "run", path, "--out", str(out),
                             "--quiet", "--machine", str(tmp_path / "machines" / "m.yaml")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert "reduction.gamma_cache_s_per_byte" in result.stderr
    assert not out.exists()


def test_unknown_machine_name_lists_the_shipped_ones(tmp_path):
    with pytest.raises(MachineError) as error:
        run_recipe(write(tmp_path), str(tmp_path / "run"), progress=False,
                   write_report=False, machine="no-such-machine")
    assert "infiniband-hdr" in str(error.value)
    assert not (tmp_path / "run").exists()
