"""``d5.MPIProfiling``: ``MPI_Pcontrol`` levels around a training run and its phases.

The real test preloads a PMPI interposer (``interposers/pcontrol_log.c``, built with the
mpich wheel's ``mpicc``) into one MPI process that trains with the metric, and reads the
levels the interposer saw, in order. The others drive the events with a recording
``MPI_Pcontrol``.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deep500.lv3_distributed import mpi_profiling
from deep500.lv3_distributed.mpi_profiling import PHASE_LEVELS, MPIProfiling
from deep500.recipe.components import metric_factory
from deep500.utils.errors import Deep500Error, RecipeError
from tests.lv3_distributed.mpi_helpers import SCRIPTS, run_program

INTERPOSER = Path(__file__).parent / "interposers" / "pcontrol_log.c"
MPICC = Path(sys.executable).parent / "mpicc"
STEP = [150, 151, 130, 131, 140, 141]   # compute, communication, update


@pytest.mark.skipif(not MPICC.exists(), reason="no mpicc beside the Python executable "
                    "(the mpich wheel's) to build the PMPI interposer")
def test_a_pmpi_interposer_sees_the_levels_in_order(tmp_path, monkeypatch):
    library = tmp_path / "libpcontrol_log.so"
    mpi_lib = MPICC.parent.parent / "lib"   # the wheel's libmpi, found when preloaded
    subprocess.run([str(MPICC), "-shared", "-fPIC", "-o", str(library), str(INTERPOSER),
                    f"-Wl,-rpath,{mpi_lib}"], check=True, capture_output=True, timeout=60)
    log, out = tmp_path / "pcontrol.log", tmp_path / "summary.json"
    monkeypatch.setenv("D5_PCONTROL_LOG", str(log))
    monkeypatch.setenv("LD_PRELOAD", str(library))
    status, output, _ = run_program(
        [sys.executable, str(SCRIPTS / "pcontrol_train.py"), str(out)], timeout=120)
    assert status == 0, output[-3000:]
    result = json.loads(out.read_text())
    steps, summary = result["steps"], result["summary"]
    levels = [int(line) for line in log.read_text().split()]
    # off for set-up; on for training; each step's phases; off for the test set, on
    # again after it; off at the end
    assert levels == [0, 1] + STEP * steps + [0, 1, 0]
    assert summary["calls"] == len(levels) - 1   # off() before training is not the metric's
    assert summary["levels"] == {"0": 2, "1": 2, **{str(v): steps for v in STEP}}
    assert "global symbols" in summary["markers"]


class _FakeMPI:
    def __init__(self, calls):
        self.calls = calls

    def Pcontrol(self, level):
        if level not in (0, 1, 2):   # as mpi4py
            raise ValueError(level)
        self.calls.append(level)


class _Scheme:
    phase_markers = None


class _Trainer:
    def __init__(self):
        self.optimizer = _Scheme()


@pytest.fixture
def recorded(monkeypatch):
    calls = []
    monkeypatch.setattr(mpi_profiling, "_mpi", lambda: _FakeMPI(calls))
    monkeypatch.setattr(mpi_profiling, "find_pcontrol",
                        lambda: (calls.append, "recording"))
    return calls


def test_events_issue_the_levels_and_mark_the_schemes_phases(recorded):
    profiling, trainer = MPIProfiling(flush=True), _Trainer()
    profiling.before_training(trainer, None)
    assert trainer.optimizer.phase_markers is profiling
    with profiling.phase("forward"):
        with profiling.phase("not a phase"):   # unknown names are not marked
            pass
    profiling.before_test_set(trainer, 0)
    profiling.after_test_set(trainer, 0, None)
    profiling.after_training(trainer, None)
    assert trainer.optimizer.phase_markers is None
    assert recorded == [1, PHASE_LEVELS["forward"], PHASE_LEVELS["forward"] + 1, 0, 1,
                        2, 0]
    summary = profiling.measure_training(None).summary
    assert summary == {"calls": 7, "levels": {0: 2, 1: 2, 2: 1, 110: 1, 111: 1},
                       "markers": "recording"}


def test_without_markers_only_on_and_off(recorded):
    profiling, trainer = MPIProfiling(phase_markers=False), _Trainer()
    profiling.before_training(trainer, None)
    assert trainer.optimizer.phase_markers is None
    profiling.begin_phase("update")   # no marker function: dropped, not counted
    profiling.after_training(trainer, None)
    assert recorded == [1, 0]
    assert profiling.measure_training(None).summary["markers"].startswith("off")


def test_a_distributed_recipe_takes_the_metric():
    from deep500.recipe.schema import parse_recipe
    raw = {"name": "profiled", "experiment": "distributed",
           "fixed": {"dataset": {"name": "digits"}, "network": {"model": "mlp"},
                     "optimizer": {"type": "sgd", "learning_rate": 0.1},
                     "batch_size": 16, "epochs": 1},
           "mutable": {"scheme": ["ConsistentDecentralized"]},
           "metrics": {"TestAccuracy": {}, "MPIProfiling": {"flush": True}}}
    assert "MPIProfiling" in parse_recipe(raw).metric_builders
    raw["metrics"]["MPIProfiling"] = {"flush": 3}
    with pytest.raises(RecipeError, match="MPIProfiling.flush"):
        parse_recipe(raw)


def test_options_are_checked():
    with pytest.raises(Deep500Error, match="flush='yes'"):
        MPIProfiling(flush="yes")
    with pytest.raises(RecipeError, match="phase_markers"):
        metric_factory("MPIProfiling", {"phase_markers": 1}, "metrics")
    assert metric_factory("MPIProfiling", {}, "metrics")(os.devnull, "t").flush is False
