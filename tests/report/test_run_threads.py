"""The report's run table states the threads as the manifest records them: asked for
(fixed, varied or not given), resolved per configuration, and in force."""
import pytest

from deep500.report.render import _threads_text


@pytest.mark.parametrize("threads, expected", [
    ({"requested": 2, "resolved": [2], "in_force_at_start": {}},
     "requested 2; per configuration 2; at start {}"),
    ({"requested": None, "varied": [1, 2], "resolved": [1, 2], "in_force_at_start": {}},
     "varied [1, 2]; per configuration 1, 2; at start {}"),
    ({"requested": None, "resolved": [8], "in_force_at_start": {}},
     "not given (usable CPUs shared by the ranks); per configuration 8; at start {}"),
    # a manifest written before thread counts were resolved per configuration
    ({"requested": None, "in_force_at_start": {"blas": 4}},
     "requested framework defaults; at start {'blas': 4}"),
])
def test_the_run_table_states_the_threads(threads, expected):
    assert _threads_text(threads) == expected


def test_settings_of_a_framework_loaded_later_are_shown():
    text = _threads_text({"requested": 1, "resolved": [1], "in_force_at_start": {},
                          "in_force_after_loading": {"torch_intra_op": 1}})
    assert text.endswith("; once loaded {'torch_intra_op': 1}")
