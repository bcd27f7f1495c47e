"""Run by tests/lv3_distributed/test_allreduce_algorithms.py under ``mpirun -np N``.

Every rank runs every allreduce algorithm on every case (float32/float64, element
counts that p does not divide, fewer elements than ranks, empty, 2-D, integers; ops
sum, average, max, min; out of place, into ``out``, in place), checks each result
against NumPy within the rounding bound of a p-term sum, checks that all ranks hold
the same bytes (Deep500's own algorithms), and writes ``<out>/rank<R>.json``: per
case the traffic recorded in ``network.volume`` and the parameters of its formula.
"""
import json
import os
import sys

import numpy as np
from numpy.testing import assert_array_equal

from deep500.lv3_distributed import CommunicationNetwork, allreduce_names, guarded_main
from deep500.lv3_distributed.collectives.mpich import MPICH_ALLREDUCE_CVAR

CASES = [  # name, shape, dtype, op
    ("f64_divisible", (840,), np.float64, "sum"),
    ("f32_uneven", (1001,), np.float32, "sum"),
    ("f32_2d_average", (7, 13), np.float32, "average"),
    ("f64_average", (50,), np.float64, "average"),
    ("f32_max", (33,), np.float32, "max"),
    ("f64_min", (17,), np.float64, "min"),
    ("i64_sum", (29,), np.int64, "sum"),
    ("f64_three", (3,), np.float64, "sum"),   # fewer elements than ranks for p = 4, 5
    ("f32_one", (1,), np.float32, "average"),
    ("f64_empty", (0,), np.float64, "sum"),
]
# segment sizes of segmented_ring: the default (one segment per chunk here), 64 bytes
# (several per chunk), 1 byte (one element per segment: below the item size)
SEGMENTS = (None, 64, 1)


def data(case, rank, shape, dtype):
    rng = np.random.default_rng([sum(map(ord, case)), rank])
    if np.dtype(dtype).kind == "i":
        return rng.integers(-1000, 1000, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def check(got, everyone, op, name):
    """Compare with NumPy. A sum of p terms in any order has error at most
    (p - 1) u sum|x_i| (Higham, Accuracy and Stability of Numerical Algorithms, 2002,
    eq. 4.4; u = eps / 2); the reference is summed in long double, and the average
    adds one rounding of the division, so (p - 1) eps sum|x_i| (sum) and
    p eps sum|x_i| / p (average) bound the difference. max and min are exact."""
    p = everyone.shape[0]
    if op in ("max", "min"):
        assert_array_equal(got, getattr(np, op)(everyone, axis=0), err_msg=name)
        return
    if everyone.dtype.kind == "i":
        assert_array_equal(got, everyone.sum(axis=0), err_msg=name)
        return
    eps = np.finfo(everyone.dtype).eps
    exact = everyone.astype(np.longdouble).sum(axis=0)
    magnitude = np.abs(everyone.astype(np.longdouble)).sum(axis=0)
    bound = (p - 1) * eps * magnitude
    if op == "average":
        exact, bound = exact / p, p * eps * magnitude / p
    error = np.abs(got.astype(np.longdouble) - exact)
    assert np.all(error <= bound), (name, float(np.max(error - bound)))


def main(out_dir):
    net = CommunicationNetwork()
    p, r = net.size, net.rank
    cases = {}

    def measured(name, params, call):
        before = net.volume.copy()
        result = call()
        entries = list((net.volume - before).to_dict()["entries"].values())
        assert len(entries) == 1, entries
        cases[name] = {"params": params, "entry": entries[0]}
        return result

    runs = [(a, None) for a in allreduce_names() if a != "segmented_ring"]
    runs += [("segmented_ring", s) for s in SEGMENTS]
    for algorithm, segment in runs:
        label = algorithm if segment is None else f"{algorithm}/{segment}"
        for case, shape, dtype, op in CASES:
            everyone = np.stack([data(case, i, shape, dtype) for i in range(p)])
            mine = data(case, r, shape, dtype)
            params = {"algorithm": algorithm, "count": mine.size,
                      "itemsize": mine.itemsize, "segment_bytes": segment}
            got = measured(f"{label}:{case}", params, lambda: net.allreduce(
                mine, op, algorithm=algorithm, segment_bytes=segment))
            assert got.dtype == mine.dtype and got.shape == mine.shape
            check(got, everyone, op, f"{label}:{case}")
            assert_array_equal(mine, data(case, r, shape, dtype))  # input untouched
            if algorithm != "mpi":
                copies = net.comm.allgather(got.tobytes())
                assert len(set(copies)) == 1, f"{label}:{case} differs among ranks"
        # in place and into a given out
        inplace = data("inplace", r, (99,), np.float64)
        everyone = np.stack([data("inplace", i, (99,), np.float64) for i in range(p)])
        assert net.allreduce(inplace, "average", out=inplace, algorithm=algorithm,
                             segment_bytes=segment) is inplace
        check(inplace, everyone, "average", f"{label}:inplace")
        given = np.empty((4, 25), np.float32)
        mine = data("given", r, (4, 25), np.float32)
        assert net.allreduce(mine, out=given, algorithm=algorithm,
                             segment_bytes=segment) is given
        check(given, np.stack([data("given", i, (4, 25), np.float32) for i in range(p)]),
              "sum", f"{label}:given")

    # MPICH's algorithm as set in the environment, and a call expecting another one
    errors = {}
    try:
        other = "ring" if net.mpi_allreduce_algorithm != "ring" else "tree"
        net.allreduce(np.ones(3), algorithm="mpi", mpi_algorithm=other)
    except Exception as exc:  # checked by the test: type and message
        errors["mpi_algorithm_not_in_effect"] = f"{type(exc).__name__}: {exc}"
    try:
        net.allreduce(np.ones(3), algorithm="mpi", mpi_algorithm="fastest")
    except Exception as exc:
        errors["mpi_algorithm_unknown"] = f"{type(exc).__name__}: {exc}"
    try:
        net.allreduce(np.ones(3), algorithm="tree")
    except Exception as exc:
        errors["unknown_algorithm"] = f"{type(exc).__name__}: {exc}"
    try:
        net.allreduce(np.ones(3), algorithm="segmented_ring", segment_bytes=0)
    except Exception as exc:
        errors["segment_bytes_zero"] = f"{type(exc).__name__}: {exc}"
    net.allreduce(np.ones(3), algorithm="mpi", mpi_algorithm=net.mpi_allreduce_algorithm)

    with open(os.path.join(out_dir, f"rank{r}.json"), "w") as f:
        json.dump({"rank": r, "size": p, "cases": cases, "errors": errors,
                   "mpi_allreduce_algorithm": net.mpi_allreduce_algorithm,
                   "environment": os.environ.get(MPICH_ALLREDUCE_CVAR)}, f)
    net.close()


if __name__ == "__main__":
    with guarded_main():
        main(sys.argv[1])
