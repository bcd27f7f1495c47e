"""Telemetry tests start with no probes registered: a scheme created by an earlier test
in this process registers its 'communication' probe and keeps it until it is closed or
the next scheme replaces it, which these tests would see."""
import pytest

from deep500.utils import telemetry


@pytest.fixture(autouse=True)
def no_probes_from_earlier_tests(monkeypatch):
    monkeypatch.setattr(telemetry, "_PROBES", {})
