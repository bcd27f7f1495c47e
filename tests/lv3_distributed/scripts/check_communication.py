"""Run by tests/lv3_distributed/test_communication.py under ``mpirun -np N``.

Every rank runs every collective of ``CommunicationNetwork`` on seeded data, checks the
results against NumPy (every rank can rebuild every other rank's data from the seeds),
and writes ``<out>/rank<R>.json``: per case, the traffic this rank recorded and the
parameters the test needs to compute the analytic volume. Any failed check raises, and
``guarded_main`` then stops all ranks with that rank's traceback.
"""
import json
import os
import sys

import numpy as np
from numpy.testing import assert_allclose, assert_array_equal

import deep500 as d5
from deep500.lv3_distributed import (CommunicationNetwork, CommunicationVolumeMetric,
                                     guarded_main, wait_all)
from deep500.utils.metric import run_measured

ALLREDUCE_CASES = [  # name, shape, dtype, op
    ("f64_divisible", (840,), np.float64, "sum"),
    ("f32_uneven", (1001,), np.float32, "sum"),
    ("i64_2d", (7, 13), np.int64, "sum"),
    ("f64_average", (50,), np.float64, "average"),
    ("f32_max", (33,), np.float32, "max"),
    ("i32_min", (17,), np.int32, "min"),
    ("c128_sum", (9,), np.complex128, "sum"),
    ("one_element", (1,), np.float64, "sum"),
    ("empty", (0,), np.float64, "sum"),
]


def data(case, rank, shape, dtype):
    """Rank ``rank``'s array for ``case``; any rank can rebuild it."""
    rng = np.random.default_rng([sum(map(ord, case)), rank])
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return rng.integers(-1000, 1000, shape).astype(dtype)
    values = rng.standard_normal(shape)
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def tolerance(dtype):
    return {"f": 1e-5 if np.dtype(dtype).itemsize == 4 else 1e-12, "c": 1e-12}.get(
        np.dtype(dtype).kind, 0)


def main(out_dir):
    net = CommunicationNetwork()
    p, r = net.size, net.rank
    cases = {}

    def measured(name, params, call):
        before = net.volume.copy()
        result = call()
        entries = list((net.volume - before).to_dict()["entries"].values())
        assert len(entries) <= 1, entries
        cases[name] = {"params": params, "entry": entries[0] if entries else None}
        return result

    def agree(name, array):
        """Every rank holds the same bytes (pickled bookkeeping, not measured)."""
        assert len(set(net.comm.allgather(array.tobytes()))) == 1, f"{name} differs"

    # allreduce, both algorithms, out of place, into a given out, and in place
    for algorithm in ("ring", "mpi"):
        for case, shape, dtype, op in ALLREDUCE_CASES:
            everyone = np.stack([data(case, i, shape, dtype) for i in range(p)])
            reduce = {"sum": np.sum, "average": np.mean, "max": np.max, "min": np.min}[op]
            expected = reduce(everyone.astype(np.complex128 if everyone.dtype.kind == "c"
                                              else np.float64 if op == "average"
                                              or everyone.dtype.kind == "f"
                                              else everyone.dtype), axis=0)
            mine = data(case, r, shape, dtype)
            params = {"op": "allreduce", "algorithm": algorithm, "count": mine.size,
                      "itemsize": mine.itemsize}
            got = measured(f"allreduce:{algorithm}:{case}", params,
                           lambda: net.allreduce(mine, op, algorithm=algorithm))
            assert got.dtype == mine.dtype and got.shape == mine.shape
            if tolerance(dtype):
                # float32 sums that cancel: absolute tolerance in float32 ulps of O(p)
                assert_allclose(got, expected, rtol=tolerance(dtype),
                                atol=1e-5 if np.dtype(dtype).itemsize == 4 else 1e-12)
            else:
                assert_array_equal(got, expected)
            assert_array_equal(mine, data(case, r, shape, dtype))  # input untouched
            if algorithm == "ring":
                agree(case, got)
        inplace = data("inplace", r, (99,), np.float64)
        out = measured(f"allreduce:{algorithm}:inplace", {
            "op": "allreduce", "algorithm": algorithm, "count": 99, "itemsize": 8},
            lambda: net.allreduce(inplace, "average", out=inplace, algorithm=algorithm))
        assert out is inplace
        expected = np.mean([data("inplace", i, (99,), np.float64) for i in range(p)], 0)
        assert_allclose(inplace, expected, rtol=1e-12, atol=1e-15)
        given = np.empty((4, 25), np.float32)
        mine = data("given", r, (4, 25), np.float32)
        assert net.allreduce(mine, out=given, algorithm=algorithm) is given
        assert_allclose(given, sum(data("given", i, (4, 25), np.float32)
                                   for i in range(p)), rtol=1e-5)

    # the default algorithm is the ring
    net.allreduce(np.ones(3))
    assert net.volume.entry("allreduce", "ring").calls == len(ALLREDUCE_CASES) + 3

    # broadcast, gather, scatter at two roots, both algorithms each
    for root in sorted({0, p - 1}):
        for algorithm in ("binomial", "mpi"):
            buffer = (data("bcast", root, (5, 6), np.float32) if r == root
                      else np.zeros((5, 6), np.float32))
            measured(f"broadcast:{algorithm}:root{root}", {
                "op": "broadcast", "algorithm": algorithm, "nbytes": buffer.nbytes,
                "root": root}, lambda: net.broadcast(buffer, root, algorithm))
            assert_array_equal(buffer, data("bcast", root, (5, 6), np.float32))
        for algorithm in ("linear", "mpi"):
            mine = data("gather", r, (3, 4), np.int32)
            got = measured(f"gather:{algorithm}:root{root}", {
                "op": "gather", "algorithm": algorithm, "nbytes": mine.nbytes,
                "root": root}, lambda: net.gather(mine, root, algorithm=algorithm))
            if r == root:
                assert_array_equal(got, np.stack([data("gather", i, (3, 4), np.int32)
                                                  for i in range(p)]))
            else:
                assert got is None
            whole = data("scatter", root, (p, 4, 3), np.float64) if r == root else None
            out = np.empty((4, 3))
            measured(f"scatter:{algorithm}:root{root}", {
                "op": "scatter", "algorithm": algorithm, "nbytes": out.nbytes,
                "root": root}, lambda: net.scatter(whole, out, root, algorithm))
            assert_array_equal(out, data("scatter", root, (p, 4, 3), np.float64)[r])

    # point to point: 0 <-> 1 blocking, a ring of isend/irecv, sendrecv, recv_any
    if r in (0, 1) and p > 1:
        ping = data("ping", 0, (11,), np.float64)
        pong = np.empty(11)
        if r == 0:
            measured("send", {"op": "send", "nbytes": ping.nbytes},
                     lambda: net.send(ping, 1, tag=3))
            measured("recv", {"op": "recv", "nbytes": pong.nbytes},
                     lambda: net.recv(pong, 1, tag=4))
            assert_array_equal(pong, 2 * ping)
        else:
            measured("recv", {"op": "recv", "nbytes": pong.nbytes},
                     lambda: net.recv(pong, 0, tag=3))
            assert_array_equal(pong, ping)
            measured("send", {"op": "send", "nbytes": ping.nbytes},
                     lambda: net.send(2 * pong, 0, tag=4))
    mine = data("ring_p2p", r, (6,), np.int16)
    from_left = np.empty(6, np.int16)
    posted = [measured("irecv", {"op": "irecv", "nbytes": from_left.nbytes},
                       lambda: net.irecv(from_left, (r - 1) % p, tag=7)),
              measured("isend", {"op": "isend", "nbytes": mine.nbytes},
                       lambda: net.isend(mine, (r + 1) % p, tag=7))]
    assert wait_all(posted)[0] is from_left and posted[0].test()
    assert_array_equal(from_left, data("ring_p2p", (r - 1) % p, (6,), np.int16))
    got = measured("sendrecv", {"op": "sendrecv", "nbytes": mine.nbytes},
                   lambda: net.sendrecv(mine, (r + 1) % p, np.empty(6, np.int16),
                                        (r - 1) % p, tag=8))
    assert_array_equal(got, from_left)
    if r == 0:
        sources = set()
        for _ in range(p - 1):
            buffer, source, tag = net.recv_any(np.empty(2, np.int64))
            assert tag == 9 and buffer[0] == source and buffer[1] == 10 * source
            sources.add(source)
        assert sources == set(range(1, p))
    else:
        net.send(np.array([r, 10 * r], np.int64), 0, tag=9)

    # neighbour exchange on the ring and on the torus
    mine = data("neighbours", r, (8,), np.float32)
    left, right = measured("ring_exchange", {"op": "ring_exchange", "nbytes": mine.nbytes},
                           lambda: net.ring_exchange(mine))
    assert_array_equal(left, data("neighbours", (r - 1) % p, (8,), np.float32))
    assert_array_equal(right, data("neighbours", (r + 1) % p, (8,), np.float32))
    got = measured("torus_exchange", {"op": "torus_exchange", "nbytes": mine.nbytes,
                                      "grid": list(net.grid)},
                   lambda: net.torus_exchange(mine))
    rows, cols = net.grid
    row, col = divmod(r, cols)
    for direction, (i, j) in {"north": (row - 1, col), "south": (row + 1, col),
                              "west": (row, col - 1), "east": (row, col + 1)}.items():
        neighbour = (i % rows) * cols + j % cols
        assert_array_equal(got[direction], data("neighbours", neighbour, (8,), np.float32))

    # non-blocking allreduce
    mine = data("iallreduce", r, (40,), np.float64)
    request = measured("iallreduce", {"op": "iallreduce", "count": 40, "itemsize": 8},
                       lambda: net.iallreduce(mine, "average"))
    assert_allclose(request.wait(), np.mean([data("iallreduce", i, (40,), np.float64)
                                             for i in range(p)], 0), rtol=1e-12)

    # the metric wrapper: three measured runs of a ring allreduce of 1001 float32
    metric = CommunicationVolumeMetric(net)
    run_measured(lambda: net.allreduce(np.ones(1001, np.float32)), [
        type("Thrice", (d5.TestMetric,), {"reruns": 3})(), metric])
    metric_result = metric.measure(None, None, None).to_dict()

    # local errors name the rank
    errors = {}
    for name, call, error in [
            ("non_contiguous", lambda: net.allreduce(np.ones((4, 4))[:, ::2]), d5.ShapeError),
            ("wrong_out", lambda: net.allreduce(np.ones(4), out=np.ones(5)), d5.ShapeError),
            ("not_an_array", lambda: net.broadcast([1.0, 2.0]), d5.ShapeError),
            ("average_of_ints", lambda: net.allreduce(np.ones(3, np.int64), "average"),
             d5.UnsupportedError),
            ("unknown_algorithm", lambda: net.allreduce(np.ones(3), algorithm="tree"),
             ValueError)]:
        try:
            call()
        except error as exc:
            errors[name] = str(exc)
        else:
            raise AssertionError(f"{name} did not raise {error.__name__}")
    # receive buffers that do not fit what arrives: too small, too large
    if r == 0 and p > 1:
        net.send(np.ones(10), 1, tag=11)
        net.send(np.ones(3), 1, tag=12)
    elif r == 1:
        for tag, size in ((11, 5), (12, 5)):
            try:
                net.recv(np.empty(size), 0, tag=tag)
            except d5.ShapeError as exc:
                errors[f"recv_mismatch_{tag}"] = str(exc)
            else:
                raise AssertionError(f"recv of tag {tag} into {size} did not raise")

    everything = net.volume.to_dict()
    json.dumps(everything)
    by_rank = net.volume_by_rank()
    net.volume.reset()
    assert net.volume.total()["calls"] == 0
    result = {"rank": r, "size": p, "grid": list(net.grid), "cases": cases,
              "metric": metric_result, "errors": errors, "volume": everything,
              "by_rank": by_rank}
    with open(os.path.join(out_dir, f"rank{r}.json"), "w") as handle:
        json.dump(result, handle)
    net.close()


if __name__ == "__main__":
    with guarded_main():
        main(sys.argv[1])
