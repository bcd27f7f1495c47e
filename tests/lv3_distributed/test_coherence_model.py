"""δ_sum and δ_receive in the allreduce models (writes into lines a peer's receive read),
against hand computation, and the machine file's ``network.coherence``."""
import math

import pytest

from deep500.lv3_distributed import allreduce_names
from deep500.lv3_distributed import collective_models as cm
from deep500.lv3_distributed.calibration.coherence import (PROBE_FACTOR, PROBE_FLOOR,
                                                           same_coherence_state)
from deep500.utils.machine import MachineError, load_machine, machine_to_dict, save_machine

A, B, G = 2e-6, 1e-9, 3e-10
DS, DR = 7e-10, 4e-10  # δ_sum, δ_receive (s/byte)
N = 1 << 20


def _data(coherence=None):
    network = {"alpha_s": A, "beta_s_per_byte": B}
    if coherence is not None:
        network["coherence"] = coherence
    return {"name": "hand", "network": network,
            "reduction": {"gamma_cache_s_per_byte": G, "gamma_memory_s_per_byte": G},
            "memory": {"bandwidth_bytes_per_s": 1e10}}


FLAT = {"sum_curve": [{"buffer_bytes": 65536, "value": DS}],
        "receive_curve": [{"buffer_bytes": 65536, "value": DR}]}
M = load_machine(_data(FLAT))


@pytest.mark.parametrize("repeated", [False, True])
@pytest.mark.parametrize("p", [2, 3, 4, 5, 8])
def test_allreduce_with_delta_closed_forms(p, repeated):
    R = 1.0 if repeated else 0.0
    lg = math.ceil(math.log2(p))
    q = 1 << (p.bit_length() - 1)
    lgq = int(math.log2(q))
    fold = 0.0 if p == q else (A + N * B + N * G) + (A + N * B) + R * N * DS + N * DR
    expected = {
        # the last rank receives into the buffer the root read; the root's first sum
        "linear": 2 * (p - 1) * A + 2 * (p - 1) * N * B + (p - 1) * N * G
        + R * N * DS + N * DR,
        # every hop of the broadcast receives into a buffer its parent read
        "binomial": 2 * lg * A + 2 * lg * N * B + lg * N * G + lg * N * DR + R * N * DS,
        # every step sums into the buffer it has just sent
        "recursive_doubling": lgq * (A + N * B + N * G + N * DS) + fold,
        # the allgather receives into what the reduce-scatter sent
        "rabenseifner": 2 * lgq * A + 2 * (q - 1) / q * N * B + (q - 1) / q * N * G
        + (q - 1) / q * N * (DR + R * DS) + fold,
        "ring": 2 * (p - 1) * A + 2 * (p - 1) / p * N * B + (p - 1) / p * N * G
        + (p - 1) / p * N * (DR + R * DS),
    }
    for algorithm, value in expected.items():
        got = cm.predict_allreduce(algorithm, N, p, M, repeated=repeated)
        assert got == pytest.approx(value, rel=1e-12), algorithm
    # segmented: the ring's bytes, so the ring's δ
    assert cm.predict_allreduce("segmented_ring", N, p, M, segment_bytes=N,
                                repeated=repeated) == pytest.approx(expected["ring"], rel=1e-12)


def test_no_coherence_section_is_the_textbook_model():
    plain = load_machine(_data())
    assert plain.shared_sum(N) == plain.shared_receive(N) == 0.0
    for algorithm in allreduce_names():
        assert cm.predict_allreduce(algorithm, N, 4, plain, repeated=True) == \
            cm.predict_allreduce(algorithm, N, 4, plain)


def test_delta_is_log_interpolated_at_the_whole_buffer():
    curve = {"sum_curve": [{"buffer_bytes": 1 << 16, "value": 8e-10},
                           {"buffer_bytes": 1 << 22, "value": 2e-10}],
             "receive_curve": [{"buffer_bytes": 1 << 16, "value": 0.0}]}
    machine = load_machine(_data(curve))
    assert machine.shared_sum(1 << 10) == 8e-10 and machine.shared_sum(1 << 30) == 2e-10
    assert machine.shared_sum(1 << 19) == pytest.approx(8e-10 + 0.5 * (2e-10 - 8e-10))
    # recursive doubling of 512 KB at p = 2: one step summing into the whole buffer
    n = 1 << 19
    expected = A + n * B + n * G + n * machine.shared_sum(n)
    assert cm.predict_allreduce("recursive_doubling", n, 2, machine) == pytest.approx(expected)
    # the ring's chunks of n/p are priced at the rate of the whole buffer (n)
    base = cm.predict_allreduce("ring", n, 4, load_machine(_data()), repeated=True)
    assert cm.predict_allreduce("ring", n, 4, machine, repeated=True) == pytest.approx(
        base + 3 / 4 * n * machine.shared_sum(n))


def test_predict_call_passes_repeated_on():
    assert cm.predict_allreduce_call("ring", N, 2, M, repeated=True) - \
        cm.predict_allreduce_call("ring", N, 2, M) == pytest.approx(N / 2 * DS)


@pytest.mark.parametrize("coherence, field", [
    ({"sum_curve": [{"buffer_bytes": 65536, "value": -1e-10}], "receive_curve": FLAT["receive_curve"]},
     "network.coherence.sum_curve[0].value"),
    ({"sum_curve": FLAT["sum_curve"]}, "network.coherence.receive_curve"),
    ({"sum_curve": FLAT["sum_curve"], "receive_curve": [{"value": 1e-10}]},
     "network.coherence.receive_curve[0].buffer_bytes"),
    ({"sum_curve": [{"buffer_bytes": 65536, "value": "fast"}], "receive_curve": FLAT["receive_curve"]},
     "network.coherence.sum_curve[0].value"),
    ([1, 2], "network.coherence"),
])
def test_bad_coherence_names_the_field(coherence, field):
    with pytest.raises(MachineError, match=field.replace("[", r"\[").replace("]", r"\]")):
        load_machine(_data(coherence))


def test_coherence_round_trips(tmp_path):
    path = save_machine(_data(FLAT), str(tmp_path / "m.yaml"))
    again = load_machine(path)
    assert again.shared_sum_curve == M.shared_sum_curve == ((65536.0, DS),)
    assert again.shared_receive_curve == ((65536.0, DR),)
    # a model built without a raw description writes the same curves
    bare = load_machine(_data(FLAT))
    object.__setattr__(bare, "raw", {})
    assert load_machine(machine_to_dict(bare)).shared_receive_curve == ((65536.0, DR),)


def test_same_coherence_state_rule():
    slow, fast = 7e-10, 0.5e-10
    assert same_coherence_state(slow, slow * PROBE_FACTOR)
    assert not same_coherence_state(slow, slow * PROBE_FACTOR * 1.01)
    assert not same_coherence_state(slow, fast)
    # values below the floor are one state, whatever their ratio
    assert same_coherence_state(0.0, PROBE_FLOOR / 100)
    assert same_coherence_state(0.0, PROBE_FLOOR * PROBE_FACTOR)
