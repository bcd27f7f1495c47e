"""Run by tests/lv3_distributed/test_cpp_allreduce.py under ``mpirun -np N``.

Builds the C++ MPI kernels (``mpi_allreduce``, ``sparse_topk_allreduce``) and checks,
on every rank, against NumPy computed from every rank's seeded inputs:

* forward: the allreduce sum (float64) and mean (float32, the schemes' build) on the
  world, and the sum on a split communicator (ranks 0, 2, 4... and 1, 3, 5...);
* backward: the allreduce of the incoming gradients (see mpi_allreduce.cpp);
* sparse top-k forward (ties and signs included) and backward, and k out of range;
* the process holds one libmpi, the one the toolchain linked.

Raises on any difference (``guarded_main`` then stops every rank); writes
``<out>/rank<R>.json`` with what was checked and the toolchain it found.
"""
import argparse
import json
import os

import numpy as np

from deep500.frameworks.reference.distributed.cpp_allreduce import (allreduce_operator,
                                                                    sparse_topk_operator)
from deep500.lv0_operators.cpp_library import CppOperatorError
from deep500.lv3_distributed import guarded_main
from deep500.lv3_distributed import mpi_toolchain

COUNT = 37       # float64 test builds
SCHEME_COUNT = 1210  # the fused size of check_schemes' MLP: the schemes' own build
K = 3


def rank_input(rank: int, count: int, dtype) -> np.ndarray:
    values = np.clip(np.random.default_rng([11, rank]).standard_normal(count), -2, 2)
    # The top 3 cut through four equal magnitudes: the lower indices 1 and 2 win.
    values[:5] = [5.0, -3.0, 3.0, -3.0, 3.0]
    return values.astype(dtype)


def top_k(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest |x|, ties to the lower index (the kernel's order)."""
    order = np.lexsort((np.arange(x.size), -np.abs(x)))
    return order[:k]


def handle(comm) -> np.ndarray:
    return np.array([comm.py2f()], np.int64)


def check_dense(comm, checks: list) -> None:
    p, r = comm.Get_size(), comm.Get_rank()
    op = allreduce_operator(COUNT, "float64", average=False)
    xs = [rank_input(i, COUNT, np.float64) for i in range(p)]
    y = op(xs[r], handle(comm))
    np.testing.assert_allclose(y, np.sum(xs, axis=0), rtol=1e-12, atol=1e-12)
    checks.append("dense sum forward")

    grads = [np.random.default_rng([12, i]).standard_normal(COUNT) for i in range(p)]
    x_grad, comm_grad = op.backward([grads[r]], [xs[r], handle(comm)], [y])
    np.testing.assert_allclose(x_grad, np.sum(grads, axis=0), rtol=1e-12, atol=1e-12)
    assert comm_grad is None
    checks.append("dense sum backward")

    mean = allreduce_operator(SCHEME_COUNT, "float32", average=True)
    xs32 = [rank_input(i, SCHEME_COUNT, np.float32) for i in range(p)]
    np.testing.assert_allclose(mean(xs32[r], handle(comm)),
                               np.mean(np.array(xs32, np.float64), axis=0),
                               rtol=1e-6, atol=1e-6)
    checks.append("dense mean forward (float32)")

    half = comm.Split(r % 2, r)  # a communicator other than the world
    members = [i for i in range(p) if i % 2 == r % 2]
    np.testing.assert_allclose(op(xs[r], handle(half)), np.sum([xs[i] for i in members],
                                                               axis=0),
                               rtol=1e-12, atol=1e-12)
    half.Free()
    checks.append("dense sum on a split communicator")


def check_sparse(comm, checks: list) -> None:
    p, r = comm.Get_size(), comm.Get_rank()
    op = sparse_topk_operator(COUNT, "float64", average=False)
    k = np.array([K], np.int64)
    xs = [rank_input(i, COUNT, np.float64) for i in range(p)]
    masks = []
    expected = np.zeros(COUNT)
    for x in xs:  # in rank order, as the kernel adds
        mask = np.zeros(COUNT, bool)
        mask[top_k(x, K)] = True
        masks.append(mask)
        expected[mask] += x[mask]
    y, residual = op(xs[r], handle(comm), k)
    np.testing.assert_array_equal(y, expected)  # same additions in the same order
    np.testing.assert_array_equal(residual, np.where(masks[r], 0.0, xs[r]))
    assert masks[r][[0, 1, 2]].all() and not masks[r][[3, 4]].any()
    checks.append("sparse top-k forward")

    y_grads = [np.random.default_rng([13, i]).standard_normal(COUNT) for i in range(p)]
    residual_grad = np.random.default_rng([14, r]).standard_normal(COUNT)
    x_grad, comm_grad, k_grad = op.backward([y_grads[r], residual_grad],
                                            [xs[r], handle(comm), k], [y, residual])
    np.testing.assert_allclose(x_grad, np.where(masks[r], np.sum(y_grads, axis=0),
                                                residual_grad), rtol=1e-12, atol=1e-12)
    assert comm_grad is None and k_grad is None
    checks.append("sparse top-k backward")

    everything, rest = op(xs[r], handle(comm), np.array([COUNT], np.int64))
    np.testing.assert_allclose(everything, np.sum(xs, axis=0), rtol=1e-12, atol=1e-12)
    assert not rest.any()
    checks.append("sparse with k = n is the dense sum")

    try:
        op(xs[r], handle(comm), np.array([COUNT + 1], np.int64))
    except CppOperatorError as error:
        assert "k = 38 is outside [0, 37]" in str(error), error
    else:
        raise AssertionError("k > n was accepted")
    checks.append("k out of range raises")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    args = parser.parse_args()
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    toolchain = mpi_toolchain.find_mpi_toolchain()
    checks = []
    check_dense(comm, checks)
    check_sparse(comm, checks)
    loaded = mpi_toolchain.loaded_libmpis()
    assert loaded == [os.path.realpath(toolchain.library)], (loaded, toolchain)
    checks.append("one libmpi in the process, the linked one")
    result = {"rank": comm.Get_rank(), "size": comm.Get_size(), "checks": checks,
              "toolchain": {"include_dirs": list(toolchain.include_dirs),
                            "library": toolchain.library,
                            "implementation": toolchain.implementation,
                            "found_by": toolchain.found_by},
              "libmpis": loaded}
    with open(os.path.join(args.out, f"rank{comm.Get_rank()}.json"), "w") as handle_:
        json.dump(result, handle_)


if __name__ == "__main__":
    with guarded_main():
        main()
