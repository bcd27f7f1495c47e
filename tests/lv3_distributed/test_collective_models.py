"""The α-β-γ collective models against hand computation (Thakur et al. 2005's closed
forms with one α, β and γ for every size)."""
import math

import pytest

import deep500 as d5
from deep500.lv3_distributed import allreduce_names
from deep500.lv3_distributed import collective_models as cm
from deep500.utils.errors import Deep500Error
from deep500.utils.machine import load_machine

A, B, G = 2e-6, 1e-9, 3e-10


def _machine(segments=None):
    network = ({"segments": segments} if segments else
               {"alpha_s": A, "beta_s_per_byte": B})
    return load_machine({"name": "hand", "network": network,
                         "reduction": {"gamma_cache_s_per_byte": G,
                                       "gamma_memory_s_per_byte": G},
                         "memory": {"bandwidth_bytes_per_s": 1e10}})


M = _machine()
N = 1 << 20


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8])
def test_allreduce_closed_forms(p):
    lg = math.ceil(math.log2(p))
    q = 1 << (p.bit_length() - 1)
    lgq = int(math.log2(q))
    fold = 0.0 if p == q else (A + N * B + N * G) + (A + N * B)
    expected = {
        "linear": 2 * (p - 1) * A + 2 * (p - 1) * N * B + (p - 1) * N * G,
        "binomial": 2 * lg * A + 2 * lg * N * B + lg * N * G,
        "recursive_doubling": lgq * (A + N * B + N * G) + fold,
        "rabenseifner": 2 * lgq * A + 2 * (q - 1) / q * N * B + (q - 1) / q * N * G + fold,
        "ring": 2 * (p - 1) * A + 2 * (p - 1) / p * N * B + (p - 1) / p * N * G,
    }
    for algorithm, value in expected.items():
        assert cm.predict_allreduce(algorithm, N, p, M) == pytest.approx(value, rel=1e-12), algorithm


def test_segmented_ring_adds_latency_per_segment():
    p, s = 4, 64 * 1024
    k = math.ceil(N / p / s)  # 4 segments per chunk
    expected = 2 * (p - 1) * k * A + 2 * (p - 1) / p * N * B + (p - 1) / p * N * G
    assert cm.predict_allreduce("segmented_ring", N, p, M, segment_bytes=s) == pytest.approx(expected, rel=1e-12)
    # one segment per chunk is the plain ring
    assert cm.predict_allreduce("segmented_ring", N, p, M, segment_bytes=N) == pytest.approx(
        cm.predict_allreduce("ring", N, p, M), rel=1e-12)


def test_mpi_switches_at_mpich_threshold():
    small, large = 1024, 4096
    assert cm.predict_allreduce("mpi", small, 4, M) == cm.predict_allreduce("recursive_doubling", small, 4, M)
    assert cm.predict_allreduce("mpi", large, 4, M) == cm.predict_allreduce("rabenseifner", large, 4, M)


def test_one_rank_and_zero_bytes_cost_nothing():
    for algorithm in allreduce_names():
        assert cm.predict_allreduce(algorithm, N, 1, M) == 0.0
        assert cm.predict_allreduce(algorithm, 0, 4, M) == 0.0


def test_other_collectives_and_exchanges():
    p = 4
    assert cm.predict_broadcast("binomial", N, p, M) == pytest.approx(2 * (A + N * B))
    assert cm.predict_broadcast("linear", N, p, M) == pytest.approx(3 * (A + N * B))
    assert cm.predict_broadcast("scatter_allgather", N, p, M) == pytest.approx(
        (2 + 3) * A + 2 * 3 / 4 * N * B)
    assert cm.predict_reduce_scatter("ring", N, p, M) == pytest.approx(3 * A + 0.75 * N * (B + G))
    assert cm.predict_reduce_scatter("recursive_halving", N, p, M) == pytest.approx(2 * A + 0.75 * N * (B + G))
    assert cm.predict_allgather("ring", N, p, M) == pytest.approx(3 * A + 0.75 * N * B)
    assert cm.predict_allgather("recursive_doubling", N, p, M) == pytest.approx(2 * A + 0.75 * N * B)
    assert cm.predict_ring_exchange(N, p, M) == pytest.approx(2 * (A + N * B))
    assert cm.predict_torus_exchange(N, p, M) == pytest.approx(4 * (A + N * B))


def test_piecewise_alpha_by_message_beta_by_buffer_size():
    m = _machine([{"min_bytes": 0, "max_bytes": 4096, "alpha_s": 1e-6, "beta_s_per_byte": 1e-9},
                  {"min_bytes": 4096, "max_bytes": None, "alpha_s": 5e-6, "beta_s_per_byte": 2e-10}])
    # ring at p = 2 on 4096 bytes sends 2048-byte chunks: α of the first segment, β of
    # the segment of the 4096-byte buffer they are cut from
    assert cm.predict_allreduce("ring", 4096, 2, m) == pytest.approx(2 * (1e-6 + 2048 * 2e-10) + 2048 * G)
    assert cm.predict_allreduce("ring", 2048, 2, m) == pytest.approx(2 * (1e-6 + 1024e-9) + 1024 * G)
    # recursive doubling sends all 4096 bytes: second segment
    assert cm.predict_allreduce("recursive_doubling", 4096, 2, m) == pytest.approx(5e-6 + 4096 * (2e-10 + G))


def test_machine_path_and_exported_name(tmp_path):
    from deep500.utils.machine import save_machine
    path = save_machine(M, str(tmp_path / "m.yaml"))
    assert d5.predict_allreduce("ring", N, 2, path) == pytest.approx(cm.predict_allreduce("ring", N, 2, M))


def test_unknown_algorithm_lists_the_known_ones():
    with pytest.raises(Deep500Error, match="predict_allreduce: unknown allreduce algorithm "
                       "'tree'; choose one of ring, linear, binomial, recursive_doubling, "
                       "rabenseifner, segmented_ring, mpi"):
        cm.predict_allreduce("tree", N, 2, M)
    with pytest.raises(Deep500Error, match="known: binomial"):
        cm.predict_broadcast("tree", N, 2, M)
    with pytest.raises(Deep500Error, match="ranks"):
        cm.predict_allreduce("ring", N, 0, M)


def test_exchange_fit_prices_sendrecv_steps_only():
    data = {"name": "x", "network": {"alpha_s": A, "beta_s_per_byte": B,
                                     "exchange_segments": [{"min_bytes": 0, "max_bytes": None,
                                                            "alpha_s": 3e-6, "beta_s_per_byte": 4e-9}]},
            "reduction": {"gamma_cache_s_per_byte": G, "gamma_memory_s_per_byte": G},
            "memory": {"bandwidth_bytes_per_s": 1e10}}
    m = load_machine(data)
    p, c = 4, N / 4
    assert cm.predict_allreduce("ring", N, p, m) == pytest.approx(
        2 * (p - 1) * (3e-6 + c * 4e-9) + (p - 1) * c * G)
    assert cm.predict_allreduce("recursive_doubling", N, p, m) == pytest.approx(
        2 * (3e-6 + N * 4e-9 + N * G))
    # one direction at a time: the ping-pong fit
    assert cm.predict_allreduce("binomial", N, p, m) == cm.predict_allreduce("binomial", N, p, M)
    assert cm.predict_ring_exchange(N, p, m) == pytest.approx(2 * (3e-6 + N * 4e-9))
