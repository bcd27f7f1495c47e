"""What else the machine did while something was measured: a background sampler.

While a measurement runs, :class:`TelemetrySampler` wakes every ``interval_s`` (default
50 ms) and reads, through psutil and ``getrusage``:

- the busy CPU time of the whole machine (``psutil.cpu_times``: every field but idle
  and iowait; guest time is already inside user/nice on Linux, so it is not added
  again), summed over the CPUs this process may run on;
- the CPU time of this process tree: this process's threads and reaped children
  (``getrusage`` ``RUSAGE_SELF`` + ``RUSAGE_CHILDREN``) plus its live descendants
  (``psutil.Process.cpu_times`` of each, their reaped children included), so compile
  subprocesses and helper threads count as the measurement's own;
- under MPI, the CPU time of the job's other ranks on this node (the other children of
  this rank's parent, which is the launcher's per-node proxy: hydra_pmi_proxy for
  MPICH, prted for Open MPI, slurmstepd under srun), read from their /proc/PID/stat
  through descriptors opened when the window opens;
- the 1-minute load average, the CPU frequency (the highest current frequency over the
  usable CPUs; ``psutil.cpu_freq`` may be missing, or slow with many CPUs, so it is
  read at most every ``freq_every_s`` and dropped to the window's ends if one read is
  slow), this process's thread count and resident set size, and its voluntary and
  involuntary context switches (``getrusage``: all threads, unlike
  ``/proc/PID/status``, which counts the main thread only).

Over the window, other processes used

    other_cpu_cores = (Δ busy − Δ own − Δ job ranks) / Δ wall-clock time

cores on average. The sampler's own thread is measured with ``RUSAGE_THREAD`` and
taken out of the process's CPU time and context switches (its cost is reported as
``sampler_cpu_s``). Descendants are looked up when the window opens and closes (a scan
of every process, too slow to repeat every tick), which makes the window's totals exact;
a child started mid-window appears in the time series only at the end.

Probes: other parts of Deep500 register counters of their own with
:func:`register_probe` (a distributed scheme registers its CommunicationNetwork's bytes
and messages sent and received while it measures); every running sampler calls each
registered probe once per tick and keeps its values next to the rest, so the series
shows, per rank and over time, bytes per second on the wire beside CPU, RSS, threads
and context switches (the figures of the local-parallelism study). A probe is called
from the sampler's thread: it must be cheap (microseconds) and only read.

Whether the window counts as *interfered* is decided by :class:`InterferenceRule`
(thresholds are its arguments); see its docstring and ``docs/measurement.md``. The idea
follows pyperf's ``system tune``/``check`` advice (a benchmark is only as quiet as the
machine: Stinner, "pyperf: system"), measured here instead of assumed.
"""
from __future__ import annotations

import math
import os
import resource
import threading
import time
from array import array
from dataclasses import dataclass
from typing import Callable

import psutil

from deep500.utils.errors import Deep500Error

# The kernel accounts system-wide CPU time in scheduler ticks (USER_HZ, 100 per second
# on Linux); see InterferenceRule.margin_cores.
try:
    TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
except (ValueError, OSError, AttributeError):
    TICK_S = 0.01

# A frequency read slower than this is only repeated at the window's ends.
_SLOW_FREQ_READ_S = 0.002

# name -> (probe, cumulative). Replaced as a whole on every change (copy on write), so
# that a sampler thread reading it never sees it change under its iteration.
_PROBES: dict = {}


def register_probe(name: str, probe: Callable[[], dict], cumulative: bool = True) -> None:
    """Have every running :class:`TelemetrySampler` call ``probe()`` once per tick.

    ``probe()`` returns ``{key: number}``; the series gets a column ``name.key`` per
    key. ``cumulative``: the values are counters that only grow (bytes sent so far):
    the series shows their rate per second and the summary their increase over the
    window; otherwise they are levels (a queue length), shown as read. A probe of the
    same name replaces the one before (e.g. the scheme of the next configuration). A
    probe that raises gives NaN for that tick (it runs on another thread, and may read
    a structure the measured thread is changing).
    """
    global _PROBES
    if not isinstance(name, str) or not name or "." in name:
        raise Deep500Error(f"telemetry.register_probe: name {name!r} must be a non-empty "
                           f"string without '.' (columns are named name.key)")
    if not callable(probe):
        raise Deep500Error(f"telemetry.register_probe({name!r}): the probe must be a "
                           f"callable returning {{key: number}}, got {type(probe).__name__}")
    _PROBES = {**_PROBES, name: (probe, bool(cumulative))}


def unregister_probe(name: str, probe: Callable[[], dict] | None = None) -> bool:
    """Stop calling probe ``name`` (only if it is still ``probe``, when given); whether
    it was removed."""
    global _PROBES
    current = _PROBES.get(name)
    if current is None or (probe is not None and current[0] is not probe):
        return False
    _PROBES = {key: value for key, value in _PROBES.items() if key != name}
    return True


def registered_probes() -> dict:
    """``{name: probe}`` of the probes registered now."""
    return {name: entry[0] for name, entry in _PROBES.items()}


@dataclass(frozen=True)
class InterferenceRule:
    """When a measured window counts as interfered. Thresholds are the fields.

    CPU: the measurement expects ``threads`` cores per rank and ``ranks`` ranks of its
    job on this node; of the ``usable_cpus`` (this process's CPU affinity) that leaves
    ``spare = usable_cpus − threads · ranks`` (``threads`` unknown: the measurement may
    use every core, spare = 0). Other processes may use

        threshold = max(min_cores, core_fraction · spare)

    cores on average before the window is flagged. System CPU time is counted in ticks
    (10 ms per CPU), so a short window's estimate is noisy: sampling n CPUs for T
    seconds has a standard deviation of about ½·√(n·tick/T) cores, and the window is
    flagged only when ``other_cpu_cores − margin_cores > threshold`` with
    margin = √(n·tick/T) (two standard deviations).

    Frequency: flagged when the highest CPU frequency sampled fell by more than
    ``freq_drop`` (a fraction) from its maximum within the window (thermal or power
    throttling, or turbo lost to load elsewhere). ``freq_drop=None`` disables the check.

    Defaults: half the spare cores, at least a quarter core; a 25% frequency drop. With
    1 thread on a 2-core machine the threshold is 0.5 core: one other busy process is
    interference (shared caches, memory bandwidth, turbo budget, and the measuring
    framework's own helper threads compete with it).
    """
    core_fraction: float = 0.5
    min_cores: float = 0.25
    freq_drop: float | None = 0.25

    def __post_init__(self):
        if not self.core_fraction >= 0 or not self.min_cores >= 0:
            raise ValueError(f"InterferenceRule needs core_fraction >= 0 and min_cores "
                             f">= 0, got {self.core_fraction}, {self.min_cores}")
        if self.freq_drop is not None and not 0 < self.freq_drop < 1:
            raise ValueError(f"InterferenceRule.freq_drop is a fraction in (0, 1) or "
                             f"None, got {self.freq_drop}")

    def threshold_cores(self, usable_cpus: int, threads: int | None, ranks: int = 1) -> float:
        spare = 0.0 if threads is None else max(0.0, usable_cpus - threads * ranks)
        return max(self.min_cores, self.core_fraction * spare)

    @staticmethod
    def margin_cores(usable_cpus: int, duration_s: float) -> float:
        if duration_s <= 0:
            return math.inf
        return math.sqrt(usable_cpus * TICK_S / duration_s)

    def judge(self, other_cpu_cores: float, duration_s: float, usable_cpus: int,
              threads: int | None, ranks: int = 1,
              cpu_freq_mhz: dict | None = None) -> tuple[bool, str | None]:
        """(interfered, reason): the reason says what was seen against which threshold."""
        reasons = []
        threshold = self.threshold_cores(usable_cpus, threads, ranks)
        margin = self.margin_cores(usable_cpus, duration_s)
        if other_cpu_cores - margin > threshold:
            reasons.append(f"other processes used {other_cpu_cores:.2f} CPU cores on "
                           f"average, more than the {threshold:.2f} allowed (margin "
                           f"{margin:.2f} for a {duration_s:.2f} s window)")
        if self.freq_drop is not None and cpu_freq_mhz:
            low, high = cpu_freq_mhz.get("min"), cpu_freq_mhz.get("max")
            if low and high and 1.0 - low / high > self.freq_drop:
                reasons.append(f"CPU frequency fell {1.0 - low / high:.0%} during the "
                               f"window ({low:.0f}–{high:.0f} MHz; threshold "
                               f"{self.freq_drop:.0%})")
        return bool(reasons), "; ".join(reasons) or None


def usable_cpus() -> list[int] | None:
    """CPUs this process may run on, or None where affinity is unknown (all CPUs)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _busy(times) -> float:
    """Busy seconds of psutil cpu_times (guest/guest_nice are inside user/nice)."""
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    return total - times.idle - getattr(times, "iowait", 0.0)


def _pread_holding_gil():
    """pread through libc without releasing the GIL, or None.

    ``os.pread`` releases the GIL around the system call; a measured thread running
    Python then takes it, and the sampler waits up to the switch interval (5 ms) to get
    it back and forces a hand-over each time. A /proc read takes microseconds, less
    than a hand-over, so holding the GIL through it costs the measured thread less
    (ctypes.PyDLL calls keep the GIL).
    """
    try:
        import ctypes
        libc = ctypes.PyDLL(None, use_errno=True)
        call = libc.pread
        call.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
        call.restype = ctypes.c_ssize_t
    except (OSError, AttributeError, TypeError):
        return None
    buffers: dict = {}

    def pread(fd: int, size: int, offset: int) -> bytes:
        buffer = buffers.get(size)
        if buffer is None:
            buffer = buffers[size] = ctypes.create_string_buffer(size)
        count = call(fd, buffer, size, offset)
        if count < 0:
            raise OSError(ctypes.get_errno(), "pread of a /proc file failed")
        return ctypes.string_at(buffer, count)
    return pread


class _ProcReader:
    """Reads the machine's busy time and this process's threads and RSS.

    On Linux straight from /proc through descriptors opened once (a sample then costs a
    few tens of microseconds, several times less than psutil's per-call parsing);
    elsewhere through psutil.
    """

    def __init__(self, cpus: list[int] | None):
        self.cpus = cpus
        self._job: list[int] = []
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._pread = _pread_holding_gil() or os.pread
        try:
            self._stat = os.open("/proc/stat", os.O_RDONLY)
            self._self = os.open(f"/proc/{os.getpid()}/stat", os.O_RDONLY)
            self.read_busy(), self.read_self()
        except (OSError, ValueError, IndexError):
            self.close()
            self._process = psutil.Process()
            self.read_busy, self.read_self = self._psutil_busy, self._psutil_self

    def read_busy(self) -> float:
        """Busy CPU seconds since boot over the usable CPUs: /proc/stat's user, nice,
        system, irq, softirq and steal (idle and iowait are not busy; guest time is
        already inside user and nice)."""
        if self.cpus is None:
            f = self._pread(self._stat, 512, 0).split(b"\n", 1)[0].split()
            return (int(f[1]) + int(f[2]) + int(f[3]) + int(f[6]) + int(f[7])
                    + int(f[8])) * TICK_S
        ticks = 0
        wanted = {b"cpu%d" % c for c in self.cpus}
        for line in self._pread(self._stat, 1 << 20, 0).split(b"\n"):
            f = line.split()
            if f and f[0] in wanted:
                ticks += int(f[1]) + int(f[2]) + int(f[3]) + int(f[6]) + int(f[7]) \
                    + int(f[8])
        return ticks * TICK_S

    def read_self(self) -> tuple[int, int]:
        """(threads, RSS bytes) of this process, from /proc/PID/stat fields 20 and 24."""
        f = self._pread(self._self, 4096, 0).rsplit(b")", 1)[1].split()
        return int(f[17]), int(f[21]) * self._page

    def open_job(self, pids: list[int]) -> bool:
        """Open /proc/PID/stat of the job's other ranks (and their descendants) once;
        False where that cannot be done (psutil then reads them)."""
        if self.read_busy == self._psutil_busy:
            return False
        fds = []
        try:
            for pid in pids:
                fds.append(os.open(f"/proc/{pid}/stat", os.O_RDONLY))
        except OSError:
            for fd in fds:
                os.close(fd)
            return False
        self._job = fds
        return True

    def read_job(self) -> float:
        """CPU seconds of the processes of :meth:`open_job` (user + system, theirs and
        their reaped children's: /proc/PID/stat fields 14-17); a process gone stops
        counting (its time is lost: it is not this process's child)."""
        ticks = 0
        for fd in list(self._job):
            try:
                f = self._pread(fd, 4096, 0).rsplit(b")", 1)[1].split()
                ticks += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
            except (OSError, IndexError, ValueError):
                self._job.remove(fd)
                os.close(fd)
        return ticks * TICK_S

    def _psutil_busy(self) -> float:
        if self.cpus is None:
            return _busy(psutil.cpu_times())
        per_cpu = psutil.cpu_times(percpu=True)
        return sum(_busy(per_cpu[c]) for c in self.cpus if c < len(per_cpu))

    def _psutil_self(self) -> tuple[int, int]:
        with self._process.oneshot():
            return self._process.num_threads(), self._process.memory_info().rss

    def close(self) -> None:
        for fd in getattr(self, "_job", ()):
            try:
                os.close(fd)
            except OSError:
                pass
        self._job = []
        for name in ("_stat", "_self"):
            fd = getattr(self, name, None)
            if isinstance(fd, int):
                try:
                    os.close(fd)
                except OSError:
                    pass
            setattr(self, name, None)


def _tree_seconds(processes: list) -> float:
    total = 0.0
    for process in list(processes):
        try:
            t = process.cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            # Gone: if it was ours, its time is now in RUSAGE_CHILDREN of its parent.
            processes.remove(process)
            continue
        total += t.user + t.system + getattr(t, "children_user", 0.0) \
            + getattr(t, "children_system", 0.0)
    return total


def _job_ranks() -> tuple[list, int]:
    """(processes, ranks): the other processes of this MPI job on this node (the other
    children of this rank's parent, the launcher's node proxy, and their descendants)
    and how many ranks share the node, this one included."""
    try:
        parent = psutil.Process().parent()
        if parent is None:
            return [], 1
        me = os.getpid()
        siblings = [p for p in parent.children() if p.pid != me]
        return (siblings + [d for s in siblings for d in s.children(recursive=True)],
                1 + len(siblings))
    except (psutil.Error, OSError):
        return [], 1


class TelemetrySampler:
    """Samples the machine while a measurement runs; ``summary()`` judges the window.

    Use as a context manager around the measured work, or ``start()`` / ``stop()``::

        with TelemetrySampler(threads=1) as telemetry:
            measure()
        record["telemetry"] = telemetry.summary()

    Args:
        interval_s: time between samples (they fall on multiples of ``interval_s`` of
            the wall clock, the same moments on every rank of a job; a synchronous
            step then loses one tick's time, not one per rank). A wake-up and sample
            cost 50–150 µs of CPU and, for Python code holding the GIL, a GIL
            hand-over; at 50 ms the measured cost on 1 ms calls is within 1%
            (``benchmarks/lv0_overhead.py``), at 20 ms it was up to 2% on a busy 2-core
            machine; on training steps see ``benchmarks/lv3_telemetry_overhead.py``.
        threads: threads the measurement uses per rank (None: unknown, may use all).
        rule: the :class:`InterferenceRule` that judges the window.
        freq_every_s: how often to read the CPU frequency (it can be slow, and its file
            reads release the GIL: one more hand-over for a GIL-bound measured thread).
        mpi_job: this process is a rank of an MPI job: the job's other ranks on this
            node (the other children of this rank's parent) are not "other processes",
            and the rule expects ``threads`` cores for each of them. The caller says so
            (it knows whether it runs under MPI; this level does not ask MPI).
    """

    FIELDS = ("t", "busy_s", "own_s", "job_s", "load_avg_1m", "cpu_freq_mhz",
              "threads", "rss_bytes", "voluntary", "involuntary")

    def __init__(self, interval_s: float = 0.05, threads: int | None = None,
                 rule: InterferenceRule | None = None, freq_every_s: float = 1.0,
                 mpi_job: bool = False):
        if not interval_s > 0:
            raise ValueError(f"TelemetrySampler.interval_s must be > 0, got {interval_s}")
        if threads is not None and threads < 1:
            raise ValueError(f"TelemetrySampler.threads must be >= 1 or None, got {threads}")
        self.interval_s = float(interval_s)
        self.threads = threads
        self.rule = rule or InterferenceRule()
        self.freq_every_s = freq_every_s
        self.mpi_job = mpi_job
        self._cpus = usable_cpus()
        self.usable_cpus = len(self._cpus) if self._cpus else (psutil.cpu_count() or 1)
        if self._cpus is not None and len(self._cpus) >= (psutil.cpu_count() or 0):
            self._cpus = None  # all CPUs: the summed line of /proc/stat is cheaper
        self._process = psutil.Process()
        self._reader: _ProcReader | None = None
        self._job_fds = False
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._series = {name: array("d") for name in self.FIELDS}
        self._probe_columns: dict[str, array] = {}  # "name.key" -> values per sample
        self._probe_cumulative: dict[str, bool] = {}
        self.probe_errors = 0
        self._descendants: list = []
        self._job: list = []
        self.ranks_on_node = 1
        self._freq_ok = True
        self._last_freq_t = -math.inf
        self._sampler_rusage = (0.0, 0, 0)  # CPU s, voluntary, involuntary switches
        self.started_unix: float | None = None
        self._t0 = 0.0

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> "TelemetrySampler":
        if self._thread is not None:
            raise RuntimeError("TelemetrySampler.start: already started")
        self._reader = _ProcReader(self._cpus)
        self._descendants = self._find_descendants()
        self._job, self.ranks_on_node = _job_ranks() if self.mpi_job else ([], 1)
        # The other ranks read through descriptors held open (no psutil parsing, no
        # GIL released for the reads): the sampler's cost per tick under MPI.
        self._job_fds = bool(self._job) and self._reader.open_job([p.pid for p in self._job])
        self.started_unix = time.time()
        self._t0 = time.monotonic()
        self._sample(force_freq=True)
        self._thread = threading.Thread(target=self._run, name="deep500-telemetry",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        """Stop and join the sampling thread, take the closing sample, and summarise."""
        if self._thread is None:
            raise RuntimeError("TelemetrySampler.stop: not started")
        if not self._stopping:
            self._stopping = True
            self._thread.join()
            # Children started during the window count from their birth.
            known = {p.pid for p in self._descendants}
            self._descendants += [p for p in self._find_descendants() if p.pid not in known]
            self._sample(force_freq=True)
            self._reader.close()
        return self.summary()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> "TelemetrySampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        # time.sleep, not Event.wait: a wake-up then costs one GIL acquisition and no
        # Python-level locking (stop() waits at most one interval for the last wake).
        # Ticks fall on multiples of the interval of the wall clock: the ranks of an
        # MPI job (clocks in step to NTP's precision) sample at the same moments, so a
        # synchronous step waits for one tick rather than one per rank.
        sleep, interval, sample, now = time.sleep, self.interval_s, self._sample, time.time
        while True:
            sleep(interval - now() % interval)
            if self._stopping:
                break
            sample()
        usage = resource.getrusage(resource.RUSAGE_THREAD) \
            if hasattr(resource, "RUSAGE_THREAD") else None
        if usage is not None:
            self._sampler_rusage = (usage.ru_utime + usage.ru_stime, usage.ru_nvcsw,
                                    usage.ru_nivcsw)

    def _find_descendants(self) -> list:
        try:
            return self._process.children(recursive=True)
        except (psutil.Error, OSError):
            return []

    # -- one sample -------------------------------------------------------------------

    def _sample(self, force_freq: bool = False) -> None:
        t = time.monotonic() - self._t0
        me = resource.getrusage(resource.RUSAGE_SELF)
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = (me.ru_utime + me.ru_stime + reaped.ru_utime + reaped.ru_stime
               + (_tree_seconds(self._descendants) if self._descendants else 0.0))
        job = (self._reader.read_job() if self._job_fds else
               _tree_seconds(self._job) if self._job else 0.0)
        busy = self._reader.read_busy()
        threads, rss = self._reader.read_self()
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):
            load = math.nan
        freq = math.nan
        if self._freq_ok and (force_freq or t - self._last_freq_t >= self.freq_every_s):
            freq = self._read_freq(force_freq)
            self._last_freq_t = t
        probes = _PROBES
        read = self._read_probes(probes) if probes or self._probe_columns else None
        row = (t, busy, own, job, load, freq, threads, rss, me.ru_nvcsw, me.ru_nivcsw)
        index = len(self._series["t"])
        # No lock: each append is atomic under the GIL; readers cut to the shortest column.
        for column, value in zip(self._series.values(), row):
            column.append(value)
        if read is not None:
            self._append_probes(read, index)

    def _read_probes(self, probes: dict) -> dict:
        """``{"name.key": (value, cumulative)}`` of every probe's numbers this tick."""
        read = {}
        for name, (probe, cumulative) in probes.items():
            try:
                values = probe()
                for key, value in values.items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        read[f"{name}.{key}"] = (float(value), cumulative)
            except Exception:  # noqa: BLE001 - a probe's failure is one missing point
                self.probe_errors += 1
        return read

    def _append_probes(self, read: dict, index: int) -> None:
        columns = self._probe_columns
        for key, (value, cumulative) in read.items():
            column = columns.get(key)
            if column is None:  # a probe registered mid-window: NaN before it
                column = array("d", [math.nan]) * index
                self._probe_cumulative[key] = cumulative
                columns[key] = column
            column.append(value)
        for column in columns.values():
            if len(column) <= index:  # gone or failed this tick
                column.append(math.nan)

    def _threads_seen(self, counts) -> list[int]:
        """Thread counts without the sampler's thread, which runs between the first
        sample (taken before it starts) and the last (taken after it is joined)."""
        last = len(counts) - 1 if self._stopping else len(counts)
        return [int(c) - (0 < i < last) for i, c in enumerate(counts)]

    def _columns(self) -> dict:
        columns = {name: list(column) for name, column in self._series.items()}
        n = min(len(c) for c in columns.values())
        return {name: c[:n] for name, c in columns.items()}

    def _probe_values(self, n: int) -> dict:
        """Each probe column cut or padded (NaN) to ``n`` samples."""
        out = {}
        for key, column in dict(self._probe_columns).items():
            values = list(column)[:n]
            out[key] = values + [math.nan] * (n - len(values))
        return out

    def _probe_summary(self, n: int) -> dict:
        """Per probe column: the increase over the window (counters) or the highest
        value read (levels); None where never read."""
        out = {}
        for key, values in self._probe_values(n).items():
            finite = [v for v in values if v == v]
            if not finite:
                out[key] = None
            elif self._probe_cumulative.get(key, True):
                out[key] = finite[-1] - finite[0]
            else:
                out[key] = max(finite)
        return out

    def _read_freq(self, at_edge: bool) -> float:
        started = time.perf_counter()
        try:
            per_cpu = psutil.cpu_freq(percpu=True)
        except (AttributeError, NotImplementedError, OSError):
            per_cpu = None
        if not per_cpu:
            self._freq_ok = False
            return math.nan
        if not at_edge and time.perf_counter() - started > _SLOW_FREQ_READ_S:
            self.freq_every_s = math.inf  # too slow to repeat: the window's ends only
        cpus = self._cpus if self._cpus is not None and len(per_cpu) > 1 else range(len(per_cpu))
        values = [per_cpu[c].current for c in cpus if c < len(per_cpu) and per_cpu[c].current]
        return max(values) if values else math.nan

    # -- results ----------------------------------------------------------------------

    def summary(self) -> dict:
        """The window's summary, as written into a record's ``telemetry``.

        Keys: interfered, reason, other_cpu_cores, own_cpu_cores, job_cpu_cores,
        load_avg_1m (highest sampled), cpu_freq_mhz ({min, max} of the sampled highest
        frequency, or None), threads (most seen, the sampler's thread excluded),
        context_switches ({voluntary, involuntary} in the window), rss_max_bytes,
        samples, interval_s, duration_s, usable_cpus, threshold_cores, sampler_cpu_s,
        and, when probes were read, probes (``{"name.key": increase of a counter over
        the window, or highest level}``) and probe_errors.
        """
        s = self._columns()
        n = len(s["t"])
        if n < 2:
            raise RuntimeError("TelemetrySampler.summary: the window is not closed yet "
                               "(call stop() first)")
        duration = s["t"][-1] - s["t"][0]
        sampler_cpu, sampler_vol, sampler_invol = self._sampler_rusage
        own_s = max(0.0, s["own_s"][-1] - s["own_s"][0] - sampler_cpu)
        job_s = max(0.0, s["job_s"][-1] - s["job_s"][0])
        busy_s = s["busy_s"][-1] - s["busy_s"][0]
        span = duration if duration > 0 else math.nan
        other = max(0.0, (busy_s - own_s - job_s - sampler_cpu) / span) if duration > 0 else 0.0
        freqs = [f for f in s["cpu_freq_mhz"] if f == f]
        freq = {"min": min(freqs), "max": max(freqs)} if freqs else None
        loads = [x for x in s["load_avg_1m"] if x == x]
        ranks = self.ranks_on_node
        interfered, reason = self.rule.judge(other, duration, self.usable_cpus,
                                             self.threads, ranks, freq)
        return {
            "interfered": interfered,
            "reason": reason,
            "other_cpu_cores": other,
            "own_cpu_cores": own_s / span if duration > 0 else 0.0,
            "job_cpu_cores": job_s / span if duration > 0 else 0.0,
            "load_avg_1m": max(loads) if loads else None,
            "cpu_freq_mhz": freq,
            "threads": max(self._threads_seen(s["threads"])),
            "context_switches": {
                "voluntary": max(0, int(s["voluntary"][-1] - s["voluntary"][0]) - sampler_vol),
                "involuntary": max(0, int(s["involuntary"][-1] - s["involuntary"][0])
                                   - sampler_invol)},
            "rss_max_bytes": int(max(s["rss_bytes"])),
            "samples": n,
            "interval_s": self.interval_s,
            "duration_s": duration,
            "usable_cpus": self.usable_cpus,
            "threshold_cores": self.rule.threshold_cores(self.usable_cpus, self.threads, ranks),
            "sampler_cpu_s": sampler_cpu,
            **({"probes": self._probe_summary(n), "probe_errors": self.probe_errors}
               if self._probe_columns else {}),
        }

    def series(self, max_points: int | None = None) -> dict:
        """The time series, columnar: t (seconds since the window opened) and, per
        interval ending at t, other/own/job CPU cores (rates of the cumulative
        counters), voluntary and involuntary context switches per second (the
        process's, the sampler's own included: about one voluntary switch per tick),
        plus load average, CPU frequency (None where not read), threads and RSS at t;
        and ``probes``: per probe column (``name.key``, see :func:`register_probe`) its
        rate per second (counters) or its value (levels), None where not read.
        ``max_points`` keeps every k-th sample (first and last kept); rates stay exact
        averages because they come from cumulative counters.
        """
        s = self._columns()
        n = len(s["t"])
        keep = list(range(n))
        if max_points is not None and n > max_points >= 2:
            stride = math.ceil((n - 1) / (max_points - 1))
            keep = list(range(0, n - 1, stride)) + [n - 1]
        out = {"started_unix": self.started_unix, "t": [], "other_cpu_cores": [],
               "own_cpu_cores": [], "job_cpu_cores": [], "load_avg_1m": [],
               "cpu_freq_mhz": [], "threads": [], "rss_bytes": [],
               "voluntary_per_s": [], "involuntary_per_s": []}
        probes = self._probe_values(n)
        rates = {key: [] for key in probes}
        threads = self._threads_seen(s["threads"])
        for previous, i in zip(keep, keep[1:]):
            dt = s["t"][i] - s["t"][previous]
            if dt <= 0:
                continue
            own = (s["own_s"][i] - s["own_s"][previous]) / dt
            job = (s["job_s"][i] - s["job_s"][previous]) / dt
            busy = (s["busy_s"][i] - s["busy_s"][previous]) / dt
            out["t"].append(round(s["t"][i], 4))
            out["other_cpu_cores"].append(round(max(0.0, busy - own - job), 3))
            out["own_cpu_cores"].append(round(own, 3))
            out["job_cpu_cores"].append(round(job, 3))
            out["load_avg_1m"].append(round(s["load_avg_1m"][i], 2)
                                      if s["load_avg_1m"][i] == s["load_avg_1m"][i] else None)
            freq = s["cpu_freq_mhz"][i]
            out["cpu_freq_mhz"].append(round(freq, 1) if freq == freq else None)
            out["threads"].append(threads[i])
            out["rss_bytes"].append(int(s["rss_bytes"][i]))
            out["voluntary_per_s"].append(
                round((s["voluntary"][i] - s["voluntary"][previous]) / dt, 1))
            out["involuntary_per_s"].append(
                round((s["involuntary"][i] - s["involuntary"][previous]) / dt, 1))
            for key, values in probes.items():
                now, before = values[i], values[previous]
                if self._probe_cumulative.get(key, True):
                    value = (now - before) / dt
                    if value < 0:  # the counter restarted (another probe of the name)
                        value = math.nan
                else:
                    value = now
                rates[key].append(round(value, 3) if value == value else None)
        if rates:
            out["probes"] = rates
        return out
