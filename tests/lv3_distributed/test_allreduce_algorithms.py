"""The allreduce algorithms of ``CommunicationNetwork`` under real ``mpirun`` (p = 2..5;
4 and 5 oversubscribe 2 cores), and their traffic formulas without MPI.

One launch per p runs ``scripts/check_allreduce_algorithms.py``: every algorithm on
float32/float64/int64 arrays whose length p does not divide (fewer elements than ranks
and empty included), ops sum/average/max/min, checked there against NumPy within the
rounding bound of a p-term sum and for bit-identical results on all ranks. Here: the
bytes and messages each rank recorded equal the algorithm's ``traffic`` and, where a
closed form exists, the textbook one written out below; the MPICH algorithm chosen
through ``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` (set for p = 3 and 4) is recorded.
"""
import json
import sys

import pytest
from numpy.testing import assert_allclose

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.lv3_distributed import allreduce_algorithm, allreduce_names, mpirun_executable
from deep500.lv3_distributed import volume as vol
from deep500.lv3_distributed.collectives.mpich import (MPICH_ALLREDUCE_CVAR,
                                                       mpich_allreduce_algorithm)
from deep500.lv3_distributed.collectives.options import check_allreduce_options
from tests.lv3_distributed.mpi_helpers import SCRIPTS, run_program
from tests.lv3_distributed.test_schemes import (BATCH, assert_identical_every_step,
                                                assert_measured_equals_analytic,
                                                run_scheme, single_process)

OWN = allreduce_names(counted_exactly=True)
# MPICH's algorithm forced for some worlds (read at MPI_Init from the environment)
FORCED = {3: "recursive_doubling", 4: "reduce_scatter_allgather"}


@pytest.fixture(scope="module", params=[2, 3, 4, 5], ids=lambda n: f"np{n}")
def world(request, tmp_path_factory):
    p = request.param
    out = tmp_path_factory.mktemp(f"allreduce{p}")
    command = [mpirun_executable(), "-np", str(p), sys.executable,
               str(SCRIPTS / "check_allreduce_algorithms.py"), str(out)]
    if p in FORCED:   # mpirun passes its environment on to the ranks
        command = ["env", f"{MPICH_ALLREDUCE_CVAR}={FORCED[p]}"] + command
    status, output, _ = run_program(command, timeout=180)
    assert status == 0, output[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(p)]


def traffic(entry):
    return (entry["bytes_sent"], entry["bytes_received"], entry["messages_sent"],
            entry["messages_received"])


def test_every_algorithm_counts_exactly_its_formula(world):
    p = len(world)
    checked = set()
    for rank in world:
        r = rank["rank"]
        for name, case in rank["cases"].items():
            params, entry = case["params"], case["entry"]
            algorithm = params["algorithm"]
            if algorithm == "mpi":
                continue
            assert entry["algorithm"] == algorithm and entry["calls"] == 1, name
            assert entry["counted"] == "exact", name
            expected = allreduce_algorithm(algorithm).traffic(
                params["count"], params["itemsize"], p, r,
                segment_bytes=params["segment_bytes"] or 1 << 20)
            assert traffic(entry) == tuple(expected), (r, name)
            checked.add(algorithm)
    assert checked == set(OWN)


def test_message_sizes_add_up_to_the_traffic(world):
    """Every entry's message-size histogram holds exactly its messages and bytes sent;
    Deep500's own algorithms and the ring's model size every message, and the ring's
    bins are those of its chunks."""
    p = len(world)
    for rank in world:
        r = rank["rank"]
        for name, case in rank["cases"].items():
            params, entry = case["params"], case["entry"]
            sizes = entry["message_sizes"]
            assert (sizes["messages"], sizes["bytes"]) == (
                entry["messages_sent"], entry["bytes_sent"]), (r, name)
            if entry["counted"] in ("exact", "modelled (ring)"):
                assert sizes["unsized_messages"] == 0, (r, name)
            if params["algorithm"] == "ring" or entry["counted"] == "modelled (ring)":
                expected = {}
                for nbytes, count in vol.ring_allreduce_message_sizes(
                        params["count"], params["itemsize"], p, r):
                    counts = expected.setdefault(nbytes.bit_length(), [0, 0])
                    counts[0] += count
                    counts[1] += count * nbytes
                got = {row["bin"]: [row["messages"], row["bytes"]] for row in sizes["bins"]}
                assert got == expected, (r, name)


def test_traffic_is_conserved_across_ranks(world):
    """What all ranks send, all ranks receive (bytes and messages)."""
    for name in world[0]["cases"]:
        entries = [rank["cases"][name]["entry"] for rank in world]
        if entries[0]["algorithm"] == "mpi":
            continue
        assert sum(e["bytes_sent"] for e in entries) == sum(
            e["bytes_received"] for e in entries), name
        assert sum(e["messages_sent"] for e in entries) == sum(
            e["messages_received"] for e in entries), name


def textbook(algorithm, n, p, r):
    """Closed forms for n bytes that every block count divides (Thakur, Rabenseifner &
    Gropp 2005, section 4; Patarasuk & Yuan 2009): (sent, received, messages sent,
    messages received) of rank r."""
    pof2 = 1 << (p.bit_length() - 1)
    lg = pof2.bit_length() - 1
    folded = r < 2 * (p - pof2)
    if algorithm == "ring":
        return (2 * (p - 1) * n // p,) * 2 + (2 * (p - 1),) * 2
    if algorithm == "linear":
        return ((p - 1) * n,) * 2 + (p - 1,) * 2 if r == 0 else (n, n, 1, 1)
    if algorithm == "binomial":   # ceil(log2 p) children at the root; parent + children
        children = {(2, 0): 1, (2, 1): 0, (3, 0): 2, (3, 1): 0, (3, 2): 0,
                    (4, 0): 2, (4, 1): 0, (4, 2): 1, (4, 3): 0,
                    (5, 0): 3, (5, 1): 0, (5, 2): 1, (5, 3): 0, (5, 4): 0}[(p, r)]
        m = children + (r > 0)
        return (m * n, m * n, m, m)
    if folded and r % 2 == 0:   # hands its vector over, gets the result back
        return (n, n, 1, 1)
    extra = (n, n, 1, 1) if folded else (0, 0, 0, 0)
    if algorithm == "recursive_doubling":
        base = (lg * n, lg * n, lg, lg)
    else:  # rabenseifner
        base = (2 * (pof2 - 1) * n // pof2,) * 2 + (2 * lg,) * 2
    return tuple(a + b for a, b in zip(base, extra))


def test_divisible_counts_match_the_textbook_closed_forms(world):
    p = len(world)
    for rank in world:
        for algorithm in ("ring", "linear", "binomial", "recursive_doubling",
                          "rabenseifner"):
            entry = rank["cases"][f"{algorithm}:f64_divisible"]["entry"]   # 840 = 8*105
            assert traffic(entry) == textbook(algorithm, 840 * 8, p, rank["rank"]), \
                (algorithm, rank["rank"])


def test_segmented_ring_moves_the_ring_bytes_in_more_messages(world):
    p = len(world)
    for rank in world:
        r = rank["rank"]
        ring = rank["cases"]["ring:f32_uneven"]["entry"]
        for segment in ("None", "64", "1"):
            entry = rank["cases"][f"segmented_ring/{segment}:f32_uneven"
                                  if segment != "None" else "segmented_ring:f32_uneven"]
            entry = entry["entry"]
            assert traffic(entry)[:2] == traffic(ring)[:2]
        # 1001 float32 in p chunks; 64-byte segments hold 16 elements
        chunks = [1001 // p + (i < 1001 % p) for i in range(p)]
        k = [-(-c // 16) for c in chunks]
        sent = sum(k) * 2 - k[(r + 1) % p] - k[(r + 2) % p]
        entry = rank["cases"]["segmented_ring/64:f32_uneven"]["entry"]
        assert entry["messages_sent"] == sent
        one = rank["cases"]["segmented_ring/1:f32_uneven"]["entry"]
        assert one["messages_sent"] == (2 * 1001 - chunks[(r + 1) % p]
                                        - chunks[(r + 2) % p])   # one per element


def test_mpi_records_mpichs_algorithm(world):
    p = len(world)
    forced = FORCED.get(p, "auto")
    model = {"auto": "ring", "recursive_doubling": "recursive_doubling",
             "reduce_scatter_allgather": "rabenseifner"}[forced]
    for rank in world:
        assert rank["mpi_allreduce_algorithm"] == forced
        entry = rank["cases"]["mpi:f32_uneven"]["entry"]
        if forced == "auto":
            assert entry["counted"] == "modelled (ring)"
        else:
            assert entry["counted"] == (
                f"modelled ({model.replace('_', ' ')}; MPICH {MPICH_ALLREDUCE_CVAR}="
                f"{forced})")
        assert traffic(entry) == tuple(allreduce_algorithm(model).traffic(1001, 4, p,
                                                                          rank["rank"]))


def test_bad_choices_name_the_option(world):
    for rank in world:
        errors = rank["errors"]
        assert errors["mpi_algorithm_not_in_effect"].startswith("Deep500Error: ")
        assert (f"MPICH started with {MPICH_ALLREDUCE_CVAR}="
                f"'{rank['mpi_allreduce_algorithm']}'") in errors[
                    "mpi_algorithm_not_in_effect"]
        assert "set it in the environment before starting MPI" in errors[
            "mpi_algorithm_not_in_effect"]
        assert "mpi_algorithm='fastest' is not an MPICH allreduce algorithm" in errors[
            "mpi_algorithm_unknown"]
        assert errors["unknown_algorithm"].startswith("UnknownAlgorithmError: ")
        assert (f"rank {rank['rank']} of {len(world)}: allreduce: unknown allreduce "
                f"algorithm 'tree'; choose one of ring, linear, binomial") in errors[
                    "unknown_algorithm"]
        assert "segment_bytes=0: give a positive integer" in errors["segment_bytes_zero"]


# -- formulas by hand, without MPI ---------------------------------------------------------
def test_formulas_by_hand():
    T = vol.Traffic
    rabenseifner, recursive_doubling, binomial, linear, segmented_ring, ring = (
        allreduce_algorithm(name).traffic for name in (
            "rabenseifner", "recursive_doubling", "binomial", "linear", "segmented_ring",
            "ring"))
    # 8 float32 on 4 ranks: Rabenseifner moves |R_0| + |R_1| = 8 + 4 elements each way
    # (reduce-scatter and allgather together), in 4 messages
    assert rabenseifner(8, 4, 4, 2) == T(24 * 2, 24 * 2, 4, 4)
    # 5 ranks: rank 0 folds into 1 and gets the result back; rank 1 adds that to its
    # share of the p' = 4 algorithm; rank 4 (new rank 3) only the p' = 4 algorithm
    assert rabenseifner(8, 4, 5, 0) == T(32, 32, 1, 1)
    assert rabenseifner(8, 4, 5, 1) == T(48 + 32, 48 + 32, 5, 5)
    assert rabenseifner(8, 4, 5, 4) == T(48, 48, 4, 4)
    # 5 elements on 4 ranks: blocks 2,1,1,1; new rank 0 keeps blocks {0,1} at step 0
    # (3 elements received, 2 sent), then {0}: |R_0| + |R_1| = 5 + 3 elements
    assert rabenseifner(5, 8, 4, 0) == T(64, 64, 4, 4)
    # new rank 1 keeps {2,3} at step 0, then one of them: |R_0| + |R_1| = 5 + 2
    assert rabenseifner(5, 8, 4, 1) == T(56, 56, 4, 4)
    assert recursive_doubling(10, 8, 3, 0) == T(80, 80, 1, 1)
    assert recursive_doubling(10, 8, 3, 1) == T(160, 160, 2, 2)
    assert recursive_doubling(10, 8, 3, 2) == T(80, 80, 1, 1)
    assert binomial(3, 4, 6, 0) == T(36, 36, 3, 3)   # 1, 2, 4
    assert binomial(3, 4, 6, 4) == T(24, 24, 2, 2)   # 5; parent 0
    assert binomial(3, 4, 6, 5) == T(12, 12, 1, 1)
    assert linear(3, 4, 6, 0) == T(60, 60, 5, 5)
    assert linear(3, 4, 6, 3) == T(12, 12, 1, 1)
    # 100 float64 on 2 ranks in 80-byte segments (10 elements): chunks of 50 -> 5
    assert segmented_ring(100, 8, 2, 0, segment_bytes=80) == T(800, 800, 10, 10)
    # fewer elements than ranks: empty chunks are still one (zero-byte) message
    # (chunks 1,1,0,0: rank 0 sends all but c_1 and c_2, receives all but c_0 and c_1)
    assert segmented_ring(2, 8, 4, 0, segment_bytes=80) == T(24, 16, 6, 6)
    assert ring(2, 8, 4, 0) == T(24, 16, 6, 6) == vol.ring_allreduce_traffic(2, 8, 4, 0)
    for algorithm in allreduce_names():
        assert allreduce_algorithm(algorithm).traffic(10, 8, 1, 0, segment_bytes=64) == \
            T(0, 0, 0, 0)


def test_mpich_choice_is_read_from_the_environment():
    assert mpich_allreduce_algorithm({}) == "auto"
    assert mpich_allreduce_algorithm({MPICH_ALLREDUCE_CVAR: "Ring"}) == "ring"
    assert mpich_allreduce_algorithm(
        {"MPICH_ALLREDUCE_INTRA_ALGORITHM": "recursive_doubling"}) == "recursive_doubling"
    with pytest.raises(d5.Deep500Error, match="'fastest' is not an MPICH allreduce"):
        mpich_allreduce_algorithm({MPICH_ALLREDUCE_CVAR: "fastest"})


def test_consistent_decentralized_checks_its_options():
    owner = "ConsistentDecentralized"
    with pytest.raises(d5.Deep500Error, match=r"ConsistentDecentralized: algorithm: "
                       r"unknown allreduce algorithm 'tree'; choose one of ring, linear, "
                       r"binomial"):
        d5ref.ConsistentDecentralized(None, algorithm="tree")
    with pytest.raises(d5.Deep500Error, match="applies to algorithm='segmented_ring'"):
        d5ref.ConsistentDecentralized(None, algorithm="ring", segment_bytes=4096)
    with pytest.raises(d5.Deep500Error, match="segment_bytes=-1: give a positive"):
        d5ref.ConsistentDecentralized(None, algorithm="segmented_ring", segment_bytes=-1)
    with pytest.raises(d5.Deep500Error, match="applies to algorithm='mpi' only"):
        d5ref.ConsistentDecentralized(None, mpi_algorithm="ring")
    with pytest.raises(d5.Deep500Error, match="MPICH starts with MPIR_CVAR_ALLREDUCE_"
                       "INTRA_ALGORITHM='auto'"):
        check_allreduce_options(owner, "mpi", mpi_algorithm="ring", environ={})
    check_allreduce_options(owner, "mpi", mpi_algorithm="ring",
                            environ={MPICH_ALLREDUCE_CVAR: "ring"})
    check_allreduce_options(owner, "segmented_ring", segment_bytes=1)


# -- a scheme trained with each family -------------------------------------------------------
@pytest.mark.parametrize("ranks,options", [
    (3, {"algorithm": "rabenseifner"}),
    (2, {"algorithm": "segmented_ring", "segment_bytes": 4096}),
], ids=lambda v: v if isinstance(v, int) else json.dumps(v))
def test_consistent_decentralized_with_an_algorithm_is_data_parallel_sgd(tmp_path, ranks,
                                                                        options):
    results, params = run_scheme(tmp_path, ranks, "ConsistentDecentralized", "momentum",
                                 **options)
    assert_identical_every_step(results)
    assert_measured_equals_analytic(results)
    expected = single_process("momentum", ranks * BATCH)
    for name, value in expected.items():
        assert_allclose(params[0][name], value, rtol=1e-5, atol=2e-6, err_msg=name)


def test_model_averaging_counts_its_algorithm_exactly(tmp_path):
    """ModelAverageDecentralized's analytic traffic follows the chosen algorithm (here
    with the fold of p = 3), and equals what was counted."""
    results, _ = run_scheme(tmp_path, 3, "ModelAverageDecentralized", period=2,
                            algorithm="recursive_doubling")
    assert_measured_equals_analytic(results)
    # per averaging the folded rank 0 sends n (its vector), rank 1 2n (one exchange
    # with rank 2, then the result back to rank 0)
    sent = [rank["measured"]["bytes_sent"] for rank in results]
    assert sent[1] == 2 * sent[0]
