"""The five axes of ``deep500 predict --sweep AXIS=SPEC`` and what each changes in the
model (``d5.simulate_training`` on a machine file and a step profile).

Axes, one object each in :data:`AXES`:

* ``link_bandwidth`` (bit/s): the bandwidth of the link. The machine file's
  large-message ping-pong bandwidth B₀ = 8/β (its last segment) is taken as the
  link's: each byte spends 8/B₀ on the wire. Every Hockney segment's β (ping-pong and
  exchange fits) is split into that wire time, min(β, 8/B₀), and the rest, what the
  hosts spend per byte beyond the wire (copies, the TCP stack, both directions of an
  exchange sharing the cores). The wire time scales by B₀/B, the rest is kept:
  β' = β − 8/B₀ + 8/B for a segment at or below the link's rate, β·B₀/B for one
  above it (a token bucket's burst); α is unchanged. Scaling all of β instead would
  make a host-bound exchange twice as slow on a link half as fast
  (``benchmarks/predict_sweep_check.py`` measured both on the emulated cluster). A plain
  number is bit/s, as link rates are quoted (``1e9``: 1 GbE, ``400e9``: 400 Gb/s
  NDR InfiniBand); tc(8)'s units are accepted too, as ``--cluster rate=`` takes them
  (``500mbit``, ``5gbit``; ``gbps`` is bytes/s).
* ``compute_speed`` (factor): the profiled compute divided by it: every node's
  forward and backward, the compute outside the nodes, the update rule and the whole
  steps whose spread prices the wait for the slowest rank. The fusion copy (a memory
  copy, priced with communication) is not changed.
* ``gamma`` (s/byte): the reduction cost γ of the allreduce's sums (Thakur,
  Rabenseifner & Gropp 2005), one value at every buffer size in place of the file's
  cache- and memory-resident rates.
* ``ranks``: data-parallel ranks (integers).
* ``batch``: samples per rank per step (integers; the profile's per-node lines in
  the batch size give the compute at each).

SPEC is ``a..b`` (5 points spaced evenly in log(value), ends included), ``a..b:n``
(n points) or a comma list ``a,b,c`` (any values, sorted). Integer axes round a
range's points and drop repeats (``ranks=1..1024:11`` is the powers of two).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import numpy as np

# tc(8)'s rate units, as ``--cluster rate=`` reads them (bit/s per unit)
from deep500.lv3_distributed.cluster.spec import _RATE_UNITS
from deep500.utils.errors import Deep500Error

DEFAULT_POINTS = 5
MAX_POINTS = 20000   # a grid this large takes minutes to simulate and no plot shows it
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?)\s*([a-z]*)$")
_EXAMPLE = ("--sweep link_bandwidth=1e9..400e9 --sweep compute_speed=0.5..4 "
            "--sweep gamma=1e-11..1e-9:3 --sweep ranks=2,8,64 --sweep batch=16,64")


@dataclass(frozen=True)
class Axis:
    """One what-if axis: its name, its unit (as JSON and the plots show it), whether
    its values are integers, and what it changes (the module docstring)."""
    name: str
    unit: str
    label: str
    integer: bool = False
    rate: bool = False   # accepts tc(8)'s rate units
    high: float = math.inf   # the largest plausible value (a smaller one where
    low: float = 0.0         # the models' sums could overflow beyond it)

    def value(self, text: str, spec: str) -> float:
        """One value of a SPEC, checked: positive, finite, an integer where asked."""
        raw = text.strip().lower()
        number = None
        match = _QUANTITY.match(raw)
        if match and (match.group(2) == "" or (self.rate and match.group(2) in _RATE_UNITS)):
            number = float(match.group(1)) * (_RATE_UNITS[match.group(2)]
                                              if match.group(2) else 1.0)
        if number is None or not math.isfinite(number):
            units = (f"; a number of bit/s or one with a unit of {', '.join(_RATE_UNITS)}"
                     if self.rate else "")
            raise Deep500Error(f"--sweep {self.name}={spec}: {text.strip()!r} is not a "
                               f"number{units}")
        if number <= 0:
            raise Deep500Error(f"--sweep {self.name}={spec}: {text.strip()!r} is not "
                               f"positive; every axis takes values > 0")
        if not self.low <= number <= self.high:
            raise Deep500Error(f"--sweep {self.name}={spec}: {text.strip()!r} is outside "
                               f"the plausible range [{self.low:g}, {self.high:g}] "
                               f"{self.unit}")
        if self.integer and number != int(number):
            raise Deep500Error(f"--sweep {self.name}={spec}: {text.strip()!r} is not an "
                               f"integer; {self.name} takes whole numbers")
        return float(number)


# The ranges of the machine file's units (deep500.utils.machine.UNIT_RANGES): a link
# of at least 8 bit/s (β <= 1 s/byte), γ <= 1 s/byte, a speed-up of 1e-6 to 1e6.
AXES = {axis.name: axis for axis in (
    Axis("link_bandwidth", "bit/s", "link bandwidth", rate=True, low=8.0, high=8e21),
    Axis("compute_speed", "x", "compute speed (x profiled)", low=1e-6, high=1e6),
    Axis("gamma", "s/byte", "reduction cost γ", high=1.0),
    Axis("ranks", "ranks", "ranks", integer=True),
    Axis("batch", "samples", "batch per rank", integer=True),
)}


@dataclass(frozen=True)
class Sweep:
    """The values of one axis: ``spacing`` "log" for ``a..b`` ranges, "list" for
    comma lists; ``spec`` as given."""
    axis: Axis
    values: tuple
    spacing: str
    spec: str

    def to_dict(self) -> dict:
        return {"name": self.axis.name, "unit": self.axis.unit, "label": self.axis.label,
                "values": list(self.values), "spacing": self.spacing, "spec": self.spec}


def parse_sweep(text: str) -> Sweep:
    """``AXIS=SPEC`` as a Sweep (the module docstring); a Deep500Error says what is
    wrong and what is accepted."""
    name, sep, spec = str(text).partition("=")
    name = name.strip()
    if not sep or not spec.strip():
        raise Deep500Error(f"--sweep {text!r}: give AXIS=SPEC, e.g. {_EXAMPLE}")
    if name not in AXES:
        raise Deep500Error(f"--sweep {text!r}: unknown axis {name!r}; the axes are "
                           f"{', '.join(AXES)}")
    axis, spec = AXES[name], spec.strip()
    if ".." in spec:
        values = _range(axis, spec)
        spacing = "log"
    else:
        values = sorted({axis.value(t, spec) for t in spec.split(",") if t.strip()})
        spacing = "list"
    if not values:
        raise Deep500Error(f"--sweep {text!r}: no values; give a..b, a..b:n or a,b,c")
    if axis.integer:
        values = [int(v) for v in values]
    return Sweep(axis, tuple(values), spacing, spec)


def _range(axis: Axis, spec: str) -> list:
    body, colon, count = spec.partition(":")
    ends = body.split("..")
    if len(ends) != 2 or not all(e.strip() for e in ends):
        raise Deep500Error(f"--sweep {axis.name}={spec}: a range is a..b or a..b:n "
                           f"(n points, spaced evenly in log), e.g. {axis.name}="
                           f"{'1e9..400e9' if axis.rate else '1..64'}")
    low, high = (axis.value(e, spec) for e in ends)
    if low > high:
        raise Deep500Error(f"--sweep {axis.name}={spec}: the range starts above its end "
                           f"({ends[0].strip()} > {ends[1].strip()}); give a..b with a <= b")
    n = DEFAULT_POINTS
    if colon:
        try:
            n = int(count)
        except ValueError:
            raise Deep500Error(f"--sweep {axis.name}={spec}: the number of points "
                               f"{count!r} is not an integer") from None
        if n < 1:
            raise Deep500Error(f"--sweep {axis.name}={spec}: {n} points; give n >= 1 "
                               f"(a..b:n)")
    if low == high or n == 1:
        if low != high:
            raise Deep500Error(f"--sweep {axis.name}={spec}: one point cannot span "
                               f"{ends[0].strip()}..{ends[1].strip()}; give n >= 2")
        return [low]
    values = np.geomspace(low, high, n)
    values[0], values[-1] = low, high
    if axis.integer:
        return sorted({float(round(v)) for v in values})
    return [float(v) for v in values]


def parse_sweeps(texts) -> list[Sweep]:
    """Every ``--sweep``, in the order given; an axis at most once, a grid of at most
    ``MAX_POINTS`` points."""
    sweeps = [parse_sweep(t) for t in texts]
    seen = set()
    for sweep in sweeps:
        if sweep.axis.name in seen:
            raise Deep500Error(f"--sweep {sweep.axis.name} is given twice; give each axis "
                               f"once (a comma list joins values: "
                               f"{sweep.axis.name}=a,b,c)")
        seen.add(sweep.axis.name)
    size = math.prod(len(s.values) for s in sweeps)
    if size > MAX_POINTS:
        raise Deep500Error(f"--sweep: a grid of {size} points (" + " x ".join(
            f"{len(s.values)} {s.axis.name}" for s in sweeps) + f"); give fewer points "
            f"(a..b:n), at most {MAX_POINTS} in all")
    return sweeps


# --- what each axis changes --------------------------------------------------------------

def base_link_bandwidth(machine) -> float:
    """B₀ (bit/s): 8/β of the machine's largest-message segment."""
    beta = machine.segment(math.inf).beta_s_per_byte
    if not beta > 0:
        raise Deep500Error(f"machine '{machine.name}': its network has β = 0 for large "
                           f"messages (an infinitely fast link), so link_bandwidth cannot "
                           f"be swept; give a machine file with a measured β")
    return 8.0 / beta


def with_link_bandwidth(machine, bits_per_s: float):
    """``machine`` on a link of ``bits_per_s``: in every β (ping-pong and exchange
    segments) the wire's part, min(β, 8/B₀), scaled by B₀/B and the hosts' part kept
    (the module docstring); α unchanged."""
    wire, new_wire = 8.0 / base_link_bandwidth(machine), 8.0 / float(bits_per_s)

    def beta(b):
        part = min(b, wire)
        return b - part + part * new_wire / wire

    def rescaled(segments):
        return tuple(replace(s, beta_s_per_byte=beta(s.beta_s_per_byte),
                             ci_beta=tuple(beta(b) for b in s.ci_beta))
                     for s in segments)
    return replace(machine, segments=rescaled(machine.segments),
                   exchange_segments=rescaled(machine.exchange_segments))


def with_gamma(machine, seconds_per_byte: float):
    """``machine`` with one reduction cost γ at every buffer size."""
    g = float(seconds_per_byte)
    return replace(machine, gamma_cache=g, gamma_memory=g, gamma_curve=())


def with_compute_speed(profile, speed: float):
    """``profile`` (at the batch and threads it will be simulated at) with its compute
    ``speed`` times faster; the fusion copy unchanged. Its per-node batch lines are
    dropped: they describe the unscaled compute."""
    s = float(speed)
    if s == 1.0:
        return profile
    layers = [replace(layer, forward_s=layer.forward_s / s, backward_s=layer.backward_s / s)
              for layer in profile.layers]
    return replace(profile, layers=layers, other_compute_s=profile.other_compute_s / s,
                   update_s=profile.update_s / s,
                   step_samples=[t / s for t in profile.step_samples], batch_lines={},
                   source=profile.source + f", compute x{s:g} faster")
