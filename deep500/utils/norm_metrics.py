"""Accuracy metrics: how far outputs are from reference outputs.

Each reports the absolute error and the error relative to the reference's own norm,
for the worst output (and per output in ``per_output``).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from deep500.utils.errors import ShapeError
from deep500.utils.metric import MetricResult, TestMetric


def _as_list(values) -> list:
    if values is None:
        return []
    if isinstance(values, dict):
        return list(values.values())
    if isinstance(values, (list, tuple)):
        return list(values)
    return [values]


def _pairs(outputs, reference_outputs) -> list[tuple[np.ndarray, np.ndarray]]:
    outs, refs = _as_list(outputs), _as_list(reference_outputs)
    if isinstance(outputs, dict) and isinstance(reference_outputs, dict):
        missing = sorted(set(reference_outputs) - set(outputs))
        if missing:
            raise ShapeError(f"Outputs {missing} are in the reference but were not produced")
        outs = [outputs[k] for k in reference_outputs]
    if len(outs) < len(refs):
        raise ShapeError(f"{len(refs)} reference outputs but only {len(outs)} outputs")
    pairs = []
    for index, (out, ref) in enumerate(zip(outs, refs)):
        if ref is None:
            continue
        out, ref = np.asarray(out), np.asarray(ref)
        if out.shape != ref.shape:
            raise ShapeError(f"Output {index} has shape {out.shape} but its reference "
                             f"has shape {ref.shape}")
        pairs.append((out.astype(np.float64), ref.astype(np.float64)))
    return pairs


class _NormError(TestMetric):
    """Shared logic: subclasses define ``_norm``."""
    needs_reference = True
    fields = ("absolute", "relative", "per_output")  # the summary's keys

    @staticmethod
    def _norm(values: np.ndarray) -> float:
        raise NotImplementedError

    def measure(self, inputs, outputs, reference_outputs) -> MetricResult:
        per_output = []
        for out, ref in _pairs(outputs, reference_outputs):
            absolute = self._norm(out - ref)
            scale = self._norm(ref)
            relative = absolute / scale if scale > 0 else (0.0 if absolute == 0 else np.inf)
            per_output.append({"absolute": float(absolute), "relative": float(relative)})
        summary = {
            "absolute": max((p["absolute"] for p in per_output), default=0.0),
            "relative": max((p["relative"] for p in per_output), default=0.0),
            "per_output": per_output,
        }
        return MetricResult(self.name, summary, primary="relative")


class L1Error(_NormError):
    """Sum of absolute differences, ‖y − y_ref‖₁ (relative: divided by ‖y_ref‖₁)."""

    @staticmethod
    def _norm(values):
        return float(np.abs(values).sum())


class L2Error(_NormError):
    """Euclidean distance, ‖y − y_ref‖₂ (relative: divided by ‖y_ref‖₂)."""

    @staticmethod
    def _norm(values):
        return float(np.sqrt(np.square(values).sum()))


class MaxError(_NormError):
    """Largest elementwise difference, ‖y − y_ref‖∞ (relative: divided by ‖y_ref‖∞)."""

    @staticmethod
    def _norm(values):
        return float(np.abs(values).max()) if values.size else 0.0


def norm_errors(outputs: Sequence, reference_outputs: Sequence) -> dict:
    """All three norms at once, as ``{metric name: summary}`` (a convenience for tests)."""
    return {cls.__name__: cls().measure(None, outputs, reference_outputs).summary
            for cls in (L1Error, L2Error, MaxError)}
