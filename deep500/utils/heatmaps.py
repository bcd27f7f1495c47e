"""Heat maps of where outputs differ: from a reference (DiffHeatmap) or from run to run
(VarHeatmap, nondeterminism of e.g. atomics or thread scheduling). Written as PNG."""
from __future__ import annotations

import os

import numpy as np

from deep500.utils.errors import require
from deep500.utils.metric import MetricResult, TestMetric
from deep500.utils.norm_metrics import _as_list
from deep500.utils.storage_errors import storage_errors_named


def _as_matrix(values: np.ndarray) -> np.ndarray:
    """Show any tensor as a 2-D image: leading axes stacked as rows."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 0:
        return values.reshape(1, 1)
    if values.ndim == 1:
        return values.reshape(1, -1)
    return values.reshape(-1, values.shape[-1])


def write_heatmap(matrix: np.ndarray, path: str, title: str, colorbar_label: str) -> str:
    """Write ``matrix`` as a PNG heat map with a colour bar; return the path."""
    require("matplotlib", "plot", "Writing heat maps")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matrix = _as_matrix(matrix)
    figure, axes = plt.subplots(figsize=(6, 4.5))
    image = axes.imshow(matrix, aspect="auto", interpolation="nearest", cmap="viridis")
    figure.colorbar(image, ax=axes, label=colorbar_label)
    axes.set_title(title)
    axes.set_xlabel("last axis")
    axes.set_ylabel("leading axes (flattened)")
    figure.tight_layout()
    try:
        with storage_errors_named(path):
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            figure.savefig(path, dpi=100)
    finally:
        plt.close(figure)
    return path


class DiffHeatmap(TestMetric):
    """|y − y_ref| of one output, elementwise, as a PNG heat map.

    Args:
        path: the PNG file to write.
        output_index: which output to draw.
    """
    needs_reference = True
    fields = ("path", "max", "mean")  # the summary's keys

    def __init__(self, path: str, output_index: int = 0):
        self.path = path
        self.output_index = output_index

    def measure(self, inputs, outputs, reference_outputs) -> MetricResult:
        # A bare array is one output (list() would split it into rows).
        outs, refs = _as_list(outputs), _as_list(reference_outputs)
        diff = np.abs(np.asarray(outs[self.output_index], np.float64)
                      - np.asarray(refs[self.output_index], np.float64))
        write_heatmap(diff, self.path, f"|output {self.output_index} - reference|",
                      "absolute difference")
        summary = {"path": self.path, "max": float(diff.max()) if diff.size else 0.0,
                   "mean": float(diff.mean()) if diff.size else 0.0}
        return MetricResult(self.name, summary, primary="path")


class VarHeatmap(TestMetric):
    """Elementwise variance of one output across reruns, as a PNG heat map.

    A deterministic implementation gives an all-zero map.
    """
    requires_outputs = True
    fields = ("path", "runs", "max_variance", "mean_variance")  # the summary's keys

    def __init__(self, path: str, reruns: int = 5, output_index: int = 0):
        self.path = path
        self.reruns = reruns
        self.output_index = output_index
        self._runs: list[np.ndarray] = []

    def reset(self) -> None:
        self._runs = []

    def end(self, outputs=None) -> None:
        if outputs is None:
            return
        outs = list(outputs.values()) if isinstance(outputs, dict) else (
            list(outputs) if isinstance(outputs, (list, tuple)) else [outputs])
        self._runs.append(np.array(outs[self.output_index], dtype=np.float64, copy=True))

    def measure(self, inputs, outputs, reference_outputs) -> MetricResult:
        if len(self._runs) < 2:
            raise RuntimeError(f"VarHeatmap needs at least 2 recorded runs, got "
                               f"{len(self._runs)}")
        variance = np.stack(self._runs).var(axis=0)
        write_heatmap(variance, self.path,
                      f"run-to-run variance of output {self.output_index} "
                      f"({len(self._runs)} runs)", "variance")
        summary = {"path": self.path, "runs": len(self._runs),
                   "max_variance": float(variance.max()) if variance.size else 0.0,
                   "mean_variance": float(variance.mean()) if variance.size else 0.0}
        return MetricResult(self.name, summary, primary="max_variance")
