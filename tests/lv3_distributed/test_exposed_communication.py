"""Exposed communication over the ranks: the slowest rank's step beyond the slowest
rank's compute, so that a rank's wait for a slower one is not counted."""
import pytest

from deep500.lv3_distributed.exposed_communication import exposed_over_ranks


def test_a_ranks_wait_for_a_slower_rank_is_not_communication():
    fast = {"step_seconds_median": 0.100, "compute_only_seconds_median": 0.050,
            "exposed_communication": 0.050}
    slow = {"step_seconds_median": 0.101, "compute_only_seconds_median": 0.080,
            "exposed_communication": 0.021}
    # each rank's own figure would say 50 ms; the step is 21 ms beyond the slower compute
    assert exposed_over_ranks([fast, slow]) == pytest.approx(0.021, rel=1e-12)


def test_records_without_the_medians_fall_back_to_the_largest_rank_figure():
    assert exposed_over_ranks([{"exposed_communication": 0.01},
                               {"exposed_communication": 0.03}, None]) == 0.03
    assert exposed_over_ranks([None, {}]) is None
