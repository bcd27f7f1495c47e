"""``deep500 run --np N --hostfile FILE``: the MPICH hostfile is checked, then passed to
the mpirun Deep500 launches (``-f FILE``); and ``local_rank()``, this rank's index on
its node, from the launcher's environment or an ``MPI_COMM_TYPE_SHARED`` split."""
import json
import socket
import sys

import pytest

from deep500.cli import main
from deep500.lv3_distributed.mpi_launch import (LOCAL_RANK_VARIABLES, local_rank,
                                                read_hostfile)
from deep500.results.files import read_manifest, read_results
from deep500.utils.errors import Deep500Error
from tests.lv3_distributed.mpi_helpers import run_program
from tests.recipe.test_distributed_recipe import RECIPE


def deep500(*args, timeout=240):
    return run_program([sys.executable, "-m", "deep500", *map(str, args)], timeout)


def test_hostfile_lines(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("# the nodes\nnode01:4   # four ranks\n\nnode02\n10.0.0.7:2\n")
    assert read_hostfile(path) == [("node01", 4), ("node02", 1), ("10.0.0.7", 2)]


@pytest.mark.parametrize("text, message", [
    ("node01:4\nnode02 slots=8\n", "line 2: 'node02 slots=8' is not 'host' or 'host:n'"
                                   " (a host name or address, optionally ':' and a number "
                                   "of processes >= 1); for MPICH write 'node02:8'"),
    ("node01:0\n", "line 1: 'node01:0' is not 'host' or 'host:n'"),
    ("node01:x\n", "line 1: 'node01:x' is not"),
    ("node 01\n", "line 1: 'node 01' is not"),
    ("# nothing\n\n", "names no host; write one per line"),
    ("node01:4\nnode02:2147483648\n", "line 2: host 'node02' asks for 2147483648 "
                                      "processes; at most 65536 are allowed"),
    ("node01:" + "9" * 5000 + "\n", "asks for 999999999999... processes"),
])
def test_a_hostfile_that_does_not_parse_says_which_line(tmp_path, text, message):
    path = tmp_path / "hosts"
    path.write_text(text)
    with pytest.raises(Deep500Error) as error:
        read_hostfile(path)
    assert message in str(error.value)


def test_a_bad_hostfile_stops_deep500_run_before_mpirun(tmp_path, capsys):
    # The command's entry point in this process: each case stops before any rank starts,
    # so three fresh interpreters would only add their start-up.
    def deep500_here(*args):
        status = main(["run", *map(str, args)])
        captured = capsys.readouterr()
        return status, captured.out + captured.err

    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE % '["ConsistentDecentralized"]')
    hosts = tmp_path / "hosts"
    hosts.write_text("node01 slots=2\n")
    status, output = deep500_here("--np", 2, "--hostfile", hosts, recipe, "--out",
                                  tmp_path / "out", "--quiet")
    assert status != 0
    assert "line 1: 'node01 slots=2'" in output and "write 'node01:2'" in output, output
    assert not (tmp_path / "out").exists()
    status, output = deep500_here("--hostfile", hosts, recipe)
    assert status != 0 and "give the number of ranks too" in output, output
    status, output = deep500_here("--np", 2, "--hostfile", tmp_path / "none", recipe)
    assert status != 0 and "cannot read it" in output, output


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("hosts", ["localhost:2", "{host}\n{host}\n"])
def test_np_2_with_a_hostfile_naming_this_machine_twice(tmp_path, hosts):
    recipe = tmp_path / "r.yaml"
    recipe.write_text((RECIPE % '["ConsistentDecentralized"]').replace("epochs: 2",
                                                                       "epochs: 1"))
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# this machine, twice\n" +
                        hosts.format(host=socket.gethostname()) + "\n")
    out = tmp_path / "out"
    status, output, _ = deep500("run", "--np", 2, "--hostfile", hostfile, recipe,
                                "--out", out, "--quiet")
    assert status == 0, output
    assert read_manifest(str(out))["mpi_ranks"] == 2
    records = [r for r in read_results(str(out)) if r["kind"] == "measurement"]
    assert sorted(r["rank"] for r in records) == [0, 1]
    assert all(r["passed"] and r["size"] == 2 for r in records)


# -- local rank ---------------------------------------------------------------------------
def test_local_rank_from_the_launchers_environment():
    assert local_rank(environ={"OMPI_COMM_WORLD_LOCAL_RANK": "3",
                               "SLURM_LOCALID": "1"}) == 3
    assert local_rank(environ={"MPI_LOCALRANKID": "2"}) == 2
    assert local_rank(environ={"SLURM_LOCALID": "0"}) == 0
    with pytest.raises(Deep500Error, match="SLURM_LOCALID='x' is not a local rank"):
        local_rank(environ={"SLURM_LOCALID": "x"})
    assert LOCAL_RANK_VARIABLES[0] == "OMPI_COMM_WORLD_LOCAL_RANK"


LOCAL_RANKS = """
import json, os, sys
from mpi4py import MPI
from deep500.lv3_distributed.mpi_launch import local_rank
from_environment = local_rank()
for name in ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"):
    os.environ.pop(name, None)
rank = MPI.COMM_WORLD.Get_rank()
# One file per rank: lines the ranks print at once may interleave on mpirun's stdout.
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as handle:
    json.dump([rank, from_environment, local_rank(MPI.COMM_WORLD)], handle)
"""


@pytest.mark.mpi
def test_local_rank_under_mpirun_from_hydra_and_from_the_shared_memory_split(tmp_path):
    from deep500.lv3_distributed import mpirun_executable
    script = tmp_path / "local.py"
    script.write_text(LOCAL_RANKS)
    status, output, _ = run_program([mpirun_executable(), "-np", "3", sys.executable,
                                     str(script), str(tmp_path)], 60)
    assert status == 0, output
    seen = sorted(json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3))
    # one node: the local rank is the world rank, by either route
    assert seen == [[0, 0, 0], [1, 1, 1], [2, 2, 2]], output
