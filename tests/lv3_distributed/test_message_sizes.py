"""Message-size histograms (Catalán's thesis, Fig. 5.13): the bins, the closed forms of
the modelled collectives' messages, the volume's bookkeeping.

Under ``mpirun`` (no launch of their own, in the runs those tests make anyway):
``test_schemes.py`` checks that real 2- and 3-rank training runs of every scheme hold
exactly their bytes and messages sent, data-parallel SGD in the bins of the ring's
chunks; ``test_allreduce_algorithms.py`` the same for every allreduce algorithm at
p = 2..5, as sent."""
import pytest

from deep500.lv3_distributed import volume as vol
from deep500.lv3_distributed.message_sizes import (MessageSizeHistogram, bin_bounds,
                                                   bin_label, size_bin)


def test_bins_are_powers_of_two():
    assert [size_bin(n) for n in (0, 1, 2, 3, 4, 4095, 4096, 8191)] == \
        [0, 1, 2, 2, 3, 12, 13, 13]
    for index in range(1, 40):
        low, high = bin_bounds(index)
        assert size_bin(low) == size_bin(high) == index
        assert size_bin(low - 1) == index - 1 and size_bin(high + 1) == index + 1
    assert bin_bounds(0) == (0, 0)
    assert [bin_label(i) for i in (0, 1, 2, 13, 21)] == \
        ["0 B", "1 B", "2 B-4 B", "4 KiB-8 KiB", "1 MiB-2 MiB"]


def test_histogram_counts_subtracts_and_round_trips():
    histogram = MessageSizeHistogram()
    histogram.add(4096, 3)
    histogram.add(5000)
    histogram.add(0, 2)
    histogram.add_unsized(100, 4)
    earlier = histogram.copy()
    histogram.add(5, 2)
    assert histogram.bins() == {0: (2, 0), 3: (2, 10), 13: (4, 3 * 4096 + 5000)}
    assert (histogram.messages, histogram.bytes) == (12, 3 * 4096 + 5000 + 10 + 100)
    assert (histogram - earlier).bins() == {3: (2, 10)}
    assert (histogram - earlier).messages == 2
    again = MessageSizeHistogram.from_dict(histogram.to_dict())
    assert again.to_dict() == histogram.to_dict()
    assert histogram.to_dict()["unsized_messages"] == 4


@pytest.mark.parametrize("size", [2, 3, 4, 5, 7])
@pytest.mark.parametrize("count", [0, 1, 6, 1001])
def test_ring_messages_are_its_traffic(size, count):
    for rank in range(size):
        traffic = vol.ring_allreduce_traffic(count, 4, size, rank)
        sizes = vol.ring_allreduce_message_sizes(count, 4, size, rank)
        assert sum(n for _, n in sizes) == traffic.messages_sent
        assert sum(b * n for b, n in sizes) == traffic.bytes_sent
        chunks = {4 * c for c in vol.ring_chunks(count, size)}
        assert {b for b, _ in sizes} <= chunks


@pytest.mark.parametrize("size", [2, 3, 5, 8])
def test_binomial_scatter_messages_are_its_traffic(size):
    for rank in range(size):
        traffic = vol.binomial_scatter_traffic(12, size, rank, 1)
        sizes = vol.binomial_scatter_message_sizes(12, size, rank, 1)
        assert sum(n for _, n in sizes) == traffic.messages_sent
        assert sum(b * n for b, n in sizes) == traffic.bytes_sent


def test_volume_records_sizes_per_entry():
    volume = vol.CommunicationVolume(0, 2)
    volume.record("send", "direct", vol.EXACT, 300, 0, 1, 0)
    before = volume.copy()
    volume.record("allreduce", "ring", vol.EXACT, 12, 12, 2, 2, [(4, 1), (8, 1)])
    volume.record("allreduce", "gloo", "modelled (ring)", 90, 90, 3, 3)  # totals only
    entries = volume.to_dict()["entries"]
    assert entries["send:direct"]["message_sizes"]["bins"] == [
        {"bin": 9, "low": 256, "high": 511, "messages": 1, "bytes": 300}]
    assert entries["allreduce:gloo"]["message_sizes"]["unsized_messages"] == 3
    merged = volume.message_sizes()
    assert (merged.messages, merged.bytes) == (6, 402)
    since = (volume - before).message_sizes()
    assert since.bins() == {3: (1, 4), 4: (1, 8)} and since.messages == 5
