"""``--sweep`` values outside the plausible range of their unit (those that would make
the what-if predictions overflow, as a machine file may not hold them either) are
refused with the axis and the range."""
import pytest

from deep500.recipe.sweep_axes import parse_sweep
from deep500.utils.errors import Deep500Error


@pytest.mark.parametrize("text, words", [
    ("gamma=1e300", "'1e300' is outside the plausible range [0, 1] s/byte"),
    ("link_bandwidth=1e-300", "[8, 8e+21] bit/s"),
    ("link_bandwidth=1..1e9", "'1' is outside"),
    ("compute_speed=1e-300..2", "[1e-06, 1e+06] x"),
    ("compute_speed=1e7", "'1e7' is outside"),
])
def test_values_outside_their_units_range_are_refused(text, words):
    with pytest.raises(Deep500Error, match=r"--sweep " + text.split("=")[0]) as error:
        parse_sweep(text)
    assert words in str(error.value)


def test_values_inside_the_ranges_parse():
    assert parse_sweep("gamma=1e-11..1").values[-1] == 1.0
    assert parse_sweep("link_bandwidth=8,5gbit").values == (8.0, 5e9)
    assert parse_sweep("compute_speed=1e-6..1e6:3").values == (1e-6, 1.0, 1e6)
