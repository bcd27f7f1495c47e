"""The figure of the report's "Scaling: measured and predicted" section
(:mod:`deep500.report.scaling`): speedup, efficiency and time per epoch against the
ranks (log2 axis), each curve measured (markers, solid) and predicted (dashed, the
same colour), with the ideal speedup line; oversubscribed points hollow and marked
⚠ (the Deep500 paper's Fig. 12; PyDTNN's Fig. 3)."""
from __future__ import annotations

import os

from deep500.report.plots import _pyplot, legend_name, save


def _series(curve, value):
    xs, ys, hollow = [], [], []
    for point in curve.points:
        y = value(point)
        if y is not None:
            xs.append(point.ranks)
            ys.append(y)
            hollow.append(bool(point.over))
    return xs, ys, hollow


def plot(curves, output_dir: str, machine: str | None,
         also: str | None) -> tuple[str, str]:
    """``(caption, path)`` of the figure of ``curves`` (``scaling.Curve``)."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    panels = (("speedup T(1) / T(p)", lambda c, p, pr: c.speedup(p, pr)),
              ("efficiency S(p) / p", lambda c, p, pr: c.efficiency(p, pr)),
              ("time per epoch (s)", lambda c, p, pr: p.predicted_epoch if pr else p.epoch))
    top = max(p.ranks for c in curves for p in c.points)
    for number, curve in enumerate(curves):
        colour = f"C{number % 10}"
        for axis, (label, value) in zip(axes, panels):
            xs, ys, hollow = _series(curve, lambda p: value(curve, p, False))
            if xs:
                axis.plot(xs, ys, "-", color=colour, linewidth=1.2,
                          label=legend_name(f"{curve.name}, measured"))
                axis.scatter(xs, ys, s=36, zorder=3, edgecolors=colour,
                             facecolors=["none" if h else colour for h in hollow])
                for x, y, h in zip(xs, ys, hollow):
                    if h:
                        axis.annotate("⚠", (x, y), textcoords="offset points",
                                      xytext=(4, 4), fontsize=8, color=colour)
            xs, ys, _ = _series(curve, lambda p: value(curve, p, True)
                                if p.predicted_epoch else None)
            if xs:
                axis.plot(xs, ys, "--", color=colour, linewidth=1.2, marker="x",
                          label=legend_name(f"{curve.name}, predicted"))
    axes[0].plot([1, top], [1, top], "k:", linewidth=0.9, label="ideal")
    axes[1].axhline(1.0, color="k", linestyle=":", linewidth=0.9)
    ranks = sorted({p.ranks for c in curves for p in c.points})
    for axis, (label, _) in zip(axes, panels):
        axis.set_xscale("log", base=2)
        axis.set_xticks(ranks, [str(r) for r in ranks])
        axis.minorticks_off()
        axis.set_xlabel("ranks (one per node)")
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
    axes[2].set_yscale("log")
    axes[1].set_ylim(bottom=0)
    axes[0].set_ylim(bottom=0)
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, fontsize=7, loc="lower center", ncol=3)
    figure.suptitle("Scaling: measured (solid; hollow ⚠ = oversubscribed) and predicted "
                    + (f"on machine '{machine}' " if machine else "") + "(dashed)",
                    fontsize=11)
    rows = -(-len(labels) // 3)
    figure.tight_layout(rect=(0, 0.05 * rows + 0.02, 1, 1))
    path = os.path.join(output_dir, "plots", "scaling.png")
    return ("Speedup, efficiency and time per epoch against the ranks: measured and "
            "predicted", save(figure, path, also, bbox_inches="tight"))
