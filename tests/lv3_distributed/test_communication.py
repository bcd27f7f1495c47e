"""CommunicationNetwork under real mpirun (1, 2, 3 and 4 ranks; 4 oversubscribes 2 cores):
results against NumPy, byte and message counts against the analytic volume of each
algorithm, a failing rank stopping all, and mpi_fork. The volume bookkeeping and the
analytic models are also tested without MPI.

Each world runs ``scripts/check_communication.py`` once (it checks every result against
NumPy and raises on any difference); the tests here read the per-rank JSON it writes
and compare the recorded traffic with formulas written out independently below.
"""
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from deep500.lv3_distributed import (CommunicationVolume, CommunicationVolumeMetric,
                                     mpi_fork, torus_shape)
from deep500.lv3_distributed import volume as vol
from deep500.utils.metric import run_measured

from tests.lv3_distributed.mpi_helpers import SCRIPTS, mpirun, run_program


# -- one world per rank count -----------------------------------------------------------
# MPICH's Hydra starts 4 ranks on 2 cores without options (no --oversubscribe needed);
# the ranks then share cores and poll in turn, which only makes the run slower.
@pytest.fixture(scope="module", params=[1, 2, 3, 4], ids=lambda n: f"np{n}")
def world(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"np{request.param}")
    status, output, _ = mpirun(request.param, "check_communication.py", out)
    assert status == 0, output[-4000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(request.param)]
    assert [rank["size"] for rank in ranks] == [request.param] * request.param
    return ranks


def cases(world, prefix):
    for rank in world:
        for name, case in rank["cases"].items():
            if name.startswith(prefix):
                yield rank["rank"], rank["size"], name, case["params"], case["entry"]


def traffic(entry):
    return (entry["bytes_sent"], entry["bytes_received"], entry["messages_sent"],
            entry["messages_received"])


# -- analytic volumes, written out step by step --------------------------------------------
def ring_allreduce(count, itemsize, p, r):
    """Sum over the steps of the ring: reduce-scatter step s sends chunk r - s and
    receives chunk r - s - 1; allgather step s sends chunk r + 1 - s and receives
    chunk r - s (mod p). Chunk i has n // p elements, one more for i < n % p."""
    if p == 1:
        return 0, 0, 0, 0
    c = [count // p + (1 if i < count % p else 0) for i in range(p)]
    steps = range(p - 1)
    sent = sum(c[(r - s) % p] for s in steps) + sum(c[(r + 1 - s) % p] for s in steps)
    received = sum(c[(r - s - 1) % p] for s in steps) + sum(c[(r - s) % p] for s in steps)
    # the closed form of the volume module's docstring
    assert sent == 2 * count - c[(r + 1) % p] - c[(r + 2) % p]
    assert received == 2 * count - c[r] - c[(r + 1) % p]
    return sent * itemsize, received * itemsize, 2 * (p - 1), 2 * (p - 1)


def tree(p):
    """The binomial tree over relative ranks: parent(v) clears v's lowest set bit."""
    parent = {v: v & (v - 1) for v in range(1, p)}
    children = {v: [u for u in parent if parent[u] == v] for v in range(p)}

    def subtree(v):
        return 1 + sum(subtree(u) for u in children[v])
    return parent, children, subtree


def binomial_broadcast(nbytes, p, r, root):
    _, children, _ = tree(p)
    v = (r - root) % p
    received = 0 if v == 0 else 1
    return len(children[v]) * nbytes, received * nbytes, len(children[v]), received


def binomial_gather(nbytes, p, r, root):
    _, children, subtree = tree(p)
    v = (r - root) % p
    received = sum(subtree(u) for u in children[v]) * nbytes
    if v == 0:
        return 0, received, 0, len(children[v])
    return subtree(v) * nbytes, received, 1, len(children[v])


def linear_gather(nbytes, p, r, root):
    return (0, (p - 1) * nbytes, 0, p - 1) if r == root else (nbytes, 0, 1, 0)


def reversed_traffic(t):
    return t[1], t[0], t[3], t[2]


# -- under mpirun -------------------------------------------------------------------------
@pytest.mark.mpi
def test_ring_allreduce_counts_are_exact(world):
    checked = 0
    for r, p, name, params, entry in cases(world, "allreduce:ring:"):
        assert entry["counted"] == "exact", name
        assert entry["calls"] == 1
        expected = ring_allreduce(params["count"], params["itemsize"], p, r)
        assert traffic(entry) == expected, (name, r, p)
        checked += 1
    assert checked == len(world) * 10  # 9 shapes and dtypes, and one in place
    # 840 elements divide by 2, 3 and 4: each rank sends and receives 2(p-1)/p * n bytes
    for r, p, name, params, entry in cases(world, "allreduce:ring:f64_divisible"):
        nbytes = 840 * 8
        assert entry["bytes_sent"] == entry["bytes_received"] == 2 * (p - 1) * nbytes // p


@pytest.mark.mpi
def test_library_collectives_are_modelled_and_say_so(world):
    for r, p, name, params, entry in cases(world, "allreduce:mpi:"):
        # one rank copies without calling MPI: nothing is sent, exactly
        assert entry["counted"] == ("exact" if p == 1 else "modelled (ring)"), name
        assert traffic(entry) == ring_allreduce(params["count"], params["itemsize"], p, r)
    for r, p, name, params, entry in cases(world, "iallreduce"):
        assert entry["counted"] == "modelled (ring)"
        assert traffic(entry) == ring_allreduce(params["count"], params["itemsize"], p, r)
    models = {"broadcast": binomial_broadcast, "gather": binomial_gather,
              "scatter": lambda *a: reversed_traffic(binomial_gather(*a))}
    seen = set()
    for collective, model in models.items():
        for r, p, name, params, entry in cases(world, f"{collective}:mpi:"):
            assert entry["counted"] == "modelled (binomial tree)", name
            assert traffic(entry) == model(params["nbytes"], p, r, params["root"]), name
            seen.add(collective)
    assert seen == set(models)


@pytest.mark.mpi
def test_rooted_collectives_are_counted_exactly(world):
    models = {"broadcast:binomial:": binomial_broadcast, "gather:linear:": linear_gather,
              "scatter:linear:": lambda *a: reversed_traffic(linear_gather(*a))}
    for prefix, model in models.items():
        found = list(cases(world, prefix))
        assert len(found) == len(world) * len({0, len(world) - 1})
        for r, p, name, params, entry in found:
            assert entry["counted"] == "exact", name
            assert traffic(entry) == model(params["nbytes"], p, r, params["root"]), name


@pytest.mark.mpi
def test_point_to_point_and_neighbour_counts(world):
    p = len(world)
    expected_grid = {1: (1, 1), 2: (1, 2), 3: (1, 3), 4: (2, 2)}[p]
    for rank in world:
        got = rank["cases"]
        n = got["isend"]["params"]["nbytes"]
        assert traffic(got["isend"]["entry"]) == (n, 0, 1, 0)
        assert traffic(got["irecv"]["entry"]) == (0, n, 0, 1)
        assert traffic(got["sendrecv"]["entry"]) == (n, n, 1, 1)
        if rank["rank"] in (0, 1) and p > 1:
            n = got["send"]["params"]["nbytes"]
            assert traffic(got["send"]["entry"]) == (n, 0, 1, 0)
            assert traffic(got["recv"]["entry"]) == (0, n, 0, 1)
        # to the right and to the left; with one rank both are local copies, not sent
        n, messages = got["ring_exchange"]["params"]["nbytes"], 2 if p > 1 else 0
        assert traffic(got["ring_exchange"]["entry"]) == (messages * n, messages * n,
                                                          messages, messages)
        assert tuple(rank["grid"]) == expected_grid
        # one message each way per direction along every dimension longer than 1
        messages = 2 * sum(extent > 1 for extent in expected_grid)
        assert traffic(got["torus_exchange"]["entry"]) == (messages * n, messages * n,
                                                           messages, messages)
        assert all(case["entry"]["counted"] == "exact" for name, case in got.items()
                   if name.split(":")[0] in ("send", "recv", "isend", "irecv", "sendrecv",
                                             "ring_exchange", "torus_exchange"))


@pytest.mark.mpi
def test_totals_metric_and_gathered_volumes(world):
    p = len(world)
    for rank in world:
        volume = rank["volume"]
        for field in ("calls", "bytes_sent", "bytes_received", "messages_sent",
                      "messages_received"):
            assert volume["total"][field] == sum(e[field] for e in volume["entries"].values())
        assert volume["total"]["counted"] == "includes modelled"
        # three runs of a ring allreduce of 1001 float32 elements
        summary = rank["metric"]["summary"]
        sent, received, messages, _ = ring_allreduce(1001, 4, p, rank["rank"])
        assert summary["runs"] == 3 and summary["counted"] == "exact"
        assert (summary["bytes_sent"], summary["bytes_received"]) == (sent, received)
        assert summary["messages_sent"] == messages
        assert [s["bytes_sent"] for s in rank["metric"]["samples"]] == [sent] * 3
    assert world[0]["by_rank"] == [rank["volume"] for rank in world]
    assert all(rank["by_rank"] is None for rank in world[1:])
    # what is sent is received: totals over all ranks agree for every exact collective
    def summed(key, field):
        return sum(rank["volume"]["entries"].get(key, {}).get(field, 0) for rank in world)
    for key in ("allreduce:ring", "broadcast:binomial", "gather:linear", "scatter:linear",
                "sendrecv:direct", "ring_exchange:direct", "torus_exchange:direct"):
        assert summed(key, "bytes_sent") == summed(key, "bytes_received"), key
        assert summed(key, "bytes_sent") > 0 or p == 1, key
        assert summed(key, "messages_sent") == summed(key, "messages_received"), key
    assert summed("isend:direct", "bytes_sent") == summed("irecv:direct", "bytes_received")


@pytest.mark.mpi
def test_errors_name_the_rank(world):
    for rank in world:
        errors = rank["errors"]
        expected = {"non_contiguous", "wrong_out", "not_an_array", "average_of_ints",
                    "unknown_algorithm"}
        if rank["rank"] == 1:
            expected |= {"recv_mismatch_11", "recv_mismatch_12"}
        assert set(errors) == expected
        assert all(f"rank {rank['rank']} of {rank['size']}" in text
                   for text in errors.values())
    assert "ascontiguousarray" in world[0]["errors"]["non_contiguous"]
    if len(world) > 1:
        assert "larger than the receive buffer" in world[1]["errors"]["recv_mismatch_11"]
        assert "received 24 bytes from rank 0" in world[1]["errors"]["recv_mismatch_12"]


@pytest.mark.mpi
def test_a_failing_rank_stops_every_rank(tmp_path):
    status, output, seconds = mpirun(3, "fail_one_rank.py", tmp_path, timeout=60)
    assert status != 0, output
    assert seconds < 60
    assert "rank 2 failed: Traceback" in output, output
    assert "ValueError: deliberate failure on rank 2" in output
    assert "finished an allreduce" not in output
    for r in range(3):  # written before the failure, kept
        assert (tmp_path / f"measured{r}.txt").read_text() == "measured before the failure\n"


@pytest.mark.mpi
def test_mpi_fork_reruns_the_script_with_its_arguments():
    script = str(SCRIPTS / "fork_me.py")
    status, output, _ = run_program([sys.executable, script, "--tag", "hello world"], 60)
    assert status == 0, output
    # ranks' lines may interleave in mpirun's output: pick out the JSON objects
    lines = [json.loads(text) for text in re.findall(r"\{[^{}]*\}", output)]
    assert sorted(line["rank"] for line in lines) == [0, 1]
    assert all(line["size"] == 2 and line["argv"] == ["--tag", "hello world"]
               for line in lines)
    status, output, _ = run_program([sys.executable, script, "--exit-code", "3"], 60)
    assert status == 3, output


# -- without MPI --------------------------------------------------------------------------
def test_mpi_fork_does_nothing_when_it_need_not(monkeypatch):
    monkeypatch.setattr(subprocess, "call", lambda *a, **k: pytest.fail("launched"))
    mpi_fork(1)
    monkeypatch.setenv("PMI_RANK", "0")
    mpi_fork(4)


@pytest.mark.parametrize("size,grid", [(1, (1, 1)), (2, (1, 2)), (3, (1, 3)), (4, (2, 2)),
                                       (6, (2, 3)), (7, (1, 7)), (12, (3, 4)), (16, (4, 4))])
def test_torus_is_the_most_square_grid(size, grid):
    assert torus_shape(size) == grid


@pytest.mark.parametrize("p", range(1, 10))
def test_analytic_models_conserve_bytes_and_match_the_step_sums(p):
    for count in (0, 1, p, 7 * p + 3, 1000):
        ring = [vol.ring_allreduce_traffic(count, 4, p, r) for r in range(p)]
        assert [tuple(t) for t in ring] == [ring_allreduce(count, 4, p, r) for r in range(p)]
        assert sum(t.bytes_sent for t in ring) == sum(t.bytes_received for t in ring)
    for root in range(p):
        for model, reference in [(vol.binomial_broadcast_traffic, binomial_broadcast),
                                 (vol.binomial_gather_traffic, binomial_gather),
                                 (vol.linear_gather_traffic, linear_gather)]:
            rows = [model(10, p, r, root) for r in range(p)]
            assert [tuple(t) for t in rows] == [reference(10, p, r, root)
                                                for r in range(p)]
            assert sum(t.bytes_sent for t in rows) == sum(t.bytes_received for t in rows)
            assert sum(t.messages_sent for t in rows) == sum(t.messages_received
                                                             for t in rows)
        gather = vol.binomial_gather_traffic(10, p, root, root)
        assert gather.bytes_received == 10 * (p - 1)


def test_volume_records_resets_and_differences():
    volume = CommunicationVolume(rank=1, size=4)
    volume.record("allreduce", "ring", "exact", 96, 96, 6, 6)
    before = volume.copy()
    volume.record("allreduce", "ring", "exact", 96, 96, 6, 6)
    volume.record("allreduce", "mpi", "modelled (ring)", 96, 96, 6, 6)
    assert volume.entry("allreduce", "ring").calls == 2
    assert volume.entry("broadcast", "binomial").calls == 0
    since = volume - before
    assert set(since.entries) == {"allreduce:ring", "allreduce:mpi"}
    assert since.entries["allreduce:ring"].bytes_sent == 96
    as_dict = json.loads(json.dumps(volume.to_dict()))
    assert as_dict["total"] == {"calls": 3, "bytes_sent": 288, "bytes_received": 288,
                                "messages_sent": 18, "messages_received": 18,
                                "counted": "includes modelled"}
    assert as_dict["entries"]["allreduce:mpi"]["counted"] == "modelled (ring)"
    volume.reset()
    assert volume.total()["calls"] == 0 and volume.total()["counted"] == "exact"


def test_volume_metric_measures_each_run():
    volume = CommunicationVolume()
    metric = CommunicationVolumeMetric(volume)
    run_measured(lambda: volume.record("send", "direct", "exact", 8, 0, 1, 0),
                 [type("Twice", (CommunicationVolumeMetric,), {"reruns": 2})(volume),
                  metric])
    result = metric.measure(None, None, None)
    assert result.value == 8 and result.unit == "bytes"
    assert result.summary["runs"] == 2 and len(result.samples) == 2
    assert result.conditions["entries"]["send:direct"]["calls"] == 1
    json.loads(result.to_json())
    assert np.isfinite(result.value)
