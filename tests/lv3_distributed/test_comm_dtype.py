"""Compressed communication (``comm_dtype`` / ``wire_dtype``: float16, bfloat16).

* The 16-bit formats: float16 is NumPy's; bfloat16 is float32's upper half rounded to
  nearest even (checked on hand-picked ties and specials, and against ``ml_dtypes``
  where it is installed).
* Under ``mpirun``: the ring allreduce with a 16-bit wire equals, bit for bit, a NumPy
  replay of the ring that widens every received chunk and sums in float32; the
  ``MPI_Allreduce`` path is within the rounding bound of the exact sum; every rank
  gets identical results; bytes on the wire are exactly half of float32's and equal
  ``allreduce_traffic``'s with the wire's itemsize.
* Training: ``ConsistentDecentralized`` with ``comm_dtype`` keeps the ranks
  bit-identical, sends half the bytes of float32 (measured = analytic), and ends N
  steps within a tolerance of float32's parameters derived from the rounding.
* Bad values are ``Deep500Error`` naming ``comm_dtype``.
"""
import json

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.frameworks.reference.distributed import SCHEMES
from deep500.lv3_distributed import allreduce_names
from deep500.lv3_distributed.collectives.base import AllreduceAlgorithm
from deep500.lv3_distributed.collectives.options import check_wire
from deep500.lv3_distributed.wire_dtype import WireType, check_comm_dtype, wire_type
from tests.lv3_distributed.mpi_helpers import SCRIPTS, mpirun
from tests.lv3_distributed.test_schemes import BATCH, run_scheme, single_process

import importlib
import sys

sys.path.insert(0, str(SCRIPTS))
check_comm_dtype_script = importlib.import_module("check_comm_dtype")
small_model = importlib.import_module("check_schemes").small_model
sys.path.remove(str(SCRIPTS))

UNIT = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


# -- the formats ------------------------------------------------------------------------
def bits(values):
    return np.asarray(values, np.float32).view(np.uint32)


def test_bfloat16_rounds_to_nearest_even():
    wire = WireType("bfloat16")
    one = 0x3F80_0000
    cases = {one: 0x3F80,                 # 1.0 exactly
             one + 0x7FFF: 0x3F80,        # below half an ulp: down
             one + 0x8000: 0x3F80,        # a tie, kept bit even (0): down
             one + 0x1_8000: 0x3F82,      # a tie, kept bit odd (1): up to even
             one + 0x8001: 0x3F81,        # above half: up
             0x7F7F_FFFF: 0x7F80,         # float32 max rounds to infinity
             0x7F80_0000: 0x7F80,         # +inf
             0xFF80_0000: 0xFF80,         # -inf
             0x8000_0000: 0x8000}         # -0
    source = np.array(list(cases), np.uint32).view(np.float32)
    assert_array_equal(wire.encode(source), np.array(list(cases.values()), np.uint16))
    nans = np.array([0x7FC0_0000, 0x7FFF_FFFF, 0xFFFF_FFFF, 0x7F80_0001],
                    np.uint32).view(np.float32)
    widened = wire.decode(wire.encode(nans), np.empty(4, np.float32))
    assert np.isnan(widened).all()
    assert_array_equal(np.signbit(widened), [False, False, True, False])
    # widening is exact: the 16 bits back in the upper half
    assert_array_equal(bits(wire.decode(np.array([0x3F81], np.uint16),
                                        np.empty(1, np.float32))), [0x3F81_0000])


def test_bfloat16_agrees_with_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    values = (rng.standard_normal(20000) * 10.0 ** rng.integers(-38, 38, 20000)).astype(
        np.float32)
    wire = WireType("bfloat16")
    assert_array_equal(wire.encode(values),
                       values.astype(ml_dtypes.bfloat16).view(np.uint16))


def test_float16_is_numpy_half_and_the_precision_bound_holds():
    rng = np.random.default_rng(1)
    values = rng.standard_normal(5000).astype(np.float32)
    for name, unit in UNIT.items():
        wire = WireType(name)
        back = wire.round_trip(values)
        assert np.all(np.abs(back - values) <= unit * np.abs(values))
        assert wire.relative_precision == unit
    half = WireType("float16").encode(values)
    assert_array_equal(half.view(np.float16), values.astype(np.float16))


def test_unknown_comm_dtype_names_the_option():
    with pytest.raises(d5.Deep500Error, match="comm_dtype='float8'.*float16, bfloat16"):
        check_comm_dtype("float8")
    assert wire_type("float32") is None and wire_type(None) is None
    for name, cls in SCHEMES.items():
        with pytest.raises(d5.Deep500Error, match=f"{name}: comm_dtype='int8'"):
            cls.check_options(comm_dtype="int8")
    base = d5ref.GradientDescent(d5ref.from_onnx(small_model()))
    for cls in (d5ref.ConsistentDecentralized, d5.DistributedOptimizer,
                d5ref.ConsistentNeighbors):
        with pytest.raises(d5.Deep500Error, match=f"{cls.__name__}: comm_dtype='fp16'"):
            cls(base, comm_dtype="fp16")
    for algorithm in allreduce_names():  # every algorithm carries a 16-bit wire
        d5ref.ConsistentDecentralized.check_options(algorithm=algorithm,
                                                    comm_dtype="float16")

    class FullWidthOnly(AllreduceAlgorithm):  # one that could not: the error names them
        name = "full_width_only"
    with pytest.raises(d5.Deep500Error, match="algorithm 'ring' or 'linear' .* or 'mpi', "
                                              "not 'full_width_only'"):
        check_wire("Scheme", FullWidthOnly(), "bfloat16")
    with pytest.raises(d5.UnsupportedError, match="C\\+\\+ MPI operators"):
        SCHEMES["CppConsistentDecentralized"].check_options(comm_dtype="bfloat16")
    d5ref.ConsistentDecentralized.check_options(algorithm="mpi", comm_dtype="bfloat16")


# -- the allreduce under mpirun -----------------------------------------------------------
def ring_replay(inputs: list, wire: WireType, average: bool) -> np.ndarray:
    """Patarasuk & Yuan's ring as ``compressed_allreduce.ring`` runs it: chunk c starts
    at rank c, each later rank widens what arrived and adds its own values in float32,
    and the owner (rank c - 1) divides, narrows once, and everyone widens that."""
    p, count = len(inputs), inputs[0].size
    base, extra = divmod(count, p)
    bounds = [i * base + min(i, extra) for i in range(p + 1)]
    result = np.empty(count, np.float32)
    for c in range(p):
        lo, hi = bounds[c], bounds[c + 1]
        partial = inputs[c][lo:hi].copy()
        for k in range(1, p):
            partial = inputs[(c + k) % p][lo:hi] + wire.round_trip(partial)
        if average:
            partial = partial / np.float32(p)
        result[lo:hi] = wire.round_trip(partial)
    return result


def recursive_doubling_replay(inputs: list, wire: WireType, average: bool) -> np.ndarray:
    """Recursive doubling as ``collectives.recursive_doubling`` narrows it: the fold
    (each even rank below 2r hands its values to the next), then at every step both
    partners add the two partial sums as they travelled (rounded to the wire); the
    result is divided, rounded once more, and that is what every rank holds."""
    p = len(inputs)
    q = 1 << (p.bit_length() - 1)
    rest = p - q
    values = [x.copy() for x in inputs]
    group = []                    # the values of new ranks 0 .. q-1
    for rank in range(p):
        if rank < 2 * rest and rank % 2 == 0:
            continue
        if rank < 2 * rest:       # the odd partner adds what the even one sent
            values[rank] = wire.round_trip(values[rank]) + wire.round_trip(values[rank - 1])
        group.append(values[rank])
    mask = 1
    while mask < q:
        group = [wire.round_trip(group[i]) + wire.round_trip(group[i ^ mask])
                 for i in range(q)]
        mask <<= 1
    result = group[0] / np.float32(p) if average else group[0]
    return wire.round_trip(result)


def tree_replay(inputs: list, wire: WireType, average: bool, binomial: bool) -> np.ndarray:
    """The linear or binomial allreduce as they narrow: each sender's partial sum
    rounded to the wire, added to the receiver's own at float32 in the order the
    receiver takes them; rank 0 divides and rounds once, and that is every rank's."""
    p = len(inputs)

    def subtree(v):
        partial = inputs[v].copy()
        mask = 1
        while mask < p and not v & mask:
            if v + mask < p:
                partial = partial + wire.round_trip(subtree(v + mask))
            mask <<= 1
        return partial

    if binomial:
        total = subtree(0)
    else:
        total = inputs[0].copy()
        for source in range(1, p):
            total = total + wire.round_trip(inputs[source])
    return wire.round_trip(total / np.float32(p) if average else total)


def rabenseifner_replay(inputs: list, wire: WireType, average: bool) -> np.ndarray:
    """Rabenseifner's allreduce as it narrows: the fold (the odd partner adds the even
    one's values as they travelled), recursive halving where each kept half adds the
    partner's half rounded to the wire, each block divided and rounded once by its
    owner; the allgather moves those rounded blocks, so they are every rank's result."""
    p, count = len(inputs), inputs[0].size
    q = 1 << (p.bit_length() - 1)
    rest = p - q
    group = [inputs[r] + wire.round_trip(inputs[r - 1]) if r < 2 * rest else
             inputs[r].copy() for r in range(p) if r >= 2 * rest or r % 2]
    base, extra = divmod(count, q)
    bounds = [i * base + min(i, extra) for i in range(q + 1)]
    ranges, mask = [(0, q)] * q, 1
    while mask < q:
        updated = [values.copy() for values in group]
        for i in range(q):
            lo, hi = ranges[i]
            mid = (lo + hi) // 2
            keep = (lo, mid) if not i & mask else (mid, hi)
            a, b = bounds[keep[0]], bounds[keep[1]]
            updated[i][a:b] = group[i][a:b] + wire.round_trip(group[i ^ mask][a:b])
            ranges[i] = keep
        group, mask = updated, mask << 1
    result = np.empty(count, np.float32)
    for i in range(q):
        a, b = bounds[ranges[i][0]], bounds[ranges[i][1]]
        block = group[i][a:b] / np.float32(p) if average else group[i][a:b]
        result[a:b] = wire.round_trip(block)
    return result


@pytest.mark.parametrize("ranks", [2, 3, 5])
def test_allreduce_with_a_16_bit_wire(tmp_path, ranks):
    status, output, _ = mpirun(ranks, "check_comm_dtype.py", tmp_path, timeout=180)
    assert status == 0, output[-4000:]
    results = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(ranks)]
    logs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(ranks)]
    cases = list(check_comm_dtype_script.cases())
    assert len(cases) == 140
    for number, algorithm, name, op, count in cases:
        key = f"{number}-{algorithm}-{name}-{op}-{count}"
        for rank in range(1, ranks):
            assert_array_equal(results[rank][key], results[0][key], err_msg=key)
        inputs = [check_comm_dtype_script.rank_input(r, number, count)
                  for r in range(ranks)]
        wire = WireType(name)
        got = results[0][key]
        assert got.dtype == np.float32
        if algorithm in ("ring", "segmented_ring"):
            assert_array_equal(got, ring_replay(inputs, wire, op == "average"),
                               err_msg=key)
        if algorithm in ("linear", "binomial"):
            assert_array_equal(got, tree_replay(inputs, wire, op == "average",
                                                algorithm == "binomial"), err_msg=key)
        if algorithm == "rabenseifner":
            assert_array_equal(got, rabenseifner_replay(inputs, wire, op == "average"),
                               err_msg=key)
        if algorithm == "recursive_doubling":
            assert_array_equal(got, recursive_doubling_replay(inputs, wire,
                                                              op == "average"),
                               err_msg=key)
        exact = np.sum(np.array(inputs, np.float64), axis=0)
        if op == "average":
            exact /= ranks
        # p - 1 partial sums and the result narrowed, each at most UNIT relative, of
        # values bounded by the sum of magnitudes
        scale = np.sum(np.abs(np.array(inputs, np.float64)), axis=0)
        if op == "average":
            scale /= ranks
        bound = (ranks + 1) * UNIT[name] * scale + 1e-30
        assert np.all(np.abs(got - exact) <= bound), key
        for log in logs:
            volume = log["volumes"][key]
            wire_sent, wire_received, wire_messages, _ = volume["wire"]
            plain_sent, plain_received, plain_messages, _ = volume["float32"]
            assert 2 * wire_sent == plain_sent and 2 * wire_received == plain_received, key
            assert wire_messages == plain_messages
            assert volume["analytic"][:2] == [wire_sent, wire_received], key
    entries = logs[0]["entries"]
    assert entries["allreduce:ring/float16"]["counted"] == "exact"
    assert entries["allreduce:mpi/bfloat16"]["counted"].startswith("modelled")
    # the segmented ring in segments of 32 wire values: the ring's result, bit for bit
    inputs = [check_comm_dtype_script.rank_input(r, 998, 4099) for r in range(ranks)]
    expected = ring_replay(inputs, WireType("bfloat16"), False)
    for rank in range(ranks):
        assert_array_equal(results[rank]["segmented-64"], expected)
    # the non-blocking call: MPI's user-defined operation, then the average
    inputs = [check_comm_dtype_script.rank_input(r, 999, 513) for r in range(ranks)]
    exact = np.mean(np.array(inputs, np.float64), axis=0)
    scale = np.mean(np.abs(np.array(inputs, np.float64)), axis=0)
    for rank in range(ranks):
        assert_array_equal(results[rank]["iallreduce"], results[0]["iallreduce"])
    assert np.all(np.abs(results[0]["iallreduce"] - exact)
                  <= (ranks + 1) * UNIT["float16"] * scale)


# -- training --------------------------------------------------------------------------------
STEPS = 5


@pytest.mark.parametrize("comm_dtype", ["float16", "bfloat16"])
def test_training_with_a_16_bit_wire(tmp_path, comm_dtype):
    ranks = 2
    (tmp_path / "float32").mkdir()
    (tmp_path / comm_dtype).mkdir()
    plain, plain_params = run_scheme(tmp_path / "float32", ranks,
                                     "ConsistentDecentralized", steps=STEPS)
    narrow, narrow_params = run_scheme(tmp_path / comm_dtype, ranks,
                                       "ConsistentDecentralized", steps=STEPS,
                                       comm_dtype=comm_dtype)
    for rank in range(ranks):
        assert [s["params"] for s in narrow[rank]["steps"]] == \
            [s["params"] for s in narrow[0]["steps"]], f"rank {rank} differs"
        measured, analytic = narrow[rank]["measured"], narrow[rank]["analytic"]
        assert measured["counted"] == "exact"
        assert 2 * measured["bytes_sent"] == plain[rank]["measured"]["bytes_sent"]
        assert 2 * measured["bytes_received"] == plain[rank]["measured"]["bytes_received"]
        assert (measured["bytes_sent"], measured["bytes_received"]) == \
            (analytic["bytes_sent"], analytic["bytes_received"])
    # Each step's averaged gradient carries at most p + 1 roundings of UNIT relative
    # error (the inputs, p - 1 partial sums, the result), so the update of each step
    # is off by at most (p + 1) UNIT of its size, which is at most the largest move of
    # a parameter over the run; N steps add up (a generous bound: the loss surface
    # over 5 small steps barely amplifies a perturbation).
    initial = single_process("sgd", ranks * BATCH, steps=0)
    diverged = 0.0
    for name, value in plain_params[0].items():
        moved = float(np.abs(value - initial[name]).max())
        bound = STEPS * (ranks + 1) * UNIT[comm_dtype] * moved
        error = float(np.abs(narrow_params[0][name] - value).max())
        assert error <= bound, (name, error, bound)
        diverged = max(diverged, error)
    assert diverged > 0.0   # the wire did round


# -- the report ----------------------------------------------------------------------------
def _record(comm_dtype, losses, accuracies, sent):
    scheme = {"scheme": "ConsistentDecentralized", "framework": "reference",
              "label": f"ConsistentDecentralized(comm_dtype={comm_dtype})"}
    if comm_dtype is not None:
        scheme["comm_dtype"] = comm_dtype
    epochs = [{"epoch": i, "train_loss": loss, "test_accuracy": accuracy,
               "bytes_sent": [sent, sent]}
              for i, (loss, accuracy) in enumerate(zip(losses, accuracies))]
    return {"configuration": {"seed": 0, "scheme": scheme},
            "result": {"details": {"distributed": {"epochs": epochs}}}}


def test_the_report_compares_each_16_bit_wire_with_its_float32_twin():
    from deep500.report.level3 import compressed_rows
    plain = _record(None, [1.0, 0.5], [0.8, 0.9], 4000)    # no option: float32
    half = _record("float16", [1.0, 0.52], [0.79, 0.9], 2000)
    brain = _record("bfloat16", [1.1, 0.5], [0.8, 0.85], 2000)
    other = _record("float16", [1.0], [0.5], 2000)
    other["configuration"]["seed"] = 1                      # no float32 twin: no row
    rows = compressed_rows([plain, half, brain, other], lambda r: [r["configuration"][
        "scheme"]["label"]])
    assert rows == [
        ["ConsistentDecentralized(comm_dtype=float16)", "float16", "90.0%", "90.0%",
         "0.500", "0.02", "1.0%"],
        ["ConsistentDecentralized(comm_dtype=bfloat16)", "bfloat16", "85.0%", "90.0%",
         "0.500", "0.1", "5.0%"]]
