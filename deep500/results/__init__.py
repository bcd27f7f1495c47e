"""Run folders and what they hold: ``results.jsonl`` (one record per measurement),
``manifest.json`` (how the run was made and how it ended) and the folder's lock.

Read by ``report``, ``store`` and ``recipe`` alike, and written by the runner; it sits
below all three (DESIGN.md, "Where the pieces live") and imports only ``utils``.
"""
