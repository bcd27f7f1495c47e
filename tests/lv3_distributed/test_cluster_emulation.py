"""Emulated clusters built for real: network namespaces, veth links shaped by tc's token
bucket, MPICH over TCP across them (docs/cluster_emulation.md). Every test compares
``ip netns list`` before and after: nothing is left, however the launcher ends.

These tests need root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and are skipped without it;
the error a user without it gets is tested in test_cluster_spec.py and here, with the
capabilities dropped. Traffic stays inside the namespaces the tests create."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deep500.lv3_distributed import mpirun_executable
from deep500.results.files import read_manifest
from tests.lv3_distributed.mpi_helpers import REPO, SCRIPTS, run_program


def _can_build_namespaces() -> bool:
    from deep500.lv3_distributed.cluster import require_privileges
    from deep500.utils.errors import Deep500Error
    try:
        require_privileges()
    except Deep500Error:
        return False
    probe = f"d5test{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return made.returncode == 0


pytestmark = pytest.mark.skipif(not _can_build_namespaces(),
                                reason="building network namespaces needs root "
                                       "(CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2")

DEEP500 = [sys.executable, "-m", "deep500"]


def namespaces() -> list:
    text = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return sorted(line.split()[0] for line in text.splitlines() if line.strip())


def _owner_runs(namespace: str) -> bool:
    """Whether the launcher a cluster namespace is named after still runs (another
    test session's cluster, on a machine that CI shares)."""
    match = re.match(r"^d5c([0-9]+)(?:s|n[0-9]+)$", namespace)
    return bool(match) and Path(f"/proc/{match.group(1)}").exists()


@pytest.fixture
def no_leftovers():
    """Fails the test when it leaves a namespace that was not there before it (the
    launchers it started have ended by then; a cluster whose launcher still runs is
    another session's)."""
    before = namespaces()
    yield before
    left = [n for n in namespaces() if n not in before and not _owner_runs(n)]
    assert not left, f"namespaces left behind: {left}"


def _exchange(cluster: str, megabytes: float, status: int = 0, ranks: int = 2):
    return run_program([*DEEP500, "cluster", "exec", "--cluster", cluster, "--",
                        mpirun_executable(), "-np", str(ranks), sys.executable,
                        str(SCRIPTS / "cluster_exchange.py"), str(int(megabytes * 1e6)),
                        str(status)], timeout=120)


def _link_bytes(output: str) -> dict:
    """``{node: (sent, received)}`` in bytes from the launcher's closing line."""
    found = re.findall(r"node(\d+) sent ([0-9.]+) MB, received ([0-9.]+) MB", output)
    return {int(n): (float(s) * 1e6, float(r) * 1e6) for n, s, r in found}


def test_an_mpi_program_runs_across_the_links_and_its_status_comes_back(no_leftovers):
    status, output, seconds = _exchange("nodes=2,rate=200mbit", 4, status=3)
    assert status == 3, output  # the program's own exit status
    assert "rank 0 on node0 host node0 sum ok" in output, output
    assert "rank 1 on node1 host node1 sum ok" in output, output
    links = _link_bytes(output)
    # An allreduce of 4 MB on 2 ranks sends at least half of it each way (reduce-scatter
    # plus allgather: all of it); the bytes crossed each node's link, not shared memory.
    for node in (0, 1):
        sent, received = links[node]
        assert sent >= 2e6 and received >= 2e6, (node, links)


def test_the_link_rate_bounds_the_time_from_below(no_leftovers):
    """At 50 Mbit/s a 4 MB allreduce needs at least 2 MB on each link each way: >= 0.32 s
    (a transport that bypassed the links, e.g. UCX's shared memory, takes ~5 ms)."""
    program = ("import time,numpy as np; from mpi4py import MPI; c=MPI.COMM_WORLD; "
               "a=np.ones(500000); b=np.empty_like(a); c.Barrier(); t=time.perf_counter(); "
               "c.Allreduce(a,b); t=c.allreduce(time.perf_counter()-t, op=MPI.MIN); "
               "c.rank == 0 and print('seconds', t, flush=True)")
    status, output, _ = run_program([*DEEP500, "cluster", "exec", "--cluster",
                                     "nodes=2,rate=50mbit", "--", mpirun_executable(),
                                     "-np", "2", sys.executable, "-c", program], timeout=120)
    assert status == 0, output
    times = [float(t) for t in re.findall(r"seconds ([0-9.e-]+)", output)]
    assert len(times) == 1 and times[0] >= 2e6 * 8 / 50e6, output


def test_ranks_of_one_node_share_it_and_the_others_cross_the_link(no_leftovers):
    status, output, _ = _exchange("nodes=2,rate=1gbit,ppn=2", 1, ranks=4)
    assert status == 0, output
    nodes = dict(re.findall(r"rank (\d) on (node\d)", output))
    assert nodes == {"0": "node0", "1": "node0", "2": "node1", "3": "node1"}, output


def test_the_loopback_mode_carries_every_rank_on_one_namespace(no_leftovers):
    status, output, _ = _exchange("nodes=1,rate=1gbit,mode=loopback", 2)
    assert status == 0, output
    sent, received = _link_bytes(output)[0]
    assert sent >= 2e6, output  # every byte between the ranks went through lo's bucket


def test_the_namespaces_use_the_named_tcp_congestion_control(no_leftovers):
    """The host's default unless ``tcp=`` names another; DEEP500_CLUSTER says which."""
    with open("/proc/sys/net/ipv4/tcp_congestion_control", encoding="ascii") as handle:
        host = handle.read().strip()
    program = ("import json,os,subprocess; print(subprocess.run(['sysctl','-n',"
               "'net.ipv4.tcp_congestion_control'],capture_output=True,text=True).stdout"
               ".strip(), json.loads(os.environ['DEEP500_CLUSTER'])"
               "['tcp_congestion_control'])")
    for text, expected in (("nodes=1,rate=1gbit,mode=loopback", host),
                           ("nodes=1,rate=1gbit,mode=loopback,tcp=reno", "reno")):
        status, output, _ = run_program([*DEEP500, "cluster", "exec", "--cluster", text,
                                         "--", sys.executable, "-c", program], timeout=60)
        assert status == 0 and f"{expected} {expected}" in output, (text, output)


def test_jumbo_frames_set_the_mtu_of_every_port_and_the_switch(no_leftovers):
    status, output, _ = run_program([*DEEP500, "cluster", "exec", "--cluster",
                                     "nodes=2,rate=1gbit,mtu=9000", "--", "ip", "-o", "link",
                                     "show"], timeout=60)
    assert status == 0, output
    mtus = dict(re.findall(r"^\d+: (br0|node\d)\S*: .* mtu (\d+)", output, re.M))
    assert mtus == {"br0": "9000", "node0": "9000", "node1": "9000"}, output


def test_each_nodes_offloaded_packets_fit_its_bucket(no_leftovers):
    # tbf cuts a packet larger than its bucket into frames in software; a node's
    # gso_max_size keeps its TCP packets within the bucket (spec.segment_bytes)
    status, output, _ = run_program([*DEEP500, "cluster", "exec", "--cluster",
                                     "nodes=2,rate=1gbit", "--", mpirun_executable(), "-np",
                                     "2", "ip", "-d", "-o", "link", "show", "eth0"],
                                    timeout=60)
    assert status == 0, output
    sizes = re.findall(r"gso_max_size (\d+)", output)
    assert sizes == ["7500", "7500"], output


def _start_and_wait_for_namespaces(before: list):
    launcher = subprocess.Popen([*DEEP500, "cluster", "exec", "--cluster",
                                 "nodes=2,rate=1gbit", "--", "sleep", "600"], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    name = f"d5c{launcher.pid}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        made = [n for n in namespaces() if n not in before and n.startswith(name)]
        if len(made) == 3 and _sleepers(name):
            return launcher, name
        time.sleep(0.1)
    launcher.kill()
    pytest.fail(f"the cluster never came up: {launcher.communicate()[0]}")


def _sleepers(name: str) -> list:
    """The pids of 'sleep 600' running in the cluster's switch namespace."""
    text = subprocess.run(["ip", "netns", "pids", f"{name}s"], capture_output=True,
                          text=True).stdout
    pids = []
    for pid in text.split():
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == \
                    [b"sleep", b"600"]:
                pids.append(int(pid))
        except OSError:
            pass
    return pids


def _gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_sigterm_to_the_launcher_removes_the_cluster_and_its_program(no_leftovers):
    launcher, name = _start_and_wait_for_namespaces(no_leftovers)
    sleeper = _sleepers(name)[0]
    launcher.send_signal(signal.SIGTERM)
    output, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 143, output
    assert _gone(sleeper), "the program outlived its cluster"


def test_after_sigkill_the_cleanup_and_the_next_start_remove_the_leftovers(no_leftovers):
    launcher, name = _start_and_wait_for_namespaces(no_leftovers)
    sleeper = _sleepers(name)[0]
    launcher.kill()
    launcher.communicate(timeout=60)
    assert _gone(sleeper), "the program outlived its killed launcher (PR_SET_PDEATHSIG)"
    left = [n for n in namespaces() if n.startswith(name)]
    assert len(left) == 3  # SIGKILL leaves no chance to clean up ...
    status, output, _ = run_program([*DEEP500, "cluster"], timeout=60)
    assert status == 0 and f"{name}: left over" in output, output
    status, output, _ = run_program([*DEEP500, "cluster", "--cleanup"], timeout=60)
    assert status == 0 and all(n in output for n in left), output
    # ... and a start removes them too, before it builds its own cluster.
    launcher, name = _start_and_wait_for_namespaces(no_leftovers)
    launcher.kill()
    launcher.communicate(timeout=60)
    status, output, _ = _exchange("nodes=2,rate=1gbit", 0.1)
    assert status == 0, output
    assert not [n for n in namespaces() if n.startswith(name)]


def test_a_failing_program_and_a_failing_build_leave_nothing(no_leftovers):
    status, output, _ = run_program([*DEEP500, "cluster", "exec", "--cluster",
                                     "nodes=2,rate=1gbit", "--", "false"], timeout=60)
    assert status == 1, output
    status, output, _ = run_program([*DEEP500, "cluster", "exec", "--cluster",
                                     "nodes=2,rate=1gbit,latency=1ms", "--", "true"],
                                    timeout=60)
    if status != 0:  # a kernel without netem: said so, and nothing is left
        assert status == 2 and "netem qdisc, which this kernel lacks" in output, output
    status, output, _ = run_program([*DEEP500, "cluster", "exec", "--cluster",
                                     "nodes=2,rate=1gbit", "--", "no-such-program-d5"],
                                    timeout=60)
    assert status != 0 and "no-such-program-d5" in output, output


def test_without_the_capabilities_the_error_is_clear(no_leftovers):
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is needed to drop the capabilities")
    command = [setpriv, "--inh-caps=-net_admin,-sys_admin",
               "--bounding-set=-net_admin,-sys_admin", *DEEP500, "cluster", "exec",
               "--cluster", "nodes=2,rate=1gbit", "--", "true"]
    status, output, _ = run_program(command, timeout=60)
    assert status == 2, output
    assert "an emulated cluster needs CAP_NET_ADMIN" in output and "lacks" in output, output


RECIPE = """\
experiment: distributed
cluster: {nodes: 2, rate: 1gbit}
fixed:
  network: {model: mlp, hidden: [16]}
  optimizer: {type: sgd, learning_rate: 0.1}
  epochs: 1
mutable:
  scheme: [ConsistentDecentralized]
metrics: {TestAccuracy: {}}
"""


def test_a_recipe_with_a_cluster_runs_in_it_and_its_report_says_emulated(no_leftovers,
                                                                         tmp_path):
    recipe = tmp_path / "cluster.yaml"
    recipe.write_text(RECIPE)
    out = tmp_path / "run"
    status, output, _ = run_program([*DEEP500, "run", "--np", "2", "--quiet", "--out",
                                     str(out), str(recipe)], timeout=300)
    assert status == 0, output
    cluster = read_manifest(str(out))["cluster"]
    assert cluster["emulated"] and cluster["nodes"] == 2
    assert cluster["rate_bits_per_second"] == 1e9
    assert cluster["transport"] == "MPICH ch4:ofi, libfabric tcp provider"
    assert len(cluster["namespaces"]) == 3
    report = (out / "report.md").read_text()
    assert "**Emulated cluster: 2 nodes, one namespace each" in report
    assert "| Network | emulated: 2 nodes" in report
    json.dumps(cluster)  # what the store keeps


def test_calibrate_on_a_cluster_measures_the_link_and_names_it(no_leftovers, tmp_path):
    import yaml
    out = tmp_path / "link.yaml"
    status, output, _ = run_program([*DEEP500, "calibrate", "--np", "2", "--cluster",
                                     "nodes=2,rate=1gbit", "--quick", "--quiet", "--out",
                                     str(out)], timeout=300)
    assert status == 0, output
    machine = yaml.safe_load(out.read_text())
    assert machine["name"].endswith("(emulated cluster)")
    assert "network: emulated cluster, 2 nodes" in machine["source"]
    largest = max(machine["network"]["measurements"], key=lambda m: m["nbytes"])
    # No faster than the link allows (1 Gbit/s, less the bucket's 8 KiB that may pass
    # at once); shared memory takes a few hundred microseconds for the same 1 MiB.
    floor = (largest["nbytes"] - 8192) / 125e6
    assert largest["nbytes"] >= 1 << 20 and largest["median_s"] >= floor, largest


def test_the_users_mpi_environment_reaches_the_ranks(no_leftovers):
    from tests.lv3_distributed.mpi_helpers import _environment
    # one write per line: the ranks' lines must not interleave
    program = ("import os, sys; from mpi4py import MPI; e = os.environ; "
               "sys.stdout.write(f\"rank {MPI.COMM_WORLD.rank} "
               "{e.get('MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM')} {e.get('FI_PROVIDER')} "
               "{e.get('DEEP500_PROBE')}\\n\"); sys.stdout.flush()")
    environment = {**_environment(), "DEEP500_PROBE": "seen",
                   "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "recursive_doubling"}
    done = subprocess.run([*DEEP500, "cluster", "exec", "--cluster", "nodes=2,rate=1gbit",
                           "--", mpirun_executable(), "-np", "2", sys.executable, "-c",
                           program], cwd=REPO, env=environment, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in (0, 1):
        assert f"rank {rank} recursive_doubling tcp seen" in done.stdout, done.stdout
