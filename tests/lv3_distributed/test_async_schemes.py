"""The asynchronous and stale reference schemes under real ``mpirun`` (2, 3 and 4 ranks;
4 oversubscribes 2 cores).

* ``InconsistentParameterServer`` (Downpour SGD): every run ends (the epoch-end
  handshake leaves no worker waiting), the root applies exactly one update per step of
  every rank, the staleness histogram accounts for each of them, the replicas differ,
  training on the digits lowers the loss, bytes counted equal the model; a failing
  root stops every rank; over several epochs with unequal step counts per rank, the
  end-of-epoch handshake still serves every request.
* ``StaleSynchronous`` (SSP): with staleness 0 it is data-parallel SGD step for step
  (bit-identical parameter fingerprints to ``ConsistentDecentralized``); with staleness
  2 every rank still holds identical parameters after every step, the first two steps
  change nothing, each later update is exactly 2 updates stale, the epoch drains every
  request (every epoch), the loss falls, and the modelled bytes equal the analytic ring.

Asynchronous runs depend on timing; the tests check only what holds for every
interleaving. Each run is ``scripts/check_schemes.py`` (digits, a small MLP, per-step
parameter fingerprints and losses, the epoch's measurements).
"""
import json

import numpy as np
import pytest

from tests.lv3_distributed.mpi_helpers import mpirun

pytestmark = pytest.mark.mpi

BATCH = 8
TIMEOUT = 90   # each run takes a few seconds; a hang fails instead of blocking the suite


def run_scheme(out, ranks, scheme, steps, **options):
    out.mkdir()
    status, output, _ = mpirun(ranks, "check_schemes.py", out, scheme, "--steps", steps,
                               "--batch", BATCH, "--options", json.dumps(options),
                               timeout=TIMEOUT)
    assert status == 0, output[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]


def fingerprints(rank):
    return [step["params"] for step in rank["steps"]]


def assert_loss_falls(rank, window=15):
    losses = [step["loss"] for step in rank["steps"]]
    first, last = np.mean(losses[:window]), np.mean(losses[-window:])
    assert last < first - 0.05, (rank["rank"], first, last)


def assert_bytes_equal_analytic(results, counted):
    for rank in results:
        measured, analytic = rank["measured"], rank["analytic"]
        assert measured["counted"] == counted
        assert (measured["bytes_sent"], measured["bytes_received"]) == \
            (analytic["bytes_sent"], analytic["bytes_received"]), rank["rank"]


# -- the asynchronous parameter server --------------------------------------------------
PS_RUNS = {"np2": (2, 60, {}), "np3-root1": (3, 30, {"root": 1}), "np4": (4, 10, {})}


@pytest.fixture(scope="module", params=sorted(PS_RUNS))
def ps_run(request, tmp_path_factory):
    ranks, steps, options = PS_RUNS[request.param]
    out = tmp_path_factory.mktemp("ps") / request.param
    return run_scheme(out, ranks, "InconsistentParameterServer", steps, **options), \
        steps, options.get("root", 0)


def test_parameter_server_applies_every_step_once(ps_run):
    results, steps, root = ps_run
    ranks = len(results)
    server = results[root]["measured"]
    assert all(len(rank["steps"]) == steps for rank in results)
    assert server["updates_applied"] == ranks * steps
    assert server["updates_by_rank"] == [steps] * ranks
    histogram = {int(s): n for s, n in server["staleness_histogram"].items()}
    assert histogram and sum(histogram.values()) == server["updates_applied"]
    assert min(histogram) >= 0 and server["max_staleness"] == max(histogram)
    for rank in results:
        if rank["rank"] != root:
            assert rank["measured"]["updates_applied"] == 0
        assert rank["consistent"] is False


def test_parameter_server_bytes_are_counted_exactly(ps_run):
    results, steps, root = ps_run
    assert_bytes_equal_analytic(results, "exact")
    workers = len(results) - 1
    for rank in results:    # one message each way per step, one end-of-epoch message
        measured = rank["measured"]
        if rank["rank"] == root:
            assert measured["messages_received"] == workers * (steps + 1)
            assert measured["messages_sent"] == workers * steps
        else:
            assert (measured["messages_sent"], measured["messages_received"]) == \
                (steps + 1, steps)


def test_parameter_server_replicas_diverge(ps_run):
    results, _, root = ps_run
    divergence = [rank["measured"]["replica_divergence"] for rank in results]
    assert all(np.isfinite(d) and d >= 0 for d in divergence)
    if len(results) >= 3:
        # Two workers' last answers left the root at different versions, so at most
        # one worker holds the final parameters.
        assert max(divergence) > 0
    # Within the epoch the workers' parameters are not the root's.
    assert any(fingerprints(rank) != fingerprints(results[root])
               for rank in results if rank["rank"] != root)


@pytest.mark.parametrize("ps_run", ["np2"], indirect=True)
def test_parameter_server_learns(ps_run):
    results, steps, _ = ps_run
    for rank in results:
        assert_loss_falls(rank)


def run_epochs(tmp_path, ranks, scheme, *args):
    status, output, _ = mpirun(ranks, "async_epochs.py", tmp_path, scheme, *args,
                               timeout=TIMEOUT)
    assert status == 0, output[-4000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(ranks)]


def test_parameter_server_epochs_with_unequal_step_counts(tmp_path):
    """Rank r takes 6 + 2r steps per epoch, for three epochs: the end-of-epoch
    handshake, not an assumed step count, tells the root when every worker is done."""
    results = run_epochs(tmp_path, 3, "InconsistentParameterServer", "--unequal")
    nbytes = 4840    # the MLP's 1210 float32 parameters
    for epoch in range(3):
        server = results[0]["epochs"][epoch]["measured"]
        assert server["updates_by_rank"] == [6, 8, 10]
        assert sum(server["staleness_histogram"].values()) == 24
        assert server["bytes_received"] == server["bytes_sent"] == 18 * nbytes
        assert server["messages_received"] == 18 + 2
        for rank in results[1:]:
            measured = rank["epochs"][epoch]["measured"]
            steps = rank["epochs"][epoch]["steps"]
            assert measured["bytes_sent"] == measured["bytes_received"] == steps * nbytes


def test_a_failing_root_stops_the_waiting_workers(tmp_path):
    status, output, seconds = mpirun(3, "async_root_dies.py", tmp_path, timeout=TIMEOUT)
    assert status != 0, output
    assert "rank 0 failed: Traceback" in output, output[-3000:]
    assert "deliberate failure of the parameter server" in output
    assert "finished the epoch" not in output
    assert all((tmp_path / f"started{r}.txt").exists() for r in range(3))


def test_settings_a_user_gets_wrong_are_named(tmp_path):
    status, output, _ = mpirun(2, "async_misuse.py", tmp_path, timeout=TIMEOUT)
    assert status == 0, output[-4000:]
    for r in range(2):
        errors = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert f"rank {r}" in errors["root_out_of_range"]
        assert "root=7" in errors["root_out_of_range"] and "0..1" in \
            errors["root_out_of_range"]
        assert "root=-1" in errors["root_negative"]
        assert "staleness=-1" in errors["staleness_negative"]
        assert "staleness=1.5" in errors["staleness_fraction"]


# -- stale synchronous parallel ---------------------------------------------------------
@pytest.mark.parametrize("ranks,algorithm", [(2, "ring"), (3, "mpi")])
def test_staleness_zero_is_synchronous_sgd(tmp_path, ranks, algorithm):
    """Bit for bit: with p = 2 any allreduce adds the same two numbers; with p = 3
    MPICH's MPI_Iallreduce and MPI_Allreduce reduce in the same order (an MPI may
    differ, which would show here)."""
    stale = run_scheme(tmp_path / "ssp", ranks, "StaleSynchronous", 12, staleness=0)
    synchronous = run_scheme(tmp_path / "sync", ranks, "ConsistentDecentralized", 12,
                             algorithm=algorithm)
    for a, b in zip(stale, synchronous):
        assert fingerprints(a) == fingerprints(b), a["rank"]
        assert [s["loss"] for s in a["steps"]] == [s["loss"] for s in b["steps"]]
    assert stale[0]["measured"]["staleness_histogram"] == {"0": 12}


SSP_RUNS = {"np2": (2, 60), "np3": (3, 20), "np4": (4, 8)}


@pytest.fixture(scope="module", params=sorted(SSP_RUNS))
def ssp_run(request, tmp_path_factory):
    ranks, steps = SSP_RUNS[request.param]
    out = tmp_path_factory.mktemp("ssp") / request.param
    return run_scheme(out, ranks, "StaleSynchronous", steps, staleness=2), steps


def test_stale_synchronous_keeps_replicas_identical(ssp_run):
    results, steps = ssp_run
    first = fingerprints(results[0])
    assert len(first) == steps
    for rank in results:
        assert fingerprints(rank) == first, rank["rank"]
        assert rank["consistent"] is True
        assert rank["measured"]["replica_divergence"] == 0.0
    # nothing is applied while the first two requests are in flight
    assert first[0] == first[1] != first[2]


def test_stale_synchronous_drains_and_counts_staleness(ssp_run):
    results, steps = ssp_run
    for rank in results:
        measured = rank["measured"]
        assert measured["in_flight"] == 0
        assert measured["updates_applied"] == steps
        assert measured["staleness_histogram"] == {"0": 1, "1": 1, "2": steps - 2}
        assert 0 <= measured["waits_blocked"] <= steps
    assert_bytes_equal_analytic(results, "includes modelled")


@pytest.mark.parametrize("ssp_run", ["np2"], indirect=True)
def test_stale_synchronous_learns(ssp_run):
    results, steps = ssp_run
    for rank in results:
        assert_loss_falls(rank)


def test_stale_synchronous_drains_every_epoch(tmp_path):
    results = run_epochs(tmp_path, 2, "StaleSynchronous", "--options",
                         json.dumps({"staleness": 2}))
    for epoch in range(3):
        records = [rank["epochs"][epoch] for rank in results]
        assert records[0]["params"] == records[1]["params"]
        for record in records:
            assert record["measured"]["in_flight"] == 0
            assert record["measured"]["staleness_histogram"] == {"0": 1, "1": 1, "2": 4}
    assert results[0]["epochs"][0]["params"] != results[0]["epochs"][2]["params"]
