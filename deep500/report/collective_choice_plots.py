"""The figure of the report's "Default versus best collective" section
(:mod:`deep500.report.collective_choice`): on the left, the allreduce's time against
the message size per choice (log-log; the defaults dashed, each point the median of
the slowest rank's call); on the right, the best choice's speedup over the default
against the size, for MPICH's choices and Deep500's algorithms, with the training
step's speedup as a horizontal line (Catalán's thesis, Figs. 5.11–5.15)."""
from __future__ import annotations

import os

from deep500.report.plots import _pyplot, legend_name, save


def plot(times, output_dir: str, index: int, title: str,
         also: str | None) -> tuple[str, str]:
    """``(caption, path)`` of the figure of one group of choices (``ChoiceTimes``)."""
    plt = _pyplot()
    defaults = (times.mpich_default, times.deep500_default)
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for number, name in enumerate(times.choices):
        sizes = [n for n in times.sizes if times.median(name, n) is not None]
        default = name in defaults
        left.plot(sizes, [times.median(name, n) for n in sizes],
                  linestyle="--" if default else "-", linewidth=2 if default else 1.1,
                  marker="o" if name.startswith("MPICH") else "s", markersize=3.5,
                  color=f"C{number % 10}", label=legend_name(name))
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("message size (bytes)")
    left.set_ylabel("allreduce time (s), slowest rank, median")
    left.set_title(f"Allreduce time on {times.ranks} ranks", fontsize=10)
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7)
    for prefix, default, marker in (("MPICH", times.mpich_default, "o"),
                                    ("Deep500", times.deep500_default, "s")):
        if default not in times.records:
            continue
        points = [(n, times.median(default, n) / times.median(times.best(n, prefix), n))
                  for n in times.sizes if times.median(default, n)
                  and times.best(n, prefix)]
        if not points:
            continue
        (line,) = right.plot([p[0] for p in points], [p[1] for p in points],
                             marker=marker, label=f"best {prefix} choice / {default}")
        steps = [times.step(c) for c in times.choices if c.startswith(prefix)]
        steps = [s for s in steps if s]
        if steps and times.step(default):
            right.axhline(times.step(default) / min(steps), color=line.get_color(),
                          linestyle=":", linewidth=1.2,
                          label=f"training step: best {prefix} / {default}")
    right.axhline(1.0, color="k", linewidth=0.8)
    if times.gradient_bytes:
        right.axvline(times.gradient_bytes, color="grey", linestyle="--", linewidth=0.8,
                      label="the step's allreduce size")
    right.set_xscale("log", base=2)
    right.set_xlabel("message size (bytes)")
    right.set_ylabel("speedup of the best over the default")
    right.set_title("Best versus default", fontsize=10)
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=7)
    figure.suptitle("Default versus best collective" + title, fontsize=11)
    figure.tight_layout()
    path = os.path.join(output_dir, "plots",
                        f"collective_choice{'' if index == 0 else f'_{index}'}.png")
    return ("Allreduce time against message size per algorithm (log-log; defaults "
            "dashed) and the best choice's speedup over the default per size, with the "
            "training step's (dotted)", save(figure, path, also))
