"""``d5.MPIProfiling``: ``MPI_Pcontrol`` around a training run's phases, so that PMPI
profiling tools (mpiP, TAU, Score-P, or any library that intercepts ``MPI_*`` and calls
``PMPI_*``) profile the measured phase only and see where each step's phases begin and
end (upstream Deep500 had such a hook).

The MPI standard (MPI-4.0, section 15.2, "Profiling Interface") defines
``MPI_Pcontrol(level)`` as a call that the MPI library ignores and a tool interprets:
level 0 disables profiling, 1 enables it (the default after ``MPI_Init``), 2 flushes
the profile buffers (which may be a no-op); every other level is tool-defined.

What this metric issues on every rank:

* ``MPI_Pcontrol(0)`` outside the measured phase: ``off()`` (the distributed recipe
  calls it right after the communicator is made, so that set-up is not profiled),
  before each pass over the test set, and after training;
* ``MPI_Pcontrol(1)`` when training starts and after each test-set pass;
* with ``flush=True``, ``MPI_Pcontrol(2)`` once after training, before the final 0
  (off by default: some tools give 2 another meaning, mpiP resets its data);
* with ``phase_markers=True`` (the default), tool-defined levels around every phase the
  scheme times (``MeasuredScheme.phase``): ``PHASE_LEVELS[phase]`` when it begins, one
  more when it ends (``forward`` 110/111, ``backward`` 120/121, ``communication``
  130/131, ``update`` 140/141, ``compute`` 150/151, ``backward_allreduce`` 160/161);
  they start at 100 to keep clear of the small levels tools give meanings to. Deep500's
  schemes time forward and backpropagation as one ``compute`` phase (the executor runs
  them in one call, ``inference_and_backprop``), so their steps show compute,
  communication and update.

mpi4py's ``MPI.Pcontrol`` refuses levels other than 0, 1 and 2, so the markers call
the C ``MPI_Pcontrol`` through ctypes: first as the process's global symbol (where a
tool preloaded with ``LD_PRELOAD`` interposes it), else in the MPI library mpi4py
loaded. Where neither is found the markers are "not available: <reason>" in the
summary, and levels 0-2 still go through mpi4py.

In a recipe (``experiment: distributed``): ``metrics: {MPIProfiling: {}}`` (options
``phase_markers``, ``flush``). From Python: ``d5.test_training(...,
metrics=[d5.MPIProfiling()])``, or ``MPIProfiling.off()`` / ``on()`` and
``with profiling.phase("name")`` around code of one's own.

Summary: ``calls`` (``MPI_Pcontrol`` calls on this rank), ``levels`` (calls per
level), ``markers`` (how the markers reached ``MPI_Pcontrol``, or why they did not).
"""
from __future__ import annotations

import ctypes

from deep500.lv2_training.events import TrainingEvent
from deep500.lv2_training.training_metrics import TrainingMetric
from deep500.utils.errors import Deep500Error
from deep500.utils.metric import MetricResult

OFF, ON, FLUSH = 0, 1, 2
PHASE_LEVELS = {"forward": 110, "backward": 120, "communication": 130, "update": 140,
                "compute": 150, "backward_allreduce": 160}


def _mpi():
    from mpi4py import MPI
    return MPI


def _loaded_mpi_libraries() -> list[str]:
    """Paths of the MPI libraries mapped into this process (``/proc/self/maps``)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = [line.split()[-1] for line in maps if "libmpi" in line]
    except OSError:
        return []
    return list(dict.fromkeys(p for p in paths if p.startswith("/")))


def find_pcontrol() -> tuple:
    """``(function, where)``: the C ``MPI_Pcontrol`` as a ctypes function of one int and
    where it was found, or ``(None, "not available: <reason>")``."""
    candidates = [(None, "the process's global symbols (a preloaded tool's first)")]
    candidates += [(path, path) for path in _loaded_mpi_libraries()]
    for path, where in candidates:
        try:
            library = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL if path is None
                                  else getattr(ctypes, "RTLD_NOLOAD", 4))
            function = library.MPI_Pcontrol
        except (OSError, AttributeError):
            continue
        function.restype, function.argtypes = ctypes.c_int, [ctypes.c_int]
        return function, where
    return None, ("not available: no MPI_Pcontrol among the process's symbols nor in a "
                  "loaded libmpi (is mpi4py built against a shared MPI library?)")


class MPIProfiling(TrainingMetric, TrainingEvent):
    """``MPI_Pcontrol`` levels around a training run and its phases (module docstring).

    Args:
        phase_markers: issue the tool-defined ``PHASE_LEVELS`` around every phase the
            scheme times.
        flush: ``MPI_Pcontrol(2)`` once after training.
    """

    fields = ("calls", "levels", "markers")

    def __init__(self, phase_markers: bool = True, flush: bool = False):
        for name, value in (("phase_markers", phase_markers), ("flush", flush)):
            if not isinstance(value, bool):
                raise Deep500Error(f"MPIProfiling: {name}={value!r}: give true or false")
        self.phase_markers, self.flush = phase_markers, flush
        self.levels: dict[int, int] = {}
        self._marker_function = None
        self._markers = "off (phase_markers=False)"
        self._scheme = None

    # -- MPI_Pcontrol ------------------------------------------------------------------
    @staticmethod
    def off() -> None:
        """``MPI_Pcontrol(0)``: outside the measured phase."""
        _mpi().Pcontrol(OFF)

    @staticmethod
    def on() -> None:
        """``MPI_Pcontrol(1)``: inside the measured phase."""
        _mpi().Pcontrol(ON)

    def pcontrol(self, level: int) -> None:
        """``MPI_Pcontrol(level)``, counted: 0-2 through mpi4py, other levels through
        the C function (dropped, uncounted, where it was not found)."""
        if level in (OFF, ON, FLUSH):
            _mpi().Pcontrol(level)
        elif self._marker_function is not None:
            self._marker_function(level)
        else:
            return
        self.levels[level] = self.levels.get(level, 0) + 1

    def begin_phase(self, name: str) -> None:
        level = PHASE_LEVELS.get(name)
        if level is not None:
            self.pcontrol(level)

    def end_phase(self, name: str) -> None:
        level = PHASE_LEVELS.get(name)
        if level is not None:
            self.pcontrol(level + 1)

    def phase(self, name: str) -> "_Marked":
        """``with profiling.phase("update"): ...``: the phase's markers around a block."""
        return _Marked(self, name)

    # -- training events ----------------------------------------------------------------
    def before_training(self, trainer, stats) -> None:
        if self.phase_markers:
            self._marker_function, self._markers = find_pcontrol()
            scheme = trainer.optimizer
            if hasattr(scheme, "phase_markers"):   # a MeasuredScheme times phases
                self._scheme, scheme.phase_markers = scheme, self
        self.pcontrol(ON)

    def before_test_set(self, trainer, epoch: int) -> None:
        self.pcontrol(OFF)

    def after_test_set(self, trainer, epoch: int, stats) -> None:
        self.pcontrol(ON)

    def after_training(self, trainer, stats) -> None:
        if self._scheme is not None:
            self._scheme.phase_markers, self._scheme = None, None
        if self.flush:
            self.pcontrol(FLUSH)
        self.pcontrol(OFF)

    def measure_training(self, statistics) -> MetricResult:
        levels = dict(sorted(self.levels.items()))
        return MetricResult(self.name, {"calls": sum(levels.values()), "levels": levels,
                                        "markers": self._markers}, "calls", None, [],
                            conditions={"phase_markers": self.phase_markers,
                                        "flush": self.flush,
                                        "phase_levels": dict(PHASE_LEVELS)})


class _Marked:
    __slots__ = ("profiling", "name")

    def __init__(self, profiling: MPIProfiling, name: str):
        self.profiling, self.name = profiling, name

    def __enter__(self):
        self.profiling.begin_phase(self.name)
        return self

    def __exit__(self, *exc):
        self.profiling.end_phase(self.name)
        return False
