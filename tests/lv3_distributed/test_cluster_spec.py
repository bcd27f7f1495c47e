"""The emulated cluster's description (``--cluster`` text, a recipe's ``cluster:``),
and the capability check, without building anything (any machine, any user)."""
import pytest

from deep500.lv3_distributed.cluster import cluster_from_mapping, parse_cluster
from deep500.lv3_distributed.cluster.commands import require_privileges
from deep500.lv3_distributed.cluster.spec import default_burst
from deep500.recipe import parse_recipe
from deep500.utils.errors import Deep500Error, RecipeError


def test_the_text_of_a_cluster_gives_its_units_in_tc_terms():
    spec = parse_cluster("nodes=3,rate=1gbit,burst=256kb,latency=1.5ms,ppn=2")
    assert (spec.nodes, spec.rate_bits, spec.burst_bytes) == (3, 1e9, 256 * 1024)
    assert spec.latency_seconds == pytest.approx(1.5e-3, rel=1e-12)
    assert spec.ranks_per_node == 2 and spec.mode == "nodes"
    assert parse_cluster("nodes=1,rate=100mbps,mode=loopback").rate_bits == 800e6  # bytes/s
    assert parse_cluster(spec.text()) == spec  # round trip


def test_the_tcp_congestion_control_is_the_hosts_unless_named():
    spec = parse_cluster("nodes=2,rate=1gbit")
    assert spec.tcp is None and "tcp=" not in spec.text() and "TCP" not in spec.describe()
    spec = parse_cluster("nodes=2,rate=1gbit,tcp=Reno")
    assert spec.tcp == "reno" and "tcp=reno" in spec.text() and parse_cluster(spec.text()) == spec
    assert spec.describe().endswith("TCP reno")
    assert spec.as_dict()["tcp_congestion_control"] == "reno"


def test_a_congestion_control_the_host_does_not_allow_is_refused_with_the_fix(monkeypatch):
    from deep500.lv3_distributed.cluster import commands, topology
    monkeypatch.setattr(commands, "allowed_congestion_controls", lambda: ["reno", "bbr"])
    topology._check_tcp(parse_cluster("nodes=2,rate=1gbit"))  # the host's: no check
    topology._check_tcp(parse_cluster("nodes=2,rate=1gbit,tcp=reno"))  # allowed
    with pytest.raises(Deep500Error) as raised:
        topology._check_tcp(parse_cluster("nodes=2,rate=1gbit,tcp=cubic"))
    message = str(raised.value)
    assert "only reno, bbr" in message and "tcp_allowed_congestion_control" in message
    assert 'sysctl -w net.ipv4.tcp_allowed_congestion_control="reno bbr cubic"' in message


def test_jumbo_frames_get_a_bucket_of_two_frames_at_least():
    spec = parse_cluster("nodes=2,rate=1gbit,mtu=9000")
    assert spec.mtu == 9000 and spec.burst_bytes == 2 * 9014
    assert "mtu=9000" in spec.text() and parse_cluster(spec.text()) == spec
    assert spec.describe().endswith("MTU 9000") and spec.as_dict()["mtu"] == 9000
    assert parse_cluster("nodes=2,rate=1gbit").mtu == 1500


@pytest.mark.parametrize("burst, mtu, expected", [
    (8192, 1500, 7500),       # 5 frames of 1514 B fit in 8 KiB, a sixth would not
    (2 * 9014, 9000, 18000),  # the jumbo default: two frames
    (9014, 9000, 9000),       # a bucket of one frame: one frame per packet
    (1 << 20, 1500, 65536),   # Linux's largest offloaded packet
])
def test_offloaded_packets_hold_whole_frames_that_fit_the_bucket(burst, mtu, expected):
    from deep500.lv3_distributed.cluster.spec import FRAME_HEADER, segment_bytes
    size = segment_bytes(burst, mtu)
    assert size == expected
    assert (size // mtu) * (mtu + FRAME_HEADER) <= burst
    spec = parse_cluster(f"nodes=2,rate=1gbit,burst={burst}b,mtu={mtu}")
    assert spec.as_dict()["gso_max_size"] == expected


def test_the_default_burst_is_64_microseconds_at_the_rate_and_at_least_8_kib():
    assert default_burst(1e9) == 8 * 1024
    assert default_burst(1e8) == 8 * 1024
    assert parse_cluster("nodes=2,rate=10gbit").burst_bytes == 80_000


@pytest.mark.parametrize("text, message", [
    ("nodes=2", "give rate"),
    ("rate=1gbit", "give nodes"),
    ("nodes=2,rate=fast", "rate='fast': not a number with one of the units"),
    ("nodes=2,rate=1gbit,colour=red", "unknown field(s) colour"),
    ("nodes=0,rate=1gbit", "give 1 to 64 nodes"),
    ("nodes=two,rate=1gbit", "nodes='two' is not a positive integer"),
    ("nodes=2,rate=1gbit,burst=10b", "one full frame"),
    ("nodes=2,rate=1gbit,mode=loopback", "mode=loopback is one namespace"),
    ("nodes=2,rate=1gbit,mode=star", "one of nodes, loopback"),
    ("nodes=2,,rate", "'rate' is not name=value"),
    ("nodes=2,nodes=3,rate=1gbit", "nodes is given twice"),
    ("nodes=2,rate=1gbit,latency=5", "latency='5': not a number"),
    ("nodes=2,rate=1gbit,mtu=100", "give 1280 to 65535 bytes"),
    ("nodes=2,rate=1gbit,mtu=9000,burst=8kb", "smaller than one frame of mtu=9000"),
    ("nodes=2,rate=1gbit,tcp=new reno", "give a TCP congestion control algorithm's name"),
])
def test_a_bad_cluster_says_which_field_and_what_to_write(text, message):
    with pytest.raises(Deep500Error, match=None) as raised:
        parse_cluster(text)
    assert message in str(raised.value)


def test_a_recipe_takes_a_cluster_mapping_and_checks_it():
    base = {"experiment": "operators", "fixed": {"operator": {"op": "Relu", "shape": [4]},
                                                "framework": "reference"}}
    recipe = parse_recipe({**base, "cluster": {"nodes": 2, "rate": "1gbit"}}, "r.yaml")
    assert recipe.cluster == cluster_from_mapping({"nodes": 2, "rate": "1gbit"})
    with pytest.raises(RecipeError) as raised:
        parse_recipe({**base, "cluster": {"nodes": 2, "rate": "1 gigabit"}}, "r.yaml")
    assert "cluster" in str(raised.value) and "not a number with one of the units" in \
        str(raised.value)
    with pytest.raises(RecipeError, match="cluster"):
        parse_recipe({**base, "cluster": "nodes=2"}, "r.yaml")


def test_without_the_capabilities_the_error_says_what_is_needed(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nCapEff:\t0000000000000000\n")
    with pytest.raises(Deep500Error) as raised:
        require_privileges(str(status))
    text = str(raised.value)
    assert "CAP_NET_ADMIN and CAP_SYS_ADMIN" in text and "root" in text
    only_net = tmp_path / "net"
    only_net.write_text(f"CapEff:\t{1 << 12:016x}\n")
    with pytest.raises(Deep500Error, match="lacks CAP_SYS_ADMIN"):
        require_privileges(str(only_net))


def test_a_cluster_without_ranks_to_place_is_refused_before_anything_is_built(tmp_path):
    import subprocess
    import sys
    recipe = tmp_path / "r.yaml"
    recipe.write_text("experiment: operators\nfixed: {operator: {op: Relu, shape: [4]}, "
                      "framework: reference}\n")
    done = subprocess.run([sys.executable, "-m", "deep500", "run", "--cluster",
                           "nodes=2,rate=1gbit", "--out", str(tmp_path / "out"),
                           str(recipe)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "an emulated cluster runs MPI ranks: give --np N" in done.stderr
    assert not (tmp_path / "out").exists()
