"""Energy per call of a measured region, from the Linux powercap interface to Intel's
(and AMD's) RAPL counters: ``d5.Energy()``.

Each RAPL zone ``/sys/class/powercap/intel-rapl:N`` (a CPU package; its subzones
``intel-rapl:N:M`` are the cores, the uncore or the DRAM of that package) has a
counter ``energy_uj`` of microjoules since an arbitrary origin, which wraps to 0 after
``max_energy_range_uj``. ``Energy`` reads every readable zone's counter just before and
just after each run of the measured region; a reading lower than the one before
wrapped once, and the difference is ``after + max_energy_range_uj - before``.

What a call costs is the sum over the package zones (``package-N``; every top-level
zone but ``psys``, which holds the packages, where none is so named); each zone's
figure is also kept (DRAM is not part of its package's). The counters count the whole
package, other processes included, and are updated about once a millisecond: a
call shorter than a few milliseconds reads 0 or one update, so the mean over the
calls (``joules_per_call``, the headline) is the figure to use, not one call's.

Where the counters cannot be read (no ``/sys/class/powercap``, as in most virtual
machines and containers; no RAPL zone; a counter readable by root only, as kernels
patched for CVE-2020-8694 make it), the result says ``not available: <reason>``
(``summary["status"]``, ``summary["available"] = False``) and no number: energy is
never guessed.
"""
from __future__ import annotations

import os
import sys
from time import perf_counter_ns

from deep500.utils.metric import MetricResult, TestMetric

POWERCAP = "/sys/class/powercap"
MICRO = 1e-6
WRAP_POWER_WATTS = 500.0   # a package's power above which a long run may wrap twice


def read_counter(path: str) -> int:
    """One integer from a sysfs file (``energy_uj``, ``max_energy_range_uj``)."""
    with open(path, encoding="ascii") as handle:
        return int(handle.read().strip())


def _read_name(zone: str) -> str:
    try:
        with open(os.path.join(zone, "name"), encoding="ascii") as handle:
            return handle.read().strip() or os.path.basename(zone)
    except OSError:
        return os.path.basename(zone)


class RaplZone:
    """One readable RAPL counter: its folder, ``name`` (``package-0``, ``dram``, ...),
    wrap range in microjoules, and whether it counts towards a call's total."""

    def __init__(self, path: str, name: str, max_range_uj: int | None, counted: bool):
        self.path, self.name = path, name
        self.counter = os.path.join(path, "energy_uj")
        self.max_range_uj = max_range_uj
        self.counted = counted

    @property
    def label(self) -> str:
        """The name, with the zone's folder where a name repeats (two ``dram``)."""
        return f"{self.name} ({os.path.basename(self.path)})"

    def __repr__(self) -> str:
        return f"RaplZone({self.path!r}, {self.name!r}, counted={self.counted})"


def rapl_zones(root: str = POWERCAP) -> tuple[list[RaplZone], str | None]:
    """The readable RAPL zones under ``root`` and ``None``, or ``[]`` and the reason
    none can be read (see the module docstring)."""
    if not sys.platform.startswith("linux") and root == POWERCAP:
        return [], f"not Linux ({sys.platform}): no powercap interface"
    if not os.path.isdir(root):
        return [], (f"no {root} (no powercap driver here: most virtual machines and "
                    f"containers expose no RAPL counters)")
    try:
        entries = sorted(os.listdir(root))
    except OSError as exc:
        return [], f"cannot list {root}: {exc.strerror or exc}"
    folders = [e for e in entries if e.startswith("intel-rapl:")
               and os.path.isfile(os.path.join(root, e, "energy_uj"))]
    if not folders:
        return [], f"no RAPL zone (intel-rapl:N with an energy_uj counter) in {root}"
    zones, refused = [], []
    for folder in folders:
        path = os.path.join(root, folder)
        counter = os.path.join(path, "energy_uj")
        try:
            read_counter(counter)
        except PermissionError:
            refused.append(
                f"permission denied reading {counter} (RAPL counters are readable by "
                f"root only on kernels patched for CVE-2020-8694: run as root, or let "
                f"this user read them)")
            continue
        except (OSError, ValueError) as exc:
            refused.append(f"cannot read {counter}: {getattr(exc, 'strerror', None) or exc}")
            continue
        try:
            max_range = read_counter(os.path.join(path, "max_energy_range_uj"))
        except (OSError, ValueError):
            max_range = None
        zones.append(RaplZone(path, _read_name(path), max_range, False))
    if not zones:
        return [], refused[0]
    top = [z for z in zones if os.path.basename(z.path).count(":") == 1]
    packages = [z for z in top if z.name.startswith("package")]
    for zone in packages or [z for z in top if z.name != "psys"] or top:
        zone.counted = True
    if not any(z.counted for z in zones):
        return [], f"no readable package zone under {root} (only subzones are readable)"
    return zones, None


class Energy(TestMetric):
    """Joules per run of the measured region from the RAPL counters (see the module
    docstring), or ``not available: <reason>``.

    Args:
        root: the powercap folder (``/sys/class/powercap``; tests point it at a fake
            tree).

    Summary when measured: ``available`` (True), ``status`` (``"measured: RAPL
    package-0, ..."``), ``joules_per_call`` (all runs' joules over their number: the
    headline), ``median``, ``min``, ``max``, ``n``, ``total_joules``, ``seconds`` (the
    runs' wall time), ``watts`` (total joules over those seconds), ``zones`` (each
    zone's joules per call, by name), ``counted`` (the zones summed), ``wraps`` (counter
    wrap-arounds seen). Samples: each run's joules. When the counters cannot be read:
    ``available`` False, ``status`` ``"not available: <reason>"``, the numbers
    ``None``; the metric never raises for that.
    """
    fields = ("available", "status", "joules_per_call", "median", "min", "max", "n",
              "total_joules", "seconds", "watts", "zones", "counted", "wraps")

    def __init__(self, root: str = POWERCAP):
        self.root = str(root)
        self.zones, self.reason = rapl_zones(self.root)
        self._before: list[int] | None = None
        self._t0 = 0
        self.reset()

    @property
    def available(self) -> bool:
        return self.reason is None

    def reset(self) -> None:
        self._before = None
        self._calls: list[list[int]] = []   # per run: microjoules per zone
        self._seconds: list[float] = []
        self._wraps = 0
        self._failure: str | None = None

    def _read(self) -> list[int] | None:
        try:
            return [read_counter(z.counter) for z in self.zones]
        except (OSError, ValueError) as exc:
            self._failure = f"reading a RAPL counter failed during the runs: {exc}"
            return None

    def begin(self, inputs=None) -> None:
        if self.zones and self._failure is None:
            self._before = self._read()
            self._t0 = perf_counter_ns()

    def end(self, outputs=None) -> None:
        if not self.zones or self._failure is not None or self._before is None:
            return
        elapsed = perf_counter_ns() - self._t0
        after = self._read()
        if after is None:
            return
        deltas = []
        for zone, before, now in zip(self.zones, self._before, after):
            delta = now - before
            if delta < 0:
                if not zone.max_range_uj:
                    self._failure = (f"{zone.counter} went back ({before} to {now} µJ) "
                                     f"and its max_energy_range_uj is unreadable")
                    return
                delta += zone.max_range_uj
                self._wraps += 1
            deltas.append(delta)
        self._calls.append(deltas)
        self._seconds.append(elapsed * 1e-9)
        self._before = None

    def measure(self, inputs=None, outputs=None, reference_outputs=None) -> MetricResult:
        reason = self.reason or self._failure
        if reason is None and not self._calls:
            reason = "no run of the measured region was recorded"
        if reason is not None:
            summary = {name: None for name in self.fields}
            summary.update(available=False, status=f"not available: {reason}", n=0,
                           wraps=self._wraps)
            return MetricResult(self.name, summary, "joules_per_call", "J", [],
                                conditions={"energy_source": f"not available: {reason}"})
        counted = [i for i, z in enumerate(self.zones) if z.counted]
        joules = [sum(call[i] for i in counted) * MICRO for call in self._calls]
        names = [z.name for z in self.zones]
        labels = [z.label if names.count(z.name) > 1 else z.name for z in self.zones]
        total = sum(joules)
        seconds = sum(self._seconds)
        ordered = sorted(joules)
        middle = len(ordered) // 2
        median = (ordered[middle] if len(ordered) % 2 else
                  (ordered[middle - 1] + ordered[middle]) / 2)
        source = "RAPL " + ", ".join(labels[i] for i in counted)
        summary = {
            "available": True, "status": f"measured: {source}",
            "joules_per_call": total / len(joules), "median": median,
            "min": ordered[0], "max": ordered[-1], "n": len(joules),
            "total_joules": total, "seconds": seconds,
            "watts": total / seconds if seconds > 0 else None,
            "zones": {label: sum(call[i] for call in self._calls) * MICRO / len(joules)
                      for i, label in enumerate(labels)},
            "counted": [labels[i] for i in counted], "wraps": self._wraps}
        result = MetricResult(self.name, summary, "joules_per_call", "J", joules,
                              conditions={"energy_source": source, "powercap": self.root})
        mean_seconds = seconds / len(joules)
        ranges = [z.max_range_uj * MICRO for i, z in enumerate(self.zones)
                  if i in counted and z.max_range_uj]
        if ranges and max(self._seconds) > min(ranges) / WRAP_POWER_WATTS:
            result.warnings.append(
                f"a run lasted {max(self._seconds):.3g} s, longer than a counter's range "
                f"({min(ranges):.3g} J) lasts at {WRAP_POWER_WATTS:g} W: it may have "
                f"wrapped more than once, which no reading can tell (undercounted)")
        if mean_seconds < 0.01:
            result.warnings.append(
                f"runs of {mean_seconds * 1e3:.3g} ms are near the RAPL counters' ~1 ms "
                f"update interval: single runs' joules are quantised; joules_per_call "
                f"(the mean over {len(joules)} runs) is the figure to use")
        return result

    def __repr__(self) -> str:
        state = (f"{len(self.zones)} zone(s)" if self.available
                 else f"not available: {self.reason}")
        return f"Energy({state})"
