"""Nearest-neighbour training (``NearestNeighborTraining``, NNT) under real ``mpirun``
(3 and 4 ranks; 4 oversubscribe the 2 cores), training the digits MLP with
``d5.test_training`` (``scripts/nnt_train.py``).

* Updates on a ring of 3 (every neighbourhood is every rank: complete communication):
  after each epoch's drain every replica holds the same parameters (without momentum,
  as Viviani et al. 2018, Statement 1, predict) and the test accuracy reaches 0.85.
* Parameters (gossip) on a ring of 4 and on a 2 x 2 torus: every rank reaches 0.85.
* Updates on a ring of 4 with the per-epoch synchronisation to the best worker: by the
  scheme's progressive estimate (all replicas equal after it, the chosen rank the best
  of the gathered accuracies) and by the trainer's test accuracy (the gathered
  accuracies are the ranks' own test accuracies).
* A rank that sleeps in its step does not slow its neighbours' steps (their median step
  time stays far below the sleep), while with the synchronous ``ConsistentNeighbors``
  it does (the same measurement, so the bound can fail).
* Bad topologies raise ``Deep500Error`` saying what to change (up front for recipes,
  and under mpirun: a ring of 2, a torus shape whose product is not the rank count).

Asynchronous runs depend on timing; the tests check what holds for every interleaving
(accuracy bounds with a margin measured over repeated runs, see docs/distributed.md).
"""
import json
import re
import statistics

import numpy as np
import pytest

from deep500.frameworks.reference.distributed import NearestNeighborTraining, SCHEMES
from deep500.lv3_distributed.communication import check_torus_shape, torus_neighbour_ranks
from deep500.utils.errors import Deep500Error
from tests.lv3_distributed.mpi_helpers import mpirun

TARGET = 0.85
#: The best-sync run on a ring of 4 (4 epochs): 0.89-0.91 on a quiet host, 0.836 once
#: under a load of 4-8 on the 2 cores, where the asynchronous interleavings change; the
#: drift it fixes leaves 0.23-0.48 (docs/distributed.md, "Stability").
BEST_SYNC_TARGET = 0.80
TIMEOUT = 120


def train(out, ranks, scheme="NearestNeighborTraining", *args, **options):
    out.mkdir()
    status, output, _ = mpirun(ranks, "nnt_train.py", out, scheme, "--options",
                               json.dumps(options), *args, timeout=TIMEOUT)
    assert status == 0, output[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]


def accuracies(rank):
    return [epoch["test_accuracy"] for epoch in rank["epochs"]]


# -- pure helpers (no MPI) ---------------------------------------------------------------
def test_torus_neighbours_in_k_dimensions():
    assert torus_neighbour_ranks(0, (2, 2)) == [2, 1]
    assert torus_neighbour_ranks(0, (4,)) == [3, 1]
    assert torus_neighbour_ranks(0, (2,)) == [1]
    assert torus_neighbour_ranks(0, (1, 3)) == [2, 1]
    # 3 x 3 x 3: six distinct neighbours; rank 13 is the centre (1, 1, 1)
    assert sorted(torus_neighbour_ranks(13, (3, 3, 3))) == [4, 10, 12, 14, 16, 22]
    # the relation is symmetric on any torus
    for shape in ((2, 3), (3, 2, 2), (5,), (2, 2, 2)):
        size = int(np.prod(shape))
        for a in range(size):
            for b in torus_neighbour_ranks(a, shape):
                assert a in torus_neighbour_ranks(b, shape), (shape, a, b)


@pytest.mark.parametrize("shape, size, says", [
    ([2, 3], 4, r"product 6 is not the number of ranks \(4\)"),
    ([2, 0], 0, "positive integer"),
    ("2x2", 4, "give a list of extents"),
    ([], 1, "positive integer")])
def test_bad_torus_shapes_raise(shape, size, says):
    with pytest.raises(Deep500Error, match=says):
        check_torus_shape(shape, size)


@pytest.mark.parametrize("options, says", [
    ({"topology": "mesh"}, "topology='mesh'"),
    ({"topology": "ring", "torus_shape": [2, 2]}, "torus_shape is for topology: torus"),
    ({"topology": "torus", "torus_shape": [2, -1]}, "positive integer"),
    ({"exchange": "weights"}, "exchange='weights'"),
    ({"max_outstanding": 0}, "max_outstanding=0"),
    ({"sync_best_every_epoch": "yes"}, "give true or false"),
    ({"overlap": True}, "overlap=True")])
def test_bad_options_raise_up_front(options, says):
    with pytest.raises(Deep500Error, match=says):
        NearestNeighborTraining.check_options(**options)


def test_registered():
    assert SCHEMES["NearestNeighborTraining"] is NearestNeighborTraining


# -- under mpirun ------------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("ranks, options, says", [
    (2, {"topology": "ring"}, "a ring needs at least 3 workers"),
    (3, {"topology": "torus", "torus_shape": [2, 2]},
     r"the product 4 is not the number of ranks \(3\)")])
def test_bad_topology_raises(tmp_path, ranks, options, says):
    status, output, _ = mpirun(ranks, "nnt_train.py", tmp_path,
                               "NearestNeighborTraining", "--epochs", "1", "--options",
                               json.dumps(options), timeout=TIMEOUT)
    assert status != 0
    # every rank raises; the first to abort may stop the others before they print
    assert re.search(says, output) and "Deep500Error" in output, output[-3000:]


@pytest.mark.mpi
def test_updates_on_a_ring_of_3_converge_and_agree(tmp_path):
    results = train(tmp_path / "ring3", 3, "NearestNeighborTraining", "--momentum", "0",
                    "--learning-rate", "0.2", "--epochs", "3")
    for rank in results:
        assert max(accuracies(rank)) >= TARGET, accuracies(rank)
        for epoch in rank["epochs"]:
            measured = epoch["measured"]
            # complete communication, drained each epoch, plain SGD: one model
            assert measured["replica_divergence"] < 1e-4, measured["replica_divergence"]
            assert measured["neighbours"] == [(rank["rank"] - 1) % 3,
                                              (rank["rank"] + 1) % 3]
            assert measured["bytes_sent"] <= rank["analytic"]["bytes_sent"]
            assert measured["bytes_received"] <= rank["analytic"]["bytes_received"]
            assert "upper bound" in rank["analytic"]["model"]
    # every update sent was received by a neighbour (nothing lost, nothing left over)
    sent = sum(e["measured"]["updates_sent"] for r in results for e in r["epochs"])
    received = sum(e["measured"]["contributions_received"] for r in results
                   for e in r["epochs"])
    assert sent == received > 0


@pytest.mark.mpi
@pytest.mark.parametrize("name, options", [
    ("ring4", {"exchange": "parameters"}),
    ("torus2x2", {"exchange": "parameters", "topology": "torus", "torus_shape": [2, 2]})])
def test_parameters_on_4_ranks_converge(tmp_path, name, options):
    results = train(tmp_path / name, 4, "NearestNeighborTraining", "--epochs", "3",
                    **options)
    for rank in results:
        assert max(accuracies(rank)) >= TARGET, (rank["rank"], accuracies(rank))
        assert len(rank["epochs"][-1]["measured"]["neighbours"]) == 2


@pytest.mark.mpi
def test_best_sync_by_the_progressive_estimate(tmp_path):
    results = train(tmp_path / "best", 4, "NearestNeighborTraining", "--momentum", "0",
                    "--learning-rate", "0.1", "--epochs", "4",
                    sync_best_every_epoch=True)
    for epoch in range(4):
        synced = [rank["epochs"][epoch]["measured"]["best_sync"] for rank in results]
        assert all(s == synced[0] for s in synced)   # one decision, taken together
        assert synced[0]["source"].startswith("progressive")
        assert synced[0]["best_rank"] == int(np.argmax(synced[0]["accuracies"]))
        # after the broadcast every replica is the best one
        assert all(rank["epochs"][epoch]["measured"]["replica_divergence"] < 1e-6
                   for rank in results)
        assert len({rank["epochs"][epoch]["test_accuracy"] for rank in results}) == 1
    assert max(accuracies(results[0])) >= BEST_SYNC_TARGET, accuracies(results[0])


@pytest.mark.mpi
def test_best_sync_by_the_trainers_test_accuracy(tmp_path):
    results = train(tmp_path / "event", 4, "NearestNeighborTraining", "--momentum", "0",
                    "--learning-rate", "0.1", "--epochs", "2", "--as-event",
                    sync_best_every_epoch=True)
    for epoch in range(2):
        own = [rank["epochs"][epoch]["test_accuracy"] for rank in results]
        synced = results[0]["epochs"][epoch]["measured"]["best_sync"]
        assert synced["source"].startswith("test")
        np.testing.assert_allclose(synced["accuracies"], own, rtol=0, atol=1e-12)
        assert synced["best_rank"] == int(np.argmax(own))


SLEEP = 0.05


def median_step(rank):
    return statistics.median(t for epoch in rank["epochs"] for t in epoch["step_times"])


@pytest.mark.mpi
def test_a_slow_rank_does_not_slow_its_neighbours(tmp_path):
    slow = ("--epochs", "1", "--slow-rank", "1", "--sleep", str(SLEEP))
    results = train(tmp_path / "nnt", 3, "NearestNeighborTraining", *slow)
    assert median_step(results[1]) >= SLEEP
    for rank in (0, 2):   # both are rank 1's neighbours on the ring of 3
        assert median_step(results[rank]) < SLEEP / 5, median_step(results[rank])
    # the same measurement with a synchronous neighbour exchange waits for rank 1
    synchronous = train(tmp_path / "sync", 3, "ConsistentNeighbors", *slow)
    for rank in (0, 2):
        assert median_step(synchronous[rank]) > SLEEP / 2, median_step(synchronous[rank])
