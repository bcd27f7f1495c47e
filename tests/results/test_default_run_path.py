"""A run without ``--out`` gets ``results/<recipe>-<date>-<time>``, created for it, never
a folder an earlier run in the same second took."""
import datetime
import os
import types

import deep500.results.run_folder as run_folder
from deep500.results.run_folder import default_run_path


def _clock_at(monkeypatch, moment: datetime.datetime) -> None:
    fixed = type("FixedDatetime", (datetime.datetime,), {"now": staticmethod(lambda: moment)})
    monkeypatch.setattr(run_folder, "datetime", types.SimpleNamespace(datetime=fixed))


def test_the_default_folder_names_the_recipe_and_the_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _clock_at(monkeypatch, datetime.datetime(2026, 11, 3, 14, 5, 9))
    assert default_run_path("quickstart") == os.path.join("results",
                                                          "quickstart-20261103-140509")


def test_names_taken_in_the_same_second_get_the_next_number(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _clock_at(monkeypatch, datetime.datetime(2026, 11, 3, 14, 5, 9))
    base = os.path.join("results", "quick-20261103-140509")
    os.makedirs(base)
    assert default_run_path("quick") == f"{base}-2"
    assert os.path.isdir(f"{base}-2")  # claimed by mkdir: the next run cannot take it
    assert default_run_path("quick") == f"{base}-3"
