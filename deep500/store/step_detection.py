"""Steps in a history: where a configuration's metric changed level, and by how much.

The series is modelled, as airspeed velocity does (``asv/step_detect.py``), as a
piecewise-constant function plus noise, and fitted by minimizing a weighted L1 cost
(Laplace noise: robust to the odd outlier) with a penalty per step, the Potts problem

    argmin_{k, {j}, {μ}}  γ·k + Σ_r Σ_{i in segment r} w_i |y_i − μ_r|

(Friedrich et al., "Complexity Penalized M-Estimation: Fast Computation", J. Comput.
Graph. Statist. 17(1), 2008). Each segment's level μ_r is its weighted median. The
number of segments is chosen, as asv does, by a Schwarz-type information criterion
(Yao, "Estimating the number of change-points via Schwarz criterion", Statist. Probab.
Lett. 6, 1988):

    k* = argmin_k  β·k + ln(σ₀ + cost_k),   β = 4 ln(m) / m,

where cost_k is the least L1 cost with k segments (exact here: dynamic programming
over every partition, O(k·m²) segment costs, where asv solves the penalized problem
approximately along γ), m the number of points and σ₀ asv's noise floor (a tenth of
the smallest level difference when there are more than two segments, else a
thousandth of the smallest level), which keeps a perfect fit from winning by ln 0.
asv's AR(1) correction of correlated noise is left out.

Weights: w_i = 1 / (width of point i's confidence interval), normalized by their
median; a point without an interval gets the median weight (asv's rule).

A step no larger than the points' own noise is then merged away (asv filters its
regressions by the segments' L1 error in the same spirit, ``detect_regressions``): two
neighbouring levels that differ by no more than the median half-width of the
confidence intervals of their points are one level. Few points fit perfectly with one
segment each, and only the points' intervals tell such a fit from a real step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# The most segments tried; a history with more level changes than this is noise.
MAX_SEGMENTS = 8
# The most recent points fitted: the segment costs take O(m³) time (0.4 s at 120).
MAX_POINTS = 120


@dataclass
class Step:
    """A change of level between point ``before`` (the last of the old level) and
    point ``after`` (the first of the new one), indices into the fitted series."""
    before: int
    after: int
    level_before: float
    level_after: float

    @property
    def ratio(self) -> float:
        """New level over old: above 1 is slower for a time."""
        return self.level_after / self.level_before if self.level_before else math.inf


def weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    """The value that splits the weight in half (the mean of the two middle values
    where the split falls exactly between them)."""
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    cumulative = np.cumsum(weights)
    half = cumulative[-1] / 2.0
    index = int(np.searchsorted(cumulative, half, side="left"))
    if math.isclose(cumulative[index], half) and index + 1 < len(values):
        return float((values[index] + values[index + 1]) / 2.0)
    return float(values[index])


def _segment_costs(y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """level[l, r] and cost[l, r] of the segment y[l..r] (inclusive)."""
    m = len(y)
    level = np.full((m, m), np.nan)
    cost = np.full((m, m), np.inf)
    for left in range(m):
        for right in range(left, m):
            mu = weighted_median(y[left:right + 1], w[left:right + 1])
            level[left, right] = mu
            cost[left, right] = float(np.sum(w[left:right + 1] *
                                             np.abs(y[left:right + 1] - mu)))
    return level, cost


def _best_partitions(cost: np.ndarray, segments: int) -> list[list[int]]:
    """For k = 1..segments, the right ends (exclusive) of the least-cost partition of
    the whole series into k segments (dynamic programming, Bellman's recursion)."""
    m = cost.shape[0]
    best = np.full((segments + 1, m + 1), np.inf)  # best[k, r]: y[0:r] in k segments
    cut = np.zeros((segments + 1, m + 1), dtype=int)
    best[0, 0] = 0.0
    for k in range(1, segments + 1):
        for right in range(k, m + 1):
            candidates = best[k - 1, k - 1:right] + cost[k - 1:right, right - 1]
            choice = int(np.argmin(candidates))
            best[k, right] = candidates[choice]
            cut[k, right] = choice + k - 1
    partitions = []
    for k in range(1, segments + 1):
        rights, right = [], m
        for level in range(k, 0, -1):
            rights.append(right)
            right = cut[level, right]
        partitions.append(rights[::-1])
    return partitions


def _noise_floor(levels: list[float]) -> float:
    if len(levels) > 2:
        floor = 0.1 * min(abs(b - a) for a, b in zip(levels, levels[1:]))
    else:
        floor = 0.001 * min(abs(v) for v in levels)
    return max(floor, 1e-300)


def _merge_within_noise(lefts, rights, levels, y, w, widths):
    """Merge neighbouring segments whose levels differ by no more than the median
    half-width of their points' confidence intervals (none known: never merged)."""
    lefts, rights, levels = list(lefts), list(rights), list(levels)
    merged = True
    while merged and len(levels) > 1:
        merged = False
        for i in range(len(levels) - 1):
            known = [c for c in widths[lefts[i]:rights[i + 1]] if c is not None]
            noise = float(np.median(known)) / 2.0 if known else 0.0
            if abs(levels[i + 1] - levels[i]) <= noise:
                rights[i] = rights[i + 1]
                del lefts[i + 1], rights[i + 1], levels[i + 1]
                levels[i] = weighted_median(y[lefts[i]:rights[i]], w[lefts[i]:rights[i]])
                merged = True
                break
    return lefts, rights, levels


def detect_steps(values, ci_widths=None) -> list[Step]:
    """The steps of the series ``values`` (module docstring), weighted by the inverse
    of ``ci_widths`` where given (None or a non-positive width: the median weight).
    Only the last :data:`MAX_POINTS` points are fitted; indices are into ``values``."""
    offset = max(0, len(values) - MAX_POINTS)
    y = np.asarray(values[offset:], dtype=float)
    m = len(y)
    if m < 2:
        return []
    widths = [c if c is not None and c > 0 and math.isfinite(c) else None
              for c in (ci_widths or [None] * len(values))[offset:]]
    known = [1.0 / c for c in widths if c is not None]
    median_weight = float(np.median(known)) if known else 1.0
    w = np.array([1.0 / c / median_weight if c is not None else 1.0 for c in widths])
    level, cost = _segment_costs(y, w)
    beta = 4.0 * math.log(m) / m
    best, best_objective = None, math.inf
    for rights in _best_partitions(cost, min(MAX_SEGMENTS, m)):
        lefts = [0] + rights[:-1]
        levels = [float(level[a, b - 1]) for a, b in zip(lefts, rights)]
        if any(a == b for a, b in zip(levels, levels[1:])):
            continue  # a step of zero: the same fit as one segment fewer, without it
        total = sum(cost[a, b - 1] for a, b in zip(lefts, rights))
        objective = beta * len(rights) + math.log(_noise_floor(levels) + total)
        if objective < best_objective - 1e-12:
            best, best_objective = (lefts, rights, levels), objective
    lefts, rights, levels = _merge_within_noise(*best, y, w, widths)
    return [Step(before=offset + int(rights[i] - 1), after=offset + int(lefts[i + 1]),
                 level_before=levels[i],
                 level_after=levels[i + 1]) for i in range(len(levels) - 1)]
