"""A table as data, rendered to Markdown or HTML by the report writers."""
from __future__ import annotations

import html
from dataclasses import dataclass, field


WIDE_COLUMNS = 12  # a table of this many columns gets a smaller font to fit the page


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list] = field(default_factory=list)
    note: str = ""

    def markdown(self) -> str:
        lines = [f"### {self.title}", ""]
        if self.note:
            lines += [self.note, ""]
        lines.append("| " + " | ".join(self.columns) + " |")
        lines.append("|" + "|".join("---" for _ in self.columns) + "|")
        for row in self.rows:
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
        return "\n".join(lines) + "\n"

    def html(self) -> str:
        # a header may break after a slash ("Batch/rank", "Pred./meas."), not mid-word
        head = "".join("<th>" + html.escape(c).replace("/", "/<wbr>") + "</th>"
                       for c in self.columns)
        body = "".join("<tr>" + "".join(_cell_html(c) for c in row) + "</tr>"
                       for row in self.rows)
        note = f"<p>{html.escape(self.note)}</p>" if self.note else ""
        # A key-value table (every column name empty) has no header row to show.
        thead = (f"<thead><tr>{head}</tr></thead>" if any(c.strip() for c in self.columns)
                 else "")
        wide = (" class='wide'" if len(self.columns) >= WIDE_COLUMNS
                else "" if thead else " class='keys'")
        return (f"<h3>{html.escape(self.title)}</h3>{note}<table{wide}>{thead}"
                f"<tbody>{body}</tbody></table>")


@dataclass(frozen=True)
class Links:
    """A cell of links: ``(text, href)`` pairs, ``href`` relative to the report's folder
    (e.g. a configuration's timeline files)."""
    items: tuple

    def __str__(self) -> str:  # Markdown
        return " ".join(f"[{text}]({href})" for text, href in self.items)

    def html(self) -> str:
        return " ".join(f"<a href='{html.escape(href)}'>{html.escape(text)}</a>"
                        for text, href in self.items)


def _cell_html(value) -> str:
    """A cell; flags (⚠ ...) and failed acceptance stand out."""
    if isinstance(value, Links):
        return f"<td>{value.html()}</td>"
    text = str(value)
    style = "warn" if "⚠" in text else "fail" if text.startswith("FAIL") else ""
    return (f"<td class='{style}'>" if style else "<td>") + html.escape(text) + "</td>"


def fmt_time(seconds) -> str:
    """Seconds in the unit that keeps 3-4 significant digits readable."""
    if seconds is None:
        return "n/a"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def fmt_number(value, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, str):
        return value
    return f"{value:.{digits}g}"
