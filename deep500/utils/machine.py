"""The machine model every level reads: network (Hockney α-β), reduction rate γ, memory
bandwidth and peak FLOP/s, loaded from a YAML machine file.

A machine file holds, with units in every key name::

    name: my-host
    source: "calibrated on host X at 2026-11-25T00:40:00Z by deep500 calibrate"
    network:
      alpha_s: {value: 2.1e-6, ci: [1.9e-6, 2.4e-6]}
      segments:                    # beta piecewise in message size (Hockney per segment)
        - {min_bytes: 0, max_bytes: 65536, alpha_s: 2.1e-6,
           beta_s_per_byte: 1.2e-10, ci_beta: [1.1e-10, 1.3e-10]}
        - {min_bytes: 65536, max_bytes: null, alpha_s: 9.0e-6,
           beta_s_per_byte: 8.0e-11, ci_beta: [7.8e-11, 8.3e-11]}
      exchange_segments: [...]     # optional: both ranks Sendrecv at once, same form
      coherence:                   # optional: δ, the extra cost per byte of writing lines
        sum_curve:                 # a peer's receive has read (calibration.coherence):
          - {buffer_bytes: 1048576, value: 4.4e-11, ci: [...]}   # summing into them
        receive_curve: [...]       # receiving into them
    reduction:
      gamma_cache_s_per_byte: {value: 1.0e-10, ci: [...], buffer_bytes: 65536}
      gamma_memory_s_per_byte: {value: 3.0e-10, ci: [...], buffer_bytes: 67108864}
      gamma_curve:                 # optional: gamma at more buffer sizes
        - {buffer_bytes: 1048576, value: 1.5e-10, ci: [...]}
    memory:
      bandwidth_bytes_per_s: {value: 1.2e10, ci: [...]}
    compute:
      peak_flops_per_s:
        gemm: {1: {value: 9.0e10, ci: [...]}, 2: {value: 1.7e11, ci: [...]}}
        conv: {1: {value: 6.0e10, ci: [...]}}
    software:                      # optional: Deep500's own per-call costs
      allreduce_call_overhead_s:   # LogP's o per CommunicationNetwork.allreduce algorithm
        ring: {value: 3.1e-6, ci: [...]}
      fusion_copy:                 # optional: FusedBuffer.pack, t = per_tensor_s·k + s_per_byte·n
        per_tensor_s: {value: 1.5e-6, ci: [...]}
        s_per_byte: {value: 1.0e-10, ci: [...]}
      wire_casts:                  # optional: narrowing to / widening from a 16-bit wire
        bfloat16: {encode_s_per_element: {value: 4.6e-9}, decode_s_per_element: {value: 9e-10}}
      overlap:                     # optional: a bucketed non-blocking allreduce beside compute
        algorithms:                # kappa: compute lost per s in flight; eta: its slow-down
          ring: {compute_stretch: {value: 0.3}, communication_stretch: {value: 2.5}}
      allreduce_in_context:        # optional: allreduce between compute bursts
        ranks: 2
        algorithms:                # ratio = measured / (alpha-beta-gamma model + o)
          ring: [{nbytes: 65536, measured_median_s: 3.8e-5, predicted_s: 2.3e-5, ratio: 1.6}]
    samples_file: machine.samples.jsonl   # raw samples, optional, beside the YAML

A machine file may also be named by the name of a file shipped in
``deep500/data/machines/`` (``load_machine("infiniband-hdr")``, see
:func:`shipped_machines`): published figures of real interconnects and servers, for
what-if predictions at a scale this host cannot run.

The cost model is Hockney's, t(n) = α + β·n (R. W. Hockney, "The communication challenge
for MPP: Intel Paragon and Meiko CS-2", Parallel Computing 20(3), 1994), with α and β
taken from the segment whose ``[min_bytes, max_bytes)`` holds n: one straight line does
not fit an MPI library that switches from an eager to a rendezvous protocol at some
size. γ (seconds per byte reduced) is the rate of an in-place sum, as in Thakur,
Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH",
IJHPCA 19(1), 2005.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from deep500.utils.bounded_yaml import BoundedYamlError, YamlBounds, read_bounded_yaml
from deep500.utils.errors import Deep500Error


class MachineError(Deep500Error):
    """A machine file or machine description that cannot be used."""


_FIX = "fix the machine file, or re-create it with 'deep500 calibrate --out FILE'"

# A calibrated machine file is a few hundred values (tens of KB): bounded like a recipe,
# but a long integer is read (below Python's 4300-digit printing limit) so that the
# field's range check names it.
MACHINE_FILE_BOUNDS = YamlBounds(noun="machine file", max_integer_digits=4000)


@dataclass(frozen=True)
class Segment:
    """One Hockney line t(n) = alpha_s + beta_s_per_byte * n for min_bytes <= n < max_bytes."""
    min_bytes: float
    max_bytes: float  # math.inf for the last segment
    alpha_s: float
    beta_s_per_byte: float
    ci_beta: tuple = (math.nan, math.nan)
    ci_alpha: tuple = (math.nan, math.nan)


@dataclass(frozen=True)
class MachineModel:
    """A loaded, validated, immutable machine description (see the module docstring)."""
    name: str
    source: str
    alpha: float                         # s, point-to-point latency of the first segment
    segments: tuple                      # of Segment, sorted by min_bytes, contiguous
    gamma_cache: float                   # s/byte, in-place sum of a cache-resident buffer
    gamma_memory: float                  # s/byte, in-place sum of a memory-resident buffer
    gamma_cache_bytes: float             # buffer size at which gamma_cache was measured
    gamma_memory_bytes: float            # buffer size at which gamma_memory was measured
    memory_bandwidth: float              # bytes/s, STREAM-like triad
    peak: Mapping[str, Mapping[int, float]] = field(default_factory=dict)  # kind -> threads -> FLOP/s
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    path: str | None = None
    exchange_segments: tuple = ()        # of Segment: both ranks Sendrecv at once
    gamma_curve: tuple = ()              # of (buffer_bytes, s/byte), sorted by size
    allreduce_overheads: Mapping[str, float] = field(default_factory=dict)  # algorithm -> s
    fusion_copy: tuple | None = None     # (per_tensor_s, s_per_byte) of FusedBuffer.pack
    allreduce_context: Mapping[str, tuple] = field(default_factory=dict)  # algorithm -> ((nbytes, ratio), ...)
    shared_sum_curve: tuple = ()         # of (buffer_bytes, s/byte): δ_sum
    shared_receive_curve: tuple = ()     # of (buffer_bytes, s/byte): δ_receive
    wire_casts: Mapping[str, tuple] = field(default_factory=dict)  # dtype -> (encode, decode) s/element
    overlap: Mapping[str, tuple] = field(default_factory=dict)  # algorithm -> (kappa, eta)

    def wire_cast_seconds(self, comm_dtype: str) -> tuple | None:
        """(encode, decode) seconds per element of narrowing float32 values to
        ``comm_dtype`` on the wire and widening them back, as ``deep500 calibrate``
        measured them (``software.wire_casts``); None when the file has none."""
        return self.wire_casts.get(comm_dtype)

    def overlap_stretch(self, algorithm: str) -> tuple | None:
        """(κ, η) of a bucketed non-blocking ``algorithm`` beside compute on this
        machine's busy cores (``software.overlap``,
        ``deep500.lv3_distributed.calibration.overlap``): seconds of compute lost per
        second of communication in flight beside it, and the communication's slow-down
        factor while the compute runs; None when the file has none for it."""
        return self.overlap.get(algorithm)

    def shared_sum(self, nbytes: float) -> float:
        """δ_sum (s/byte): how much more summing into a buffer of ``nbytes`` costs when a
        peer's receive has read it since this rank last wrote it (its lines are shared
        with the peer's core; ``deep500.lv3_distributed.calibration.coherence``); linear in
        log(size) between the measured sizes, flat beyond them. 0.0 when the file has
        no ``network.coherence`` (over a network the NIC reads the pages, no core
        keeps them)."""
        return _log_interpolate(self.shared_sum_curve, float(nbytes)) \
            if self.shared_sum_curve else 0.0

    def shared_receive(self, nbytes: float) -> float:
        """δ_receive (s/byte): the same for receiving into such a buffer."""
        return _log_interpolate(self.shared_receive_curve, float(nbytes)) \
            if self.shared_receive_curve else 0.0

    def allreduce_context_factor(self, algorithm: str, nbytes: float) -> float:
        """How much slower ``algorithm``'s allreduce of ``nbytes`` runs inside a
        training step than the model with o predicts: the measured/predicted ratio of
        the file's ``software.allreduce_in_context`` (``deep500 calibrate``'s calls
        between compute bursts), interpolated in log(size), flat beyond the sizes
        measured; 1.0 when the file has none for ``algorithm``."""
        points = self.allreduce_context.get(algorithm)
        if not points:
            return 1.0
        return _log_interpolate(points, nbytes)

    def allreduce_overhead(self, algorithm: str) -> float:
        """Deep500's per-call software overhead o (s) of ``CommunicationNetwork.allreduce``
        with ``algorithm`` (LogP's o: Culler et al., "LogP: Towards a Realistic Model of
        Parallel Computation", PPoPP 1993): the measured time of a 4-byte allreduce
        minus its α-β-γ prediction, from the file's ``software.allreduce_call_overhead_s``;
        0.0 when the file has none for ``algorithm``."""
        return float(self.allreduce_overheads.get(algorithm, 0.0))

    def fusion_copy_time(self, nbytes: float, tensors: int = 1) -> float:
        """Seconds of ``FusedBuffer.pack`` copying ``tensors`` arrays of ``nbytes`` in
        all into the fusion buffer (``software.fusion_copy``); 0.0 when the file has
        none."""
        if self.fusion_copy is None:
            return 0.0
        per_tensor, per_byte = self.fusion_copy
        return per_tensor * int(tensors) + per_byte * float(nbytes)

    def exchange_time(self, nbytes: float, resident_bytes: float | None = None) -> float:
        """Seconds of a ``Sendrecv`` of ``nbytes`` each way between two ranks at once:
        the ``exchange_segments`` fit when the file has one, else ``p2p_time`` (the
        textbook's full-duplex assumption); ``resident_bytes`` as for ``p2p_time``."""
        if not self.exchange_segments:
            return self.p2p_time(nbytes, resident_bytes)

        def find(n):
            return next((s for s in self.exchange_segments if s.min_bytes <= n < s.max_bytes),
                        self.exchange_segments[-1] if n >= self.exchange_segments[-1].min_bytes
                        else self.exchange_segments[0])
        n = float(nbytes)
        seg = find(n)
        beta = (seg.beta_s_per_byte if resident_bytes is None or resident_bytes <= n
                else find(float(resident_bytes)).beta_s_per_byte)
        return seg.alpha_s + beta * n

    def segment(self, nbytes: float) -> Segment:
        """The Hockney segment that holds a message of ``nbytes``."""
        if not self.segments:
            skipped = (self.raw.get("network") or {}).get("skipped", "")
            raise MachineError(f"machine '{self.name}'{' (' + self.path + ')' if self.path else ''} "
                               f"has no network measurements ({skipped}); calibrate it with "
                               f"'deep500 calibrate --np 2 --out FILE'")
        for seg in self.segments:
            if seg.min_bytes <= nbytes < seg.max_bytes:
                return seg
        return self.segments[-1] if nbytes >= self.segments[-1].min_bytes else self.segments[0]

    def alpha_at(self, nbytes: float) -> float:
        """α (s) of the segment holding ``nbytes``."""
        return self.segment(nbytes).alpha_s

    def beta(self, nbytes: float) -> float:
        """β (s/byte) at message size ``nbytes``."""
        return self.segment(nbytes).beta_s_per_byte

    def p2p_time(self, nbytes: float, resident_bytes: float | None = None) -> float:
        """Hockney time α(n) + β(n)·n (s) of one point-to-point message of ``nbytes``.

        ``resident_bytes``: the bytes the sender's and receiver's data occupy (e.g. the
        whole buffer a collective sends pieces of); β is then taken at
        max(n, resident_bytes). The ping-pong measured β(m) on an m-byte buffer, so β
        at a size is the rate for data of that footprint: pieces of a buffer that does
        not fit in the caches move at the memory-resident rate.
        """
        seg = self.segment(nbytes)
        beta = (seg.beta_s_per_byte if resident_bytes is None or resident_bytes <= nbytes
                else self.segment(resident_bytes).beta_s_per_byte)
        return seg.alpha_s + beta * float(nbytes)

    def gamma(self, nbytes: float) -> float:
        """γ (s/byte) to sum ``nbytes`` into a buffer in place.

        The cache-resident rate up to the size it was measured at, the memory-resident
        rate from the size it was measured at, linear in log(size) between the two; with
        a ``gamma_curve``, linear in log(size) between its neighbouring points.
        """
        n = float(nbytes)
        if self.gamma_curve:
            return _log_interpolate(self.gamma_curve, n)
        lo, hi = self.gamma_cache_bytes, self.gamma_memory_bytes
        if n <= lo or hi <= lo:
            return self.gamma_cache
        if n >= hi:
            return self.gamma_memory
        w = (math.log(n) - math.log(lo)) / (math.log(hi) - math.log(lo))
        return self.gamma_cache + w * (self.gamma_memory - self.gamma_cache)

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth

    def peak_flops(self, threads: int = 1, kind: str = "gemm") -> float:
        """Peak FLOP/s of ``kind`` ('gemm' or 'conv') at ``threads`` threads.

        The value measured at the nearest thread count (ties: the smaller count); 'conv'
        falls back to 'gemm' when the file has no convolution measurement.
        """
        table = self.peak.get(kind) or (self.peak.get("gemm") if kind == "conv" else None)
        if not table:
            known = sorted(self.peak) or ["none"]
            raise MachineError(f"machine '{self.name}' has no peak FLOP/s for kind '{kind}' "
                               f"(has: {', '.join(known)}); {_FIX}")
        counts = sorted(table)
        best = min(counts, key=lambda t: (abs(t - int(threads)), t))
        return table[best]


def _log_interpolate(points, n: float) -> float:
    """Piecewise linear in log(size) through (size, value) points, constant outside."""
    if n <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if n <= x1:
            w = (math.log(n) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return y0 + w * (y1 - y0)
    return points[-1][1]


# --- loading and validation -------------------------------------------------------------

def _where(path):
    return f"machine file {path}" if path else "machine description"


# The plausible range of each unit. A value outside it is a typo or a damaged file, and
# would turn predictions into inf or 0 (β = 1e308 s/byte times any message overflows);
# rates are divided by, so they start at 1.
UNIT_RANGES = {"s": (0.0, 3600.0), "s/byte": (0.0, 1.0), "bytes": (0.0, 2.0 ** 64),
               "bytes/s": (1.0, 1e21), "FLOP/s": (1.0, 1e21), "ratio": (1e-6, 1e6)}


def _number(value, field_name, path, positive=True, allow_zero=False, unit=None):
    """The number at ``field_name`` (a plain number or ``{value: ...}``), finite,
    positive (or non-negative with ``allow_zero``) and within ``UNIT_RANGES[unit]``;
    a MachineError names the field otherwise."""
    if isinstance(value, Mapping):
        if "value" not in value:
            raise MachineError(f"{_where(path)}: field '{field_name}' has no 'value'; {_FIX}")
        value = value["value"]
    if isinstance(value, bool) or value is None:
        raise MachineError(f"{_where(path)}: field '{field_name}' is {value!r}, not a number; {_FIX}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise MachineError(f"{_where(path)}: field '{field_name}' is {value!r}, not a number; "
                           f"{_FIX}") from None
    except OverflowError:  # an integer beyond float range
        number = math.inf
    if math.isnan(number) or math.isinf(number):
        raise MachineError(f"{_where(path)}: field '{field_name}' is {value!r}; it must be a "
                           f"finite number; {_FIX}")
    if number < 0 or (number == 0 and not allow_zero and positive):
        raise MachineError(f"{_where(path)}: field '{field_name}' is {number!r}; it must be "
                           f"{'non-negative' if allow_zero else 'positive'}; {_FIX}")
    low, high = UNIT_RANGES.get(unit, (0.0, math.inf))
    if (number != 0 and number < low) or number > high:
        raise MachineError(f"{_where(path)}: field '{field_name}' is {number!r} {unit}, outside "
                           f"the plausible range [{low:g}, {high:g}] {unit}; {_FIX}")
    return number


def _pair(value, field_name, path) -> tuple:
    """A confidence interval ``[low, high]`` (or NaNs when absent); a MachineError
    names the field when it is something else."""
    if value is None:
        return (math.nan, math.nan)
    if isinstance(value, (list, tuple)) and len(value) == 2 and \
            all(isinstance(v, float) or (isinstance(v, int) and not isinstance(v, bool)
                                         and abs(v) < 2 ** 64) for v in value):
        return (float(value[0]), float(value[1]))  # unknown bounds may be NaN
    raise MachineError(f"{_where(path)}: field '{field_name}' is {value!r}; it must be a "
                       f"list of two numbers [low, high]; {_FIX}")


def _list(value, field_name, path) -> list:
    """A list field (``[]`` when absent); a MachineError names it otherwise."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise MachineError(f"{_where(path)}: field '{field_name}' must be a list, not "
                           f"{type(value).__name__}; {_FIX}")
    return value


def _get(mapping, key, prefix, path):
    if not isinstance(mapping, Mapping) or key not in mapping or mapping[key] is None:
        raise MachineError(f"{_where(path)}: field '{prefix}{key}' is missing; {_FIX}")
    return mapping[key]


def _ci(value):
    if isinstance(value, Mapping) and isinstance(value.get("ci"), (list, tuple)) and len(value["ci"]) == 2:
        try:
            return (float(value["ci"][0]), float(value["ci"][1]))
        except (TypeError, ValueError):
            return (math.nan, math.nan)
    return (math.nan, math.nan)


def machine_from_dict(data: Mapping, path: str | None = None) -> MachineModel:
    """Validate a machine description (the YAML's content) and build a MachineModel."""
    if not isinstance(data, Mapping):
        raise MachineError(f"{_where(path)}: the top level must be a mapping, not "
                           f"{type(data).__name__}; {_FIX}")
    name = str(data.get("name") or (os.path.splitext(os.path.basename(path))[0] if path else "machine"))
    source = str(data.get("source") or "unknown")
    network = _get(data, "network", "", path)
    # each part in the order of the file, so that the first problem is reported first
    alpha, segments = _hockney_segments(network, path)
    exchange = _exchange_segments(network, path)
    shared_sum, shared_receive = _coherence(
        network.get("coherence") if isinstance(network, Mapping) else None, path)
    g_cache, g_mem, g_cache_bytes, g_mem_bytes, curve = _reduction(
        _get(data, "reduction", "", path), path)
    memory = _get(data, "memory", "", path)
    bandwidth = _number(_get(memory, "bandwidth_bytes_per_s", "memory.", path),
                        "memory.bandwidth_bytes_per_s", path, unit="bytes/s")
    peak = _peak(data.get("compute") or {}, path)
    overheads, fusion, context, casts, overlap = _software(data.get("software"), path)
    return MachineModel(name=name, source=source, alpha=alpha, segments=tuple(segments),
                        gamma_cache=g_cache, gamma_memory=g_mem, gamma_cache_bytes=g_cache_bytes,
                        gamma_memory_bytes=g_mem_bytes, memory_bandwidth=bandwidth,
                        peak=peak, raw=dict(data), path=path, exchange_segments=exchange,
                        gamma_curve=tuple(curve), allreduce_overheads=overheads,
                        fusion_copy=fusion, allreduce_context=context,
                        shared_sum_curve=shared_sum, shared_receive_curve=shared_receive,
                        wire_casts=casts, overlap=overlap)


def _hockney_segments(network, path) -> tuple:
    """``network``'s (α, [Segment]): its ``segments``, or one line from ``alpha_s`` and
    ``beta_s_per_byte``; no segment and α NaN for a file calibrated without the
    network, so that network predictions refuse it."""
    raw_segments = network.get("segments") if isinstance(network, Mapping) else None
    segments = []
    if isinstance(network, Mapping) and network.get("skipped"):
        return math.nan, segments  # 'deep500 calibrate --no-network'
    if raw_segments:
        if not isinstance(raw_segments, list):
            raise MachineError(f"{_where(path)}: field 'network.segments' must be a list; {_FIX}")
        for i, seg in enumerate(raw_segments):
            prefix = f"network.segments[{i}]."
            alpha = _number(_get(seg, "alpha_s", prefix, path), prefix + "alpha_s", path,
                            allow_zero=True, unit="s")
            beta = _number(_get(seg, "beta_s_per_byte", prefix, path), prefix + "beta_s_per_byte",
                           path, allow_zero=True, unit="s/byte")
            lo = _number(seg.get("min_bytes", 0), prefix + "min_bytes", path, allow_zero=True,
                         unit="bytes")
            hi_raw = seg.get("max_bytes")
            hi = math.inf if hi_raw is None else _number(hi_raw, prefix + "max_bytes", path,
                                                         unit="bytes")
            if hi <= lo:
                raise MachineError(f"{_where(path)}: field '{prefix}max_bytes' ({hi}) is not above "
                                   f"min_bytes ({lo}); {_FIX}")
            segments.append(Segment(lo, hi, alpha, beta,
                                    ci_beta=_pair(seg.get("ci_beta"), prefix + "ci_beta", path),
                                    ci_alpha=_pair(seg.get("ci_alpha"), prefix + "ci_alpha",
                                                   path)))
        segments.sort(key=lambda s: s.min_bytes)
        alpha = _number(network.get("alpha_s", segments[0].alpha_s), "network.alpha_s", path,
                        allow_zero=True, unit="s")
        return alpha, segments
    alpha = _number(_get(network, "alpha_s", "network.", path), "network.alpha_s", path,
                    allow_zero=True, unit="s")
    beta = _number(_get(network, "beta_s_per_byte", "network.", path),
                   "network.beta_s_per_byte", path, unit="s/byte")
    return alpha, [Segment(0.0, math.inf, alpha, beta, ci_beta=_ci(network["beta_s_per_byte"]),
                           ci_alpha=_ci(network["alpha_s"]))]


def _exchange_segments(network, path) -> tuple:
    """``network.exchange_segments`` (both ranks ``Sendrecv`` at once), sorted by size."""
    exchange = []
    raw_exchange = network.get("exchange_segments") if isinstance(network, Mapping) else None
    for i, seg in enumerate(_list(raw_exchange, "network.exchange_segments", path)):
        prefix = f"network.exchange_segments[{i}]."
        hi_raw = seg.get("max_bytes") if isinstance(seg, Mapping) else None
        exchange.append(Segment(
            _number(seg.get("min_bytes", 0) if isinstance(seg, Mapping) else None,
                    prefix + "min_bytes", path, allow_zero=True, unit="bytes"),
            math.inf if hi_raw is None else _number(hi_raw, prefix + "max_bytes", path,
                                                    unit="bytes"),
            _number(_get(seg, "alpha_s", prefix, path), prefix + "alpha_s", path,
                    allow_zero=True, unit="s"),
            _number(_get(seg, "beta_s_per_byte", prefix, path), prefix + "beta_s_per_byte",
                    path, allow_zero=True, unit="s/byte"),
            ci_beta=_pair(seg.get("ci_beta"), prefix + "ci_beta", path),
            ci_alpha=_pair(seg.get("ci_alpha"), prefix + "ci_alpha", path)))
    exchange.sort(key=lambda s: s.min_bytes)
    return tuple(exchange)


def _reduction(reduction, path) -> tuple:
    """``reduction``: (γ cache-resident, γ memory-resident, the buffer sizes they were
    measured at, and the ``gamma_curve`` as sorted (bytes, s/byte) points)."""
    g_cache_raw = _get(reduction, "gamma_cache_s_per_byte", "reduction.", path)
    g_cache = _number(g_cache_raw, "reduction.gamma_cache_s_per_byte", path, unit="s/byte")
    g_mem_raw = reduction.get("gamma_memory_s_per_byte", g_cache_raw)
    g_mem = _number(g_mem_raw, "reduction.gamma_memory_s_per_byte", path, unit="s/byte")
    g_cache_bytes, g_mem_bytes = (
        _number(raw.get("buffer_bytes", default) if isinstance(raw, Mapping) else default,
                f"reduction.{key}.buffer_bytes", path, unit="bytes")
        for raw, key, default in ((g_cache_raw, "gamma_cache_s_per_byte", 65536),
                                  (g_mem_raw, "gamma_memory_s_per_byte", 64 << 20)))
    curve = []
    for i, point in enumerate(_list(reduction.get("gamma_curve"), "reduction.gamma_curve", path)):
        prefix = f"reduction.gamma_curve[{i}]."
        curve.append((_number(_get(point, "buffer_bytes", prefix, path), prefix + "buffer_bytes",
                              path, unit="bytes"),
                      _number(_get(point, "value", prefix, path), prefix + "value", path,
                              unit="s/byte")))
    curve.sort()
    return g_cache, g_mem, g_cache_bytes, g_mem_bytes, curve


def _peak(compute, path) -> dict:
    """``compute.peak_flops_per_s``: {kind: {threads: FLOP/s}}."""
    peak = {}
    table = compute.get("peak_flops_per_s") if isinstance(compute, Mapping) else None
    if table is None:
        return peak
    if not isinstance(table, Mapping):
        raise MachineError(f"{_where(path)}: field 'compute.peak_flops_per_s' must map a kind "
                           f"('gemm', 'conv') to thread counts; {_FIX}")
    for kind, per_threads in table.items():
        if not isinstance(per_threads, Mapping) or not per_threads:
            raise MachineError(f"{_where(path)}: field 'compute.peak_flops_per_s.{kind}' must "
                               f"map thread counts to FLOP/s; {_FIX}")
        peak[str(kind)] = {}
        for threads, value in per_threads.items():
            fname = f"compute.peak_flops_per_s.{kind}.{threads}"
            try:
                t = int(threads)
            except (TypeError, ValueError, OverflowError):
                raise MachineError(f"{_where(path)}: field '{fname}': thread count "
                                   f"{threads!r} is not an integer; {_FIX}") from None
            if t < 1:
                raise MachineError(f"{_where(path)}: field '{fname}': thread count must be "
                                   f">= 1; {_FIX}")
            peak[str(kind)][t] = _number(value, fname, path, unit="FLOP/s")
    return peak


def _coherence(section, path) -> tuple:
    """``network.coherence``: the δ_sum and δ_receive curves, each ``((buffer_bytes,
    s/byte), ...)`` sorted by size (δ may be 0: no extra cost)."""
    if section is None:
        return (), ()
    if not isinstance(section, Mapping):
        raise MachineError(f"{_where(path)}: field 'network.coherence' must be a mapping "
                           f"with sum_curve and receive_curve; {_FIX}")
    curves = []
    for key in ("sum_curve", "receive_curve"):
        prefix = f"network.coherence.{key}"
        points = section.get(key)
        if not isinstance(points, list) or not points:
            raise MachineError(f"{_where(path)}: field '{prefix}' must be a non-empty list "
                               f"of {{buffer_bytes, value}}; {_FIX}")
        curve = []
        for i, point in enumerate(points):
            where = f"{prefix}[{i}]."
            curve.append((_number(_get(point, "buffer_bytes", where, path),
                                  where + "buffer_bytes", path, unit="bytes"),
                          _number(_get(point, "value", where, path), where + "value", path,
                                  allow_zero=True, unit="s/byte")))
        curves.append(tuple(sorted(curve)))
    return tuple(curves)


def _software(section, path) -> tuple[dict, tuple | None, dict, dict, dict]:
    """The optional ``software`` section: ``{algorithm: o}``, the fusion copy's
    (per_tensor_s, s_per_byte), validated (non-negative numbers), the in-context
    ratios ``{algorithm: ((nbytes, ratio), ...)}`` (positive numbers), the wire
    casts ``{dtype: (encode, decode)}`` and the overlap stretches ``{algorithm:
    (κ, η)}``."""
    if section is None:
        return {}, None, {}, {}, {}
    if not isinstance(section, Mapping):
        raise MachineError(f"{_where(path)}: field 'software' must be a mapping, not "
                           f"{type(section).__name__}; {_FIX}")
    overheads = {}
    table = section.get("allreduce_call_overhead_s")
    if table is not None:
        if not isinstance(table, Mapping):
            raise MachineError(f"{_where(path)}: field 'software.allreduce_call_overhead_s' "
                               f"must map allreduce algorithms to seconds; {_FIX}")
        for algorithm, value in table.items():
            fname = f"software.allreduce_call_overhead_s.{algorithm}"
            overheads[str(algorithm)] = _number(value, fname, path, allow_zero=True, unit="s")
    fusion = None
    copy = section.get("fusion_copy")
    if copy is not None:
        prefix = "software.fusion_copy."
        fusion = tuple(_number(_get(copy, key, prefix, path), prefix + key, path,
                               allow_zero=True, unit=unit)
                       for key, unit in (("per_tensor_s", "s"), ("s_per_byte", "s/byte")))
    return (overheads, fusion, _in_context(section.get("allreduce_in_context"), path),
            _wire_casts(section.get("wire_casts"), path),
            _overlap(section.get("overlap"), path))


def _overlap(section, path) -> dict:
    """``software.overlap``: ``{algorithm: (κ, η)}``, κ ≥ 0 and η ≥ 1."""
    if section is None:
        return {}
    prefix = "software.overlap.algorithms"
    table = section.get("algorithms") if isinstance(section, Mapping) else None
    if not isinstance(table, Mapping):
        raise MachineError(f"{_where(path)}: field '{prefix}' must map non-blocking "
                           f"allreduce algorithms to {{compute_stretch, "
                           f"communication_stretch}}; {_FIX}")
    stretches = {}
    for algorithm, entry in table.items():
        where = f"{prefix}.{algorithm}."
        kappa = _number(_get(entry, "compute_stretch", where, path),
                        where + "compute_stretch", path, allow_zero=True, unit="s/s")
        eta = _number(_get(entry, "communication_stretch", where, path),
                      where + "communication_stretch", path, unit="factor")
        if eta < 1:
            raise MachineError(f"{_where(path)}: field '{where}communication_stretch' is "
                               f"{eta}; a slow-down factor is at least 1; {_FIX}")
        stretches[str(algorithm)] = (kappa, eta)
    return stretches


def _wire_casts(section, path) -> dict:
    """``software.wire_casts``: ``{dtype: (encode, decode)}`` seconds per element
    (non-negative numbers), for the narrow wire types it names."""
    if section is None:
        return {}
    prefix = "software.wire_casts"
    if not isinstance(section, Mapping):
        raise MachineError(f"{_where(path)}: field '{prefix}' must map wire types to "
                           f"their cast costs; {_FIX}")
    casts = {}
    for name in ("float16", "bfloat16"):
        if name in section:
            entry = section[name]
            casts[name] = tuple(
                _number(_get(entry, key, f"{prefix}.{name}.", path),
                        f"{prefix}.{name}.{key}", path, allow_zero=True, unit="s")
                for key in ("encode_s_per_element", "decode_s_per_element"))
    return casts


def _in_context(section, path) -> dict:
    """``software.allreduce_in_context``: ``{algorithm: ((nbytes, ratio), ...)}`` sorted
    by size."""
    if section is None:
        return {}
    prefix = "software.allreduce_in_context"
    table = section.get("algorithms") if isinstance(section, Mapping) else None
    if not isinstance(table, Mapping):
        raise MachineError(f"{_where(path)}: field '{prefix}.algorithms' must map allreduce "
                           f"algorithms to lists of {{nbytes, ratio}}; {_FIX}")
    context = {}
    for algorithm, rows in table.items():
        fname = f"{prefix}.algorithms.{algorithm}"
        if not isinstance(rows, (list, tuple)) or not rows:
            raise MachineError(f"{_where(path)}: field '{fname}' must be a non-empty list of "
                               f"{{nbytes, ratio}}; {_FIX}")
        points = []
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping):
                raise MachineError(f"{_where(path)}: field '{fname}[{i}]' must be a mapping "
                                   f"with nbytes and ratio; {_FIX}")
            points.append((_number(_get(row, "nbytes", f"{fname}[{i}].", path),
                                   f"{fname}[{i}].nbytes", path, unit="bytes"),
                           _number(_get(row, "ratio", f"{fname}[{i}].", path),
                                   f"{fname}[{i}].ratio", path, unit="ratio")))
        context[str(algorithm)] = tuple(sorted(points))
    return context


#: Where the machine files of real interconnects shipped with Deep500 are.
SHIPPED_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "data", "machines")


def shipped_machines() -> dict:
    """``{name: path}`` of the machine files shipped in ``deep500/data/machines/``
    (published figures of real interconnects; each number's source is in its file)."""
    if not os.path.isdir(SHIPPED_DIR):
        return {}
    return {os.path.splitext(entry)[0]: os.path.join(SHIPPED_DIR, entry)
            for entry in sorted(os.listdir(SHIPPED_DIR)) if entry.endswith((".yaml", ".yml"))}


def _is_bare_name(path: str) -> bool:
    return os.sep not in path and "/" not in path and not path.endswith((".yaml", ".yml"))


def resolve_machine_path(source: str) -> str:
    """The file ``source`` names: a path, or the name of a shipped machine file (when no
    file of that name exists). Raises MachineError when it is neither."""
    path = os.fspath(source)
    if os.path.isfile(path):
        return path
    shipped = shipped_machines()
    if _is_bare_name(path) and path in shipped:
        return shipped[path]
    names = ", ".join(shipped) or "none"
    raise MachineError(f"machine file {path} does not exist and is not the name of a "
                       f"shipped machine (shipped: {names}); give the path of a machine "
                       f"file, a shipped name, or create one with "
                       f"'deep500 calibrate --out {path}'")


def load_machine(source) -> MachineModel:
    """A MachineModel from a YAML machine file's path, the name of a shipped machine
    file (``"infiniband-hdr"``, see :func:`shipped_machines`), a dict, or a
    MachineModel."""
    if isinstance(source, MachineModel):
        return source
    if isinstance(source, Mapping):
        return machine_from_dict(source)
    if isinstance(source, (str, os.PathLike)):
        path = resolve_machine_path(source)
        try:
            data = read_bounded_yaml(path, MACHINE_FILE_BOUNDS,
                                     name=os.path.basename(path))
        except OSError as error:
            raise MachineError(f"machine file {path} cannot be read: "
                               f"{error.strerror or error}; {_FIX}") from None
        except BoundedYamlError as error:
            raise MachineError(f"machine file {path}: {error}; {_FIX}") from None
        return machine_from_dict(data, path=path)
    raise MachineError(f"a machine is a machine file's path, a dict or a MachineModel, not "
                       f"{type(source).__name__}")


def _plain(value):
    """YAML-safe plain Python values (tuples to lists, inf to None)."""
    if isinstance(value, Mapping):
        return {(k if isinstance(k, (str, int)) else str(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isinf(value):
        return None
    if hasattr(value, "item"):  # numpy scalar
        return _plain(value.item())
    return value


def machine_to_dict(machine: MachineModel) -> dict:
    """The machine file's content for ``machine`` (the raw description when it came from one)."""
    if machine.raw:
        return _plain(machine.raw)
    return _plain({
        "name": machine.name,
        "source": machine.source,
        "network": {"alpha_s": machine.alpha,
                    "segments": [{"min_bytes": s.min_bytes, "max_bytes": s.max_bytes,
                                  "alpha_s": s.alpha_s, "beta_s_per_byte": s.beta_s_per_byte,
                                  "ci_alpha": list(s.ci_alpha), "ci_beta": list(s.ci_beta)}
                                 for s in machine.segments],
                    **({"coherence": {
                        key: [{"buffer_bytes": n, "value": v} for n, v in curve]
                        for key, curve in (("sum_curve", machine.shared_sum_curve),
                                           ("receive_curve", machine.shared_receive_curve))}}
                       if machine.shared_sum_curve else {})},
        "reduction": {"gamma_cache_s_per_byte": {"value": machine.gamma_cache,
                                                 "buffer_bytes": machine.gamma_cache_bytes},
                      "gamma_memory_s_per_byte": {"value": machine.gamma_memory,
                                                  "buffer_bytes": machine.gamma_memory_bytes}},
        "memory": {"bandwidth_bytes_per_s": machine.memory_bandwidth},
        "compute": {"peak_flops_per_s": {k: dict(v) for k, v in machine.peak.items()}},
        **({"software": {
            **({"allreduce_call_overhead_s": dict(machine.allreduce_overheads)}
               if machine.allreduce_overheads else {}),
            **({"fusion_copy": dict(zip(("per_tensor_s", "s_per_byte"), machine.fusion_copy))}
               if machine.fusion_copy is not None else {}),
            **({"allreduce_in_context": {"algorithms": {
                name: [{"nbytes": n, "ratio": r} for n, r in points]
                for name, points in machine.allreduce_context.items()}}}
               if machine.allreduce_context else {}),
            **({"wire_casts": {name: {"encode_s_per_element": encode,
                                      "decode_s_per_element": decode}
                               for name, (encode, decode) in machine.wire_casts.items()}}
               if machine.wire_casts else {}),
            **({"overlap": {"algorithms": {
                name: {"compute_stretch": kappa, "communication_stretch": eta}
                for name, (kappa, eta) in machine.overlap.items()}}}
               if machine.overlap else {})}}
           if machine.allreduce_overheads or machine.fusion_copy is not None
           or machine.allreduce_context or machine.wire_casts or machine.overlap else {}),
    })


def save_machine(machine, path: str) -> str:
    """Write ``machine`` (a MachineModel or a dict, validated first) as a YAML machine file."""
    model = load_machine(machine)
    data = machine_to_dict(model) if not isinstance(machine, Mapping) else _plain(machine)
    import yaml
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            f.write(f"# Deep500 machine file ({model.source})\n")
            yaml.safe_dump(data, f, sort_keys=False)
        os.replace(tmp, path)
    except OSError as error:
        if os.path.isfile(tmp):
            os.remove(tmp)
        raise MachineError(f"cannot write the machine file {path} ({error.strerror or error}); "
                           f"give a writable file path") from None
    return path
