"""Sections cut to a readable length: a table of more than :data:`MAX_ROWS` rows
shows its first rows and is written whole to ``tables/<title>.csv`` beside the report,
and a section with more than :data:`MAX_WARNINGS` measurement warnings lists its
first ones and writes them all to ``tables/<title>-warnings.txt``; the report says
what it left out and where it is."""
from __future__ import annotations

import csv
import os
import re

from deep500.report.tables import Table
from deep500.results.safe_write import atomic_file, prepare_folder, write_atomically

MAX_ROWS = 200
MAX_WARNINGS = 40
FOLDER = "tables"


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "table"


def _folder(output_dir: str) -> str:
    return prepare_folder(os.path.join(output_dir, FOLDER), "the report's long tables")


def _write_csv(path: str, table: Table) -> None:
    with atomic_file(path, "w") as handle:
        writer = csv.writer(handle)
        writer.writerow(table.columns)
        writer.writerows(table.rows)


def fit_table(table: Table, output_dir: str) -> Table:
    """``table`` itself when it has at most MAX_ROWS rows; else its first MAX_ROWS rows,
    the rest written with them to a CSV file the table's note names."""
    if len(table.rows) <= MAX_ROWS:
        return table
    name = os.path.join(FOLDER, f"{_slug(table.title)}.csv")
    _write_csv(os.path.join(_folder(output_dir), os.path.basename(name)), table)
    note = (f"{table.note} " if table.note else "") + (
        f"Rows 1 to {MAX_ROWS} of {len(table.rows)} shown, in the order measured; "
        f"all {len(table.rows)} rows are in {name}.")
    return Table(table.title, table.columns, table.rows[:MAX_ROWS], note)


def fit_warnings(warnings: list[str], title: str, output_dir: str) -> list[str]:
    """``warnings`` when there are at most MAX_WARNINGS; else the first ones and a last
    line naming the file that has them all."""
    if len(warnings) <= MAX_WARNINGS:
        return warnings
    name = os.path.join(FOLDER, f"{_slug(title)}-warnings.txt")
    write_atomically(os.path.join(_folder(output_dir), os.path.basename(name)),
                     "\n".join(warnings) + "\n")
    return warnings[:MAX_WARNINGS] + [
        f"... and {len(warnings) - MAX_WARNINGS} more ({len(warnings)} in all, in {name})"]


def fit_sections(sections: list[dict], output_dir: str) -> list[dict]:
    """The sections (as ``build`` returns them) with their tables and warnings cut to
    length (see the module docstring)."""
    fitted = []
    for number, section in enumerate(sections):
        tables = [fit_table(t, output_dir) for t in section["tables"]]
        title = section["tables"][0].title if section["tables"] else f"section-{number}"
        fitted.append({**section, "tables": tables,
                       "warnings": fit_warnings(section["warnings"], title, output_dir)})
    return fitted
