"""The allreduce algorithms as objects (``deep500.lv3_distributed.collectives``) without
MPI: the one registry, the plumbing of the base class (one rank, options, o and the
in-context factor), and that each algorithm's closed-form traffic is conserved over the
ranks. Running them under ``mpirun`` is ``test_allreduce_algorithms.py``."""
import math

import pytest

from deep500.lv3_distributed import AllreduceAlgorithm, allreduce_algorithm, allreduce_names
from deep500.lv3_distributed import collective_models as cm
from deep500.lv3_distributed.collectives import UnknownAlgorithmError
from deep500.lv3_distributed.collectives.mpi import modelled_by
from deep500.lv3_distributed.collectives.pricing import lg, step
from deep500.lv3_distributed.volume import EXACT, Traffic
from deep500.utils.errors import Deep500Error
from deep500.utils.machine import load_machine

A, B, G = 2e-6, 1e-9, 3e-10
MACHINE = load_machine({
    "name": "hand", "network": {"alpha_s": A, "beta_s_per_byte": B},
    "reduction": {"gamma_cache_s_per_byte": G, "gamma_memory_s_per_byte": G},
    "memory": {"bandwidth_bytes_per_s": 1e10},
    "software": {"allreduce_call_overhead_s": {"ring": 3e-6, "mpi": 1e-6},
                 "allreduce_in_context": {"ranks": 2, "algorithms": {
                     "ring": [{"nbytes": 1024, "ratio": 1.5}]}}}})


def test_the_registry_lists_every_algorithm_once_the_default_first():
    names = allreduce_names()
    assert names == ("ring", "linear", "binomial", "recursive_doubling", "rabenseifner",
                     "segmented_ring", "mpi")
    for name in names:
        algorithm = allreduce_algorithm(name)
        assert isinstance(algorithm, AllreduceAlgorithm) and algorithm.name == name
        assert allreduce_algorithm(algorithm) is algorithm   # an object passes through
    assert allreduce_names(narrows_on_wire=True) == allreduce_names()  # every one
    assert allreduce_names(non_blocking=True) == ("ring", "mpi")
    assert allreduce_names(counted_exactly=False) == ("mpi",)


@pytest.mark.parametrize("name", ["tree", "Ring", "", None, ["ring"]])
def test_an_unknown_name_says_where_and_lists_the_known_ones(name):
    with pytest.raises(UnknownAlgorithmError) as error:
        allreduce_algorithm(name, "somewhere: algorithm")
    text = str(error.value)
    assert text.startswith(f"somewhere: algorithm: unknown allreduce algorithm {name!r}; "
                           f"choose one of ring, linear, binomial, recursive_doubling, "
                           f"rabenseifner, segmented_ring, mpi")
    assert "docs/distributed.md" in text
    assert isinstance(error.value, Deep500Error) and isinstance(error.value, ValueError)


@pytest.mark.parametrize("name", [n for n in allreduce_names() if n != "mpi"])
@pytest.mark.parametrize("count", [0, 1, 5, 840, 1001])
def test_closed_form_traffic_is_conserved_over_the_ranks(name, count):
    """What all ranks send, all ranks receive (bytes and messages), for p = 1..9."""
    algorithm = allreduce_algorithm(name)
    for p in range(1, 10):
        rows = [algorithm.traffic(count, 4, p, r, segment_bytes=64) for r in range(p)]
        assert sum(t.bytes_sent for t in rows) == sum(t.bytes_received for t in rows)
        assert sum(t.messages_sent for t in rows) == sum(t.messages_received for t in rows)
        if p == 1:
            assert rows == [Traffic(0, 0, 0, 0)]


def test_options_reach_only_the_algorithms_that_take_them():
    ring, segmented = allreduce_algorithm("ring"), allreduce_algorithm("segmented_ring")
    assert segmented.options == ("segment_bytes",) and ring.options == ()
    assert ring.traffic(1000, 4, 4, 0, segment_bytes=16) == ring.traffic(1000, 4, 4, 0)
    # 250 float32 per chunk in 16-byte segments: 63 messages per chunk, 6 chunks sent
    assert segmented.traffic(1000, 4, 4, 0, segment_bytes=16).messages_sent == 6 * 63
    assert segmented.traffic(1000, 4, 4, 0) == segmented.traffic(
        1000, 4, 4, 0, segment_bytes=1 << 20)   # the default segment holds a chunk


def test_mpi_traffic_is_the_model_of_mpichs_choice():
    mpi = allreduce_algorithm("mpi")
    assert modelled_by("auto").name == "ring" and modelled_by("tree").name == "ring"
    assert modelled_by("reduce_scatter_allgather").name == "rabenseifner"
    assert mpi.traffic(1001, 4, 5, 1, mpi_algorithm="recursive_doubling") == \
        allreduce_algorithm("recursive_doubling").traffic(1001, 4, 5, 1)
    assert mpi.traffic(1001, 4, 5, 1) == allreduce_algorithm("ring").traffic(1001, 4, 5, 1)


class _Network:
    """What ``counted`` reads of a CommunicationNetwork."""

    def __init__(self, mpich):
        self.mpi_allreduce_algorithm = mpich


def test_counted_says_exact_or_which_model():
    assert allreduce_algorithm("ring").counted(_Network("auto")) == EXACT
    mpi = allreduce_algorithm("mpi")
    assert mpi.counted(_Network("auto")) == "modelled (ring)"
    assert mpi.counted(_Network("reduce_scatter_allgather")) == (
        "modelled (rabenseifner; MPICH MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM="
        "reduce_scatter_allgather)")


@pytest.mark.parametrize("name", allreduce_names())
def test_cost_is_what_predict_allreduce_prices(name):
    algorithm = allreduce_algorithm(name)
    for n, p in ((1 << 20, 2), (3000, 5), (100, 8)):
        assert algorithm.cost(MACHINE, n, p) == cm.predict_allreduce(name, n, p, MACHINE)
        assert algorithm.call_cost(MACHINE, n, p, in_context=True) == \
            cm.predict_allreduce_call(name, n, p, MACHINE, in_context=True)
    assert algorithm.cost(MACHINE, 1 << 20, 1) == 0.0
    assert algorithm.cost(MACHINE, 0, 4) == 0.0
    assert algorithm.call_cost(MACHINE, 1 << 20, 1) == 0.0


def test_call_cost_adds_o_then_scales_by_the_in_context_factor():
    ring = allreduce_algorithm("ring")
    n, p = 4096, 4
    bare = ring.cost(MACHINE, n, p)
    assert bare == pytest.approx(2 * (p - 1) * (A + B * n / p) + (p - 1) * G * n / p,
                                 rel=1e-12)
    assert ring.call_cost(MACHINE, n, p) == pytest.approx(bare + 3e-6, rel=1e-12)
    assert ring.call_cost(MACHINE, n, p, in_context=True) == pytest.approx(
        (bare + 3e-6) * 1.5, rel=1e-12)
    # no o in the file for binomial: the call costs the model
    binomial = allreduce_algorithm("binomial")
    assert binomial.call_cost(MACHINE, n, p) == binomial.cost(MACHINE, n, p)


class _Tree(AllreduceAlgorithm):
    """A new algorithm needs only its textbook form: here a binomial reduce and
    broadcast priced by hand (run is left out; this test needs no MPI)."""
    name = "toy_tree"
    options = ("fan_out",)

    def _traffic(self, count, itemsize, size, rank, fan_out=2):
        n = count * itemsize
        return Traffic(n, n, 1, 1) if rank else Traffic(0, 0, 0, 0)

    def _cost(self, m, n, p, fan_out=2):
        return 2 * lg(p) * step(m, n)


def test_the_base_class_carries_the_plumbing_of_a_new_algorithm():
    tree = _Tree()
    assert tree.traffic(10, 4, 1, 0, fan_out=3, segment_bytes=8) == Traffic(0, 0, 0, 0)
    assert tree.traffic(10, 4, 4, 2, segment_bytes=8) == Traffic(40, 40, 1, 1)
    assert tree.cost(MACHINE, 1000, 4, segment_bytes=8) == pytest.approx(
        4 * (A + 1000 * B), rel=1e-12)
    assert tree.cost(MACHINE, 1000, 1) == 0.0
    assert cm.predict_allreduce(tree, 1000, 4, MACHINE) == tree.cost(MACHINE, 1000, 4)
    assert math.isfinite(tree.call_cost(MACHINE, 1000, 4, in_context=True))
    with pytest.raises(NotImplementedError, match="cannot narrow"):
        tree.run_narrowed(None, None, None, None, None)
    assert "toy_tree" not in allreduce_names()   # registering is one line in registry.py


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_the_non_blocking_ring_equals_the_blocking_ring(ranks):
    from tests.lv3_distributed.mpi_helpers import mpirun
    status, output, _ = mpirun(ranks, "check_ring_request.py", timeout=120)
    assert status == 0 and "ring request ok" in output, output[-3000:]
