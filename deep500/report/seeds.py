"""Runs that differ only in their seed, aggregated: the mean with a Student-t 95%
confidence interval, and time-to-accuracy as MLPerf Training scores it.

- Mean and CI: the t-interval ``mean ± t_{(1+c)/2, n-1} · s / sqrt(n)`` (Student, 1908;
  e.g. NIST/SEMATECH e-Handbook of Statistical Methods, §7.2.2.1), which assumes the
  runs' values are roughly normal; with 2 to 5 seeds it is wide, as it should be.
- Time to target (MLPerf Training rules, "Benchmark Results"): the mean over the runs
  that reached the target, saying how many did; and, from 3 runs on, MLPerf's score:
  drop the fastest and the slowest run and average the rest, where one run that did
  not reach the target may count as the slowest, and more than one makes the result
  invalid.
"""
from __future__ import annotations

import functools
import math
from collections import OrderedDict

from deep500.report.records import configuration_key
from deep500.report.tables import fmt_time


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularised incomplete beta function (modified
    Lentz's method; Press et al., Numerical Recipes, 3rd ed., §6.4)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@functools.lru_cache(maxsize=256)
def student_t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on :func:`student_t_cdf`; kept per
    (p, df): a report asks for the same few thousands of times)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"student_t_quantile needs 0 < p < 1 and df > 0, got {p}, {df}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < p:
        high *= 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if student_t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


def mean_ci(values, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of the Student-t interval; low = high = nan for one value."""
    values = [float(v) for v in values]
    if not values:
        return math.nan, math.nan, math.nan
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, math.nan, math.nan
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = student_t_quantile((1.0 + confidence) / 2.0, len(values) - 1) * s / math.sqrt(
        len(values))
    return mean, mean - half, mean + half


def mean_curve(curves: list[list]) -> tuple[list, list, list]:
    """Per index: mean, min and max over the curves (one per seed) that have a value there."""
    length = max((len(c) for c in curves), default=0)
    means, lows, highs = [], [], []
    for i in range(length):
        values = [c[i] for c in curves if i < len(c) and c[i] is not None]
        means.append(sum(values) / len(values) if values else None)
        lows.append(min(values) if values else None)
        highs.append(max(values) if values else None)
    return means, lows, highs


def mean_series(groups: list[list[dict]], values_of, name_of) -> tuple[dict, dict]:
    """Per group of runs that differ only in their seed: the mean over its runs of the
    curve ``values_of(record)`` against 1, 2, ... (epochs, steps), named
    ``name_of(group)``; and, for a group of several runs, its band from the lowest to
    the highest run's value. Returns (series, bands) as ``line_panels`` takes them."""
    series, bands = {}, {}
    for group in groups:
        means, lows, highs = mean_curve([values_of(r) for r in group])
        name = name_of(group)
        series[name] = (list(range(1, len(means) + 1)), means)
        if len(group) > 1:
            bands[name] = (lows, highs)
    return series, bands


def seed_groups(records: list[dict], per_seed: bool = False) -> list[list[dict]]:
    """Records grouped by their configuration without ``seed`` and their session
    (each group ordered by seed), or one group per record with ``per_seed``."""
    if per_seed:
        return [[r] for r in records]
    groups: dict[tuple, list[dict]] = OrderedDict()
    for record in records:
        key = (configuration_key(record.get("configuration", {}), without=("seed",)),
               record.get("session"))
        groups.setdefault(key, []).append(record)
    return [sorted(g, key=lambda r: (r.get("configuration", {}).get("seed") is None,
                                      r.get("configuration", {}).get("seed") or 0))
            for g in groups.values()]


def seeds_text(group: list[dict]) -> str:
    return ", ".join(str(r.get("configuration", {}).get("seed")) for r in group)


def fmt_mean_ci(values, fmt, confidence: float = 0.95) -> str:
    """``mean ± half-width`` (or the one value), formatted by ``fmt``."""
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    mean, low, high = mean_ci(values, confidence)
    if math.isnan(low):
        return fmt(mean)
    return f"{fmt(mean)} ± {fmt((high - low) / 2)}"


def mlperf_score(times: list) -> float | None:
    """MLPerf Training's benchmark result from per-run times to target (``None``: the
    run did not reach it): the mean after dropping the fastest and the slowest run, a
    single non-converging run counting as the slowest; ``None`` when fewer than 3 runs
    or more than one did not converge."""
    if len(times) < 3 or sum(t is None for t in times) > 1:
        return None
    ordered = sorted(times, key=lambda t: math.inf if t is None else t)
    kept = ordered[1:-1]
    return sum(kept) / len(kept)


def time_to_target_text(times: list, target, confidence: float = 0.95) -> str:
    """Time to target over runs (``None``: not reached): ``mean ± CI, k of n runs
    reached; MLPerf score``."""
    if target is None:
        return "not measured"
    reached = [t for t in times if t is not None]
    goal = f"target {target:.0%}"
    if not reached:
        return f"not reached ({goal}; 0 of {len(times)} runs)"
    if len(times) == 1:
        return f"{fmt_time(reached[0])} ({goal})"
    text = (f"{fmt_mean_ci(reached, fmt_time, confidence)} (mean of the {len(reached)} "
            f"of {len(times)} runs that reached the {goal})")
    score = mlperf_score(times)
    if score is not None:
        text += f"; MLPerf score {fmt_time(score)}"
    elif len(times) >= 3:
        text += "; MLPerf score invalid (more than one run did not reach the target)"
    return text


def time_to_target_plot(path: str, names: list[str], times: list[list[float]],
                        runs: list[int], target, also: str | None) -> tuple[str, str]:
    """A bar per configuration: the mean time to target over the runs that reached it,
    with its Student-t 95% CI where there are several; returns (caption, path)."""
    from deep500.report.plots import grouped_bars
    means, cis, labels = [], [], []
    for name, reached, total in zip(names, times, runs):
        mean, low, high = mean_ci(reached)
        means.append(mean)
        cis.append((None, None) if math.isnan(low) else (max(low, 0.0), high))
        labels.append(name if total == 1 else f"{name}: {len(reached)} of {total} runs")
    goal = "" if target is None else f" {target:.0%}"
    grouped_bars(path, f"Time to the target accuracy{goal} (mean, 95% CI over seeds)",
                 labels, {"time to target": means}, {"time to target": cis},
                 xlabel="seconds", also=also)
    return ("Time to target accuracy, per configuration (runs that reached it)", path)
