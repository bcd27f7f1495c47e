"""A pytest plugin: the ``d5bench`` fixture, Deep500's answer to pytest-benchmark's
``benchmark``. It times a callable with :class:`deep500.utils.wallclock.WallclockTime`
(warm-up runs discarded, then reruns: the median with its nonparametric confidence
interval and every raw sample; Hoefler & Belli, SC'15) while the telemetry sampler
watches for other processes using the CPU, and writes one measurement record per test
into a run folder that is stored in the results database when the session ends, so
``deep500 runs``, ``compare``, ``history`` and ``bisect`` read it like any run::

    def test_sort(d5bench):
        data = list(range(10_000, 0, -1))
        assert d5bench(sorted, data) == sorted(data)   # returns what the callable does
        assert d5bench.result.value < 0.1              # the median, in seconds

Enable it with ``pytest -p deep500.store.pytest_plugin`` or ``pytest_plugins =
["deep500.store.pytest_plugin"]`` in a ``conftest.py``. Options: ``--d5bench-db PATH``
(default ``$DEEP500_DB``, else ``results/deep500.db``), ``--d5bench-out DIR`` (the run
folder, default ``results/<recipe>-<time>``), ``--d5bench-recipe NAME`` (the recipe
name the runs are stored under, default ``tests``), ``--d5bench-reruns N`` and
``--d5bench-warmup N`` (default 30 and 3; ``d5bench.reruns`` and ``d5bench.warmup``
set them for one test).

A record's configuration is the test's node id and its parameters, so a test compares
with itself across runs and revisions; the record carries the telemetry summary, and a
test measured under interference is flagged as in any run (``deep500 compare`` does not
judge it).
"""
from __future__ import annotations

import datetime
import os

import pytest

from deep500.utils.errors import Deep500Error

DEFAULT_RECIPE = "tests"


def pytest_addoption(parser):
    group = parser.getgroup("d5bench", "Deep500 benchmarks (the d5bench fixture)")
    group.addoption("--d5bench-db", metavar="PATH", help="results database to store the "
                    "measurements in (default $DEEP500_DB, else results/deep500.db)")
    group.addoption("--d5bench-out", metavar="DIR", help="run folder for the records "
                    "(default results/<recipe>-<time>)")
    group.addoption("--d5bench-recipe", default=DEFAULT_RECIPE, metavar="NAME",
                    help=f"recipe name the runs are stored under (default "
                         f"{DEFAULT_RECIPE})")
    group.addoption("--d5bench-reruns", type=int, default=30, metavar="N",
                    help="measured runs per test (default 30)")
    group.addoption("--d5bench-warmup", type=int, default=3, metavar="N",
                    help="warm-up runs per test, discarded (default 3)")


class _Session:
    """The session's run folder, opened at the first measurement and stored at the
    end."""

    def __init__(self, config):
        self.config = config
        self.folder = None
        self.index = 0
        self.stored = None  # (folder, run id) once the session ends

    def option(self, name):
        return self.config.getoption(name)

    def write(self, record: dict) -> None:
        if self.folder is None:
            self.folder = self._open()
        record.update(index=self.index, session=self.folder.session)
        self.index += 1
        self.folder.write([record])

    def _open(self):
        from deep500.results.run_folder import RunFolder, default_run_path
        from deep500.utils import sysinfo
        import deep500
        name = self.option("--d5bench-recipe")
        path = self.option("--d5bench-out") or default_run_path(name)
        folder = RunFolder.claim(path)
        package = os.path.dirname(os.path.abspath(deep500.__file__))
        folder.start({
            "recipe": {"name": name, "experiment": "pytest", "path": None},
            "command_line": ["pytest", *self.config.invocation_params.args],
            "started": datetime.datetime.now().astimezone().isoformat(),
            "configurations": 0, "mpi_ranks": 1,
            "versions": sysinfo.software_versions(), "hardware": sysinfo.hardware(),
            "git_revision": {"deep500": sysinfo.git_revision(package),
                             "working_directory": sysinfo.git_revision(os.getcwd())}})
        return folder

    def finish(self, failed: bool) -> tuple[str, int | None] | None:
        if self.folder is None:
            return None
        from deep500.store.database import store_run_or_warn
        self.folder.manifest["configurations"] = self.index
        self.folder.finish("failed" if failed else "complete")
        return self.folder.path, store_run_or_warn(self.folder.path,
                                                   self.option("--d5bench-db"))


class D5Bench:
    """The fixture's object: call it with a callable and its arguments."""

    def __init__(self, session: _Session, node):
        self._session = session
        self._node = node
        self.reruns = session.option("--d5bench-reruns")
        self.warmup = session.option("--d5bench-warmup")
        self.result = None   # the WallclockTime MetricResult, once measured
        self.record = None   # the record written

    def __call__(self, function, *args, **kwargs):
        from deep500.utils.telemetry import TelemetrySampler
        from deep500.utils.wallclock import WallclockTime
        if self.result is not None:
            raise Deep500Error(f"{self._node.nodeid}: d5bench measures one callable per "
                               f"test; split the test, or parametrize it")
        if self.reruns < 1 or self.warmup < 0:
            raise Deep500Error(f"{self._node.nodeid}: d5bench needs reruns >= 1 and "
                               f"warmup >= 0, got {self.reruns} and {self.warmup}")
        returned = []

        def call():
            returned[:] = [function(*args, **kwargs)]
        timer = WallclockTime(reruns=self.reruns, warmup=self.warmup)
        with TelemetrySampler(threads=None) as telemetry:
            self.result = timer.time(call)
        callspec = getattr(self._node, "callspec", None)
        parameters = {k: repr(v) for k, v in callspec.params.items()} if callspec else {}
        self.record = {
            "kind": "measurement", "level": 0, "experiment": "pytest", "rank": 0,
            "size": 1, "label": self._node.nodeid,
            "configuration": {"test": self._node.nodeid, "parameters": parameters,
                              "callable": getattr(function, "__qualname__",
                                                  repr(function))},
            "result": {"metrics": [self.result.to_dict()]},
            "telemetry": telemetry.summary(), "acceptance": [], "passed": True}
        self._session.write(self.record)
        return returned[0]


_SESSION = pytest.StashKey[_Session]()


def pytest_configure(config):
    config.stash[_SESSION] = _Session(config)


@pytest.fixture
def d5bench(request) -> D5Bench:
    """Times a callable with Deep500's WallclockTime and stores the measurement (see
    :mod:`deep500.store.pytest_plugin`)."""
    return D5Bench(request.config.stash[_SESSION], request.node)


def pytest_sessionfinish(session, exitstatus):
    run = session.config.stash[_SESSION]
    run.stored = run.finish(failed=exitstatus not in (0, 5))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    stored = getattr(config.stash[_SESSION], "stored", None)
    if stored is None:
        return
    folder, run_id = stored
    where = f", stored as run {run_id}" if run_id is not None else ""
    terminalreporter.write_line(f"d5bench: {folder}{where} (deep500 runs)")
