"""Fixtures shared by the lv1_network tests."""
import importlib.util

import pytest

from tests.lv1_network.exported_models import EXPORTERS


@pytest.fixture(scope="session")
def exported_files(tmp_path_factory):
    """name → (path, inputs, expected) of :data:`EXPORTERS`, each file exported once per
    session however many test modules read it (a dynamo export costs seconds of CPU);
    skips the test where the exporter's packages are missing."""
    folder = tmp_path_factory.mktemp("exported_models")
    cache = {}

    def get(name):
        missing = [p for p in EXPORTERS[name][1] if importlib.util.find_spec(p) is None]
        if missing:
            pytest.skip(f"{name} needs {missing}")
        if name not in cache:
            cache[name] = EXPORTERS[name][0](folder)
        return cache[name]
    return get
