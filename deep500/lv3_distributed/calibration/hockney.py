"""Hockney's t(n) = α + β·n fitted to the ping-pong (and exchange) medians, piecewise
(R. W. Hockney, "The communication challenge for MPP: Intel Paragon and Meiko CS-2",
Parallel Computing 20(3), 1994), and the machine file's ``network`` section.

The line is fitted by least squares on relative error (non-negative α, β). One line is
kept while its largest relative residual is at most ``SPLIT_TOLERANCE``; otherwise the
sizes are split in two where the total squared relative error of the two lines is least
(each side at least ``MIN_SEGMENT_POINTS`` sizes), recursively, up to ``MAX_SEGMENTS``
segments. A segment starts at its smallest measured size. This finds MPICH's switch
from the eager to the rendezvous protocol, and shared memory's switch between copy
paths. CIs of α and β: 2.5 and 97.5 percentiles of a bootstrap over the segment's sizes.

On a link-bound network (``link_bound``: an emulated cluster's token-bucket links) no
segment's β may be below the ping-pong's last segment's, the rate of the largest
messages: a token bucket lets a message that follows an idle gap through faster than
the line rate (its refill during a ping-pong's turnaround), which a NIC never does and
which calls that follow each other closely (an allreduce's steps) do not get. Such a
segment keeps that β and refits its α alone. The exchange's segments get the same floor
(each direction of a ``Sendrecv`` has a link of its own, at the same rate), not one of
their own: two streams at once on two cores make their large-message fit the less
certain one.
"""
from __future__ import annotations

import numpy as np

from deep500.utils.errors import Deep500Error
from deep500.utils.statistics import median_ci

SPLIT_TOLERANCE = 0.10
MIN_SEGMENT_POINTS = 3
MAX_SEGMENTS = 5
BOOTSTRAP_RESAMPLES = 200


def _fit_line(sizes, times):
    """Non-negative (α, β) minimising Σ((α + β n - t) / t)²; returns (α, β, residuals)."""
    from scipy.optimize import nnls
    sizes = np.asarray(sizes, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64)
    scale = 1.0 / times
    design = np.stack([scale, sizes * scale], axis=1)
    # β is tiny next to α: solve in scaled units so nnls is well conditioned
    column = np.array([1.0, 1.0 / max(sizes.max(), 1.0)])
    solution, _ = nnls(design / column, np.ones_like(times))
    alpha, beta = solution / column
    residuals = (alpha + beta * sizes - times) / times
    return float(alpha), float(beta), residuals


def _fit_alpha(sizes, times, beta):
    """Non-negative α minimising Σ((α + β n - t) / t)² for a given β; returns (α,
    residuals)."""
    sizes = np.asarray(sizes, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64)
    weights = 1.0 / times ** 2
    alpha = max(0.0, float(np.sum((times - beta * sizes) * weights) / np.sum(weights)))
    return alpha, (alpha + beta * sizes - times) / times


def _split(sizes, times, segments_left):
    alpha, beta, residuals = _fit_line(sizes, times)
    if (segments_left <= 1 or np.max(np.abs(residuals)) <= SPLIT_TOLERANCE
            or len(sizes) < 2 * MIN_SEGMENT_POINTS):
        return [(0, len(sizes))]
    best, best_k = None, None
    for k in range(MIN_SEGMENT_POINTS, len(sizes) - MIN_SEGMENT_POINTS + 1):
        error = (np.sum(_fit_line(sizes[:k], times[:k])[2] ** 2)
                 + np.sum(_fit_line(sizes[k:], times[k:])[2] ** 2))
        if best is None or error < best:
            best, best_k = error, k
    if best >= np.sum(residuals ** 2):
        return [(0, len(sizes))]
    # the remaining segment budget goes to the worse-fitting side first
    left = _split(sizes[:best_k], times[:best_k], segments_left - 1)
    right = _split(sizes[best_k:], times[best_k:], segments_left - len(left))
    return left + [(a + best_k, b + best_k) for a, b in right]


def fit_hockney(sizes, medians, seed: int = 0, link_bound: bool = False,
                beta_floor: float | None = None) -> list[dict]:
    """Piecewise Hockney fit (rule in the module docstring): one dict per segment with
    min_bytes, max_bytes (None for the last), alpha_s, beta_s_per_byte, their bootstrap
    CIs, the largest relative residual and the sizes it was fitted on. ``link_bound``:
    no β below ``beta_floor``, by default the last segment's (module docstring; such a
    segment says ``beta_floored``)."""
    order = np.argsort(sizes)
    sizes = np.asarray(sizes, dtype=np.float64)[order]
    medians = np.asarray(medians, dtype=np.float64)[order]
    if len(sizes) < 2:
        raise Deep500Error("the Hockney fit needs ping-pong times at two or more message "
                           "sizes")
    rng = np.random.default_rng(seed)
    segments = []
    bounds = _split(sizes, medians, MAX_SEGMENTS)
    for i, (a, b) in enumerate(bounds):
        s, t = sizes[a:b], medians[a:b]
        alpha, beta, residuals = _fit_line(s, t)
        boot = []
        for _ in range(BOOTSTRAP_RESAMPLES):
            pick = rng.integers(0, len(s), len(s))
            if len(np.unique(s[pick])) < 2:
                continue
            boot.append(_fit_line(s[pick], t[pick])[:2])
        boot = np.asarray(boot) if boot else np.full((1, 2), np.nan)
        segments.append({
            "min_bytes": 0 if i == 0 else int(s[0]),
            "max_bytes": None if i == len(bounds) - 1 else int(sizes[b]),
            "alpha_s": alpha, "beta_s_per_byte": beta,
            "ci_alpha": [float(np.percentile(boot[:, 0], 2.5)), float(np.percentile(boot[:, 0], 97.5))],
            "ci_beta": [float(np.percentile(boot[:, 1], 2.5)), float(np.percentile(boot[:, 1], 97.5))],
            "max_relative_residual": float(np.max(np.abs(residuals))),
            "fitted_sizes": [int(x) for x in s],
        })
    if link_bound:
        _floor_betas(segments, sizes, medians,
                     segments[-1]["beta_s_per_byte"] if beta_floor is None else beta_floor)
    return segments


def _floor_betas(segments, sizes, medians, floor: float) -> None:
    """Raise every β below ``floor`` to it, refitting that segment's α."""
    for segment in segments:
        if segment["beta_s_per_byte"] >= floor:
            continue
        fitted = np.isin(sizes, segment["fitted_sizes"])
        alpha, residuals = _fit_alpha(sizes[fitted], medians[fitted], floor)
        segment.update(alpha_s=alpha, beta_s_per_byte=floor,
                       fitted_beta_s_per_byte=segment["beta_s_per_byte"],
                       beta_floored=True,
                       max_relative_residual=float(np.max(np.abs(residuals))))


def _measurements(samples):
    return [{"nbytes": int(n), "median_s": float(np.median(samples[n])),
             "ci_s": list(median_ci(samples[n])[:2]), "n": len(samples[n])}
            for n in sorted(samples)]


def network_section(pingpong_samples: dict, exchange_samples: dict | None = None,
                    link_bound: bool = False) -> dict:
    """The machine file's ``network``: Hockney segments fitted to the ping-pong medians
    and, if measured, ``exchange_segments`` fitted to the ``Sendrecv`` medians
    (``link_bound`` as for ``fit_hockney``)."""
    sizes = sorted(pingpong_samples)
    segments = fit_hockney(sizes, [float(np.median(pingpong_samples[n])) for n in sizes],
                           link_bound=link_bound)
    section = {
        "method": "MPI ping-pong between ranks 0 and 1, one-way = round trip / 2; "
                  "exchange: both ranks Sendrecv at once"
                  + ("; link-bound: no beta below the largest messages'" if link_bound
                     else ""),
        "alpha_s": {"value": segments[0]["alpha_s"], "ci": segments[0]["ci_alpha"]},
        "segments": segments,
        "measurements": _measurements(pingpong_samples),
    }
    if exchange_samples:
        sizes = sorted(exchange_samples)
        section["exchange_segments"] = fit_hockney(
            sizes, [float(np.median(exchange_samples[n])) for n in sizes],
            link_bound=link_bound, beta_floor=segments[-1]["beta_s_per_byte"])
        section["exchange_measurements"] = _measurements(exchange_samples)
    return section
