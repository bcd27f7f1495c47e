"""The C++ MPI operators (``mpi_allreduce``, ``sparse_topk_allreduce``) and the schemes
built on them (``CppConsistentDecentralized``, ``SparseTopKDecentralized``) under real
``mpirun`` with 2 and 3 ranks, and the MPI toolchain's finding (and not finding) of
MPI's headers.

The operators are compiled once per test session: the scripts inherit
``$DEEP500_CACHE`` (tests/conftest.py) from this process, so the first world builds
them and every later rank and world loads them from the cache.
"""
import json
import os

import numpy as np
import pytest

from deep500.frameworks.reference.distributed.cpp_allreduce import ring_allgather_traffic
from deep500.lv0_operators import cpp_build
from deep500.lv0_operators.toolchain import ToolchainError
from deep500.lv3_distributed import mpi_toolchain
from deep500.lv3_distributed.volume import Traffic, ring_allreduce_traffic

from tests.lv3_distributed.mpi_helpers import mpirun

FUSED = 1210  # parameters of check_schemes' MLP: 64*16 + 16 + 16*10 + 10


def run_world(n: int, script: str, out, *args) -> list[dict]:
    status, output, _ = mpirun(n, script, out, *args, timeout=300)
    assert status == 0, output[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"np{n}")
def ops_world(request, tmp_path_factory):
    return run_world(request.param, "cpp_allreduce_ops.py",
                     tmp_path_factory.mktemp(f"cpp_ops_np{request.param}"))


@pytest.fixture(scope="module", params=[2, 3], ids=lambda n: f"np{n}")
def schemes_world(request, tmp_path_factory):
    return run_world(request.param, "cpp_schemes.py",
                     tmp_path_factory.mktemp(f"cpp_schemes_np{request.param}"))


# -- the operators ------------------------------------------------------------------------
@pytest.mark.mpi
def test_operators_match_numpy_on_every_rank(ops_world):
    """Forward and backward against NumPy sums over every rank's inputs (the script
    raises on a difference, so here every rank must have run every check)."""
    expected = ["dense sum forward", "dense sum backward", "dense mean forward (float32)",
                "dense sum on a split communicator", "sparse top-k forward",
                "sparse top-k backward", "sparse with k = n is the dense sum",
                "k out of range raises", "one libmpi in the process, the linked one"]
    for rank in ops_world:
        assert rank["checks"] == expected, rank["rank"]


@pytest.mark.mpi
def test_operators_link_the_libmpi_mpi4py_loaded(ops_world):
    for rank in ops_world:
        toolchain = rank["toolchain"]
        assert rank["libmpis"] == [os.path.realpath(toolchain["library"])]
        assert toolchain["implementation"] == "MPICH"
        mpi_h = os.path.join(toolchain["include_dirs"][0], "mpi.h")
        assert os.path.isfile(mpi_h)
        # the mpich wheel: headers and library under one prefix
        prefix = os.path.dirname(os.path.dirname(toolchain["library"]))
        if toolchain["found_by"] == "the library's prefix":
            assert toolchain["include_dirs"] == [os.path.join(prefix, "include")]


# -- the schemes --------------------------------------------------------------------------
def scheme(world, name):
    return [rank["schemes"][name] for rank in world]


@pytest.mark.mpi
def test_cpp_allreduce_trains_as_the_python_scheme(schemes_world):
    p = len(schemes_world)
    for name in ("cpp", "dense_topk"):
        for ours, python in zip(scheme(schemes_world, name),
                                scheme(schemes_world, "python")):
            # same minibatches and initial weights; only the summation order differs
            assert ours["max_difference"] <= 1e-6, (name, p)
            np.testing.assert_allclose(ours["losses"], python["losses"], rtol=1e-5)
        prints = [run["fingerprints"] for run in scheme(schemes_world, name)]
        assert all(run == prints[0] for run in prints), f"{name}: ranks differ"
        assert all(run["consistent"] for run in scheme(schemes_world, name))
        assert all(run["measured"]["replica_divergence"] == 0.0
                   for run in scheme(schemes_world, name))


@pytest.mark.mpi
def test_sparse_topk_decreases_the_loss_on_identical_replicas(schemes_world):
    runs = scheme(schemes_world, "sparse")
    assert [run["k"] for run in runs] == [121] * len(runs)  # ceil(0.1 * 1210)
    prints = [run["fingerprints"] for run in runs]
    assert all(run == prints[0] for run in prints), "ranks hold different parameters"
    for run in runs:
        losses = run["losses"]
        assert np.mean(losses[-10:]) < np.mean(losses[:10]) - 0.05, losses
        assert run["measured"]["residual_norm"] > 0  # error feedback holds something back
    dense = scheme(schemes_world, "dense_topk")
    assert all(run["measured"]["residual_norm"] == 0.0 for run in dense)


@pytest.mark.mpi
def test_recorded_volume_is_the_analytic_one(schemes_world):
    p = len(schemes_world)
    for rank in schemes_world:
        r = rank["rank"]
        cpp = rank["schemes"]["cpp"]
        entry = cpp["volume"]["allreduce:cpp-mpi"]
        steps = len(cpp["losses"])
        one = ring_allreduce_traffic(FUSED, 4, p, r)
        assert entry["counted"] == "modelled (ring)"
        assert (entry["calls"], entry["bytes_sent"], entry["bytes_received"]) == (
            steps, steps * one.bytes_sent, steps * one.bytes_received)
        assert entry["messages_sent"] == steps * 2 * (p - 1)
        assert cpp["analytic"]["bytes_sent"] == entry["bytes_sent"]
        assert cpp["analytic"]["bytes_received"] == entry["bytes_received"]
        # the same bytes as the Python ring counts exactly
        assert rank["schemes"]["python"]["volume"]["allreduce:ring"]["bytes_sent"] == \
            entry["bytes_sent"]
        for name, k in (("dense_topk", FUSED), ("sparse", 121)):
            run = rank["schemes"][name]
            entry = run["volume"]["sparse_allgather:cpp-mpi"]
            steps = len(run["losses"])
            assert entry["counted"] == "modelled (ring allgather)"
            assert entry["bytes_sent"] == entry["bytes_received"] == \
                steps * (p - 1) * k * (8 + 4)
            assert entry["messages_sent"] == steps * (p - 1)
            assert run["analytic"]["bytes_sent"] == entry["bytes_sent"]
            assert run["analytic"]["bytes_received"] == entry["bytes_received"]
            assert run["measured"]["bytes_sent"] == entry["bytes_sent"]


@pytest.mark.mpi
def test_density_outside_zero_one_is_refused(schemes_world):
    for rank in schemes_world:
        assert rank["density_error"] == (f"SparseTopKDecentralized on rank {rank['rank']}: "
                                         f"density=0.0; choose a fraction in (0, 1]")


# -- without MPI ---------------------------------------------------------------------------
def test_ring_allgather_traffic():
    assert ring_allgather_traffic(120, 1) == Traffic(0, 0, 0, 0)
    assert ring_allgather_traffic(120, 4) == Traffic(360, 360, 3, 3)


def test_cmakelists_honours_extra_include_dirs_and_libraries(tmp_path):
    source = tmp_path / "op.cpp"
    source.write_text("// empty\n")
    text = open(cpp_build.write_cmakelists(str(tmp_path), "op", [str(source)], {})).read()
    assert "target_include_directories(op PRIVATE ${D500_EXTRA_INCLUDE_DIRS})" in text
    assert "target_link_libraries(op PRIVATE ${D500_EXTRA_LIBRARIES})" in text
    toolchain = mpi_toolchain.MPIToolchain(("/opt/mpi/include",), "/opt/mpi/lib/libmpi.so.12",
                                           "MPICH", "test")
    assert toolchain.cmake_options() == ["-DD500_EXTRA_INCLUDE_DIRS=/opt/mpi/include",
                                         "-DD500_EXTRA_LIBRARIES=/opt/mpi/lib/libmpi.so.12"]


def fake_mpi(root, header: str | None):
    """A prefix with lib/libmpi.so.12 and, if given, include/mpi.h holding ``header``."""
    (root / "lib").mkdir()
    (root / "lib" / "libmpi.so.12").write_bytes(b"")
    if header is not None:
        (root / "include").mkdir()
        (root / "include" / "mpi.h").write_text(header)
    return str(root / "lib" / "libmpi.so.12")


@pytest.fixture
def no_other_mpi(monkeypatch):
    """Hide the wrappers, system folders and $DEEP500_MPI_INCLUDE from the finder."""
    monkeypatch.setattr(mpi_toolchain, "wrapper_include_dirs", lambda: [])
    monkeypatch.setattr(mpi_toolchain, "SYSTEM_INCLUDE_DIRS", ())
    monkeypatch.delenv(mpi_toolchain.INCLUDE_VARIABLE, raising=False)


def test_missing_mpi_headers_say_what_to_install(tmp_path, no_other_mpi):
    library = fake_mpi(tmp_path, header=None)
    with pytest.raises(ToolchainError) as error:
        mpi_toolchain.find_mpi_toolchain(library)
    message = str(error.value)
    assert f"No MPI headers (mpi.h) for the MPI library that mpi4py uses ({library}" in message
    assert str(tmp_path / "include") in message  # where it looked
    assert "pip install mpich" in message and "libmpich-dev" in message
    assert "$DEEP500_MPI_INCLUDE" in message


def test_headers_of_another_mpi_are_skipped(tmp_path, no_other_mpi, monkeypatch):
    library = fake_mpi(tmp_path, header="#define OMPI_MAJOR_VERSION 5\n")
    with pytest.raises(ToolchainError, match=r"Skipped: .*mpi.h is Open MPI's"):
        mpi_toolchain.find_mpi_toolchain(library)
    # an explicit folder with MPICH's header is taken
    other = tmp_path / "mpich_include"
    other.mkdir()
    (other / "mpi.h").write_text('#define MPICH_VERSION "5.0.2"\n')
    monkeypatch.setenv(mpi_toolchain.INCLUDE_VARIABLE, str(other))
    found = mpi_toolchain.find_mpi_toolchain(library)
    assert found.include_dirs == (str(other),) and found.implementation == "MPICH"
    assert found.found_by == "$DEEP500_MPI_INCLUDE" and found.library == library


def test_the_mpich_wheels_headers_are_found_beside_its_library(no_other_mpi):
    import sys
    library = os.path.join(sys.prefix, "lib", "libmpi.so.12")
    if not os.path.isfile(library):
        pytest.skip("the mpich wheel is not installed in this environment")
    found = mpi_toolchain.find_mpi_toolchain(library)
    assert found.include_dirs == (os.path.join(sys.prefix, "include"),)
    assert found.found_by == "the library's prefix" and found.implementation == "MPICH"
