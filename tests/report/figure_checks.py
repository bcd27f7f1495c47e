"""What makes a report's figure hard to read, checked on the matplotlib figure as it is
saved (issue 31, item 8): text too small once the PNG is scaled into the page, a legend
over the bars, and line series that look alike."""
from __future__ import annotations

import contextlib

PAGE_PX = 1200       # the report's content width (max-width 75em at 16 px)
DPI = 110            # report PNGs (deep500.report.plots.save)
MIN_TEXT_PX = 8.5    # the smallest text a reader can read on screen


def smallest_text_px(figure) -> float:
    """The smallest visible text of ``figure`` in screen pixels, once its PNG is scaled
    down to the page's width."""
    from matplotlib.text import Text
    width_px = figure.get_size_inches()[0] * DPI
    scale = min(1.0, PAGE_PX / width_px)
    sizes = [t.get_fontsize() for t in figure.findobj(Text)
             if t.get_visible() and t.get_text().strip()
             and (t.axes is None or t.axes.get_visible())]
    return min(sizes, default=99.0) * DPI / 72 * scale


def legends_over_bars(figure) -> list[str]:
    """Legends drawn inside an axes over one of its bars."""
    from matplotlib.patches import Rectangle
    renderer = figure.canvas.get_renderer()
    found = []
    for axes in figure.axes:
        legend = axes.get_legend()
        if legend is None or not legend.get_visible():
            continue
        box = legend.get_window_extent(renderer)
        for patch in axes.patches:
            if isinstance(patch, Rectangle) and patch.get_width() and patch.get_height() \
                    and box.overlaps(patch.get_window_extent(renderer)):
                found.append(axes.get_title() or "(untitled axes)")
                break
    return found


def alike_lines(figure) -> list[str]:
    """Axes with two labelled lines of the same colour, marker and dash."""
    found = []
    for axes in figure.axes:
        seen = {}
        for line in axes.get_lines():
            label = line.get_label()
            if label.startswith("_"):
                continue
            style = (str(line.get_color()), line.get_marker(), line.get_linestyle())
            if style in seen and seen[style] != label:
                found.append(f"{axes.get_title()!r}: {seen[style]!r} and {label!r}")
            seen.setdefault(style, label)
    return found


@contextlib.contextmanager
def figure_problems(monkeypatch):
    """Collect the problems of every figure saved as PNG inside the block."""
    from matplotlib.figure import Figure
    problems: list[str] = []
    original = Figure.savefig

    def checked(figure, target, *args, **kwargs):
        if kwargs.get("format", "png") == "png":
            title = figure._suptitle.get_text() if figure._suptitle else \
                " / ".join(a.get_title() for a in figure.axes if a.get_title())
            text_px = smallest_text_px(figure)
            if text_px < MIN_TEXT_PX:
                problems.append(f"{title}: smallest text {text_px:.1f} px on the page")
            problems.extend(f"{title}: legend over the bars of {where}"
                            for where in legends_over_bars(figure))
            problems.extend(f"{title}: lines alike in {where}"
                            for where in alike_lines(figure))
        return original(figure, target, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", checked)
    yield problems
