"""``deep500 predict --sweep AXIS=SPEC``: what-if grids of a recipe's predicted step."""
import json
import math

import numpy as np
import pytest
import yaml

from deep500.cli import main
from deep500.recipe.sweep_axes import (AXES, parse_sweep, parse_sweeps, with_compute_speed,
                                       with_gamma, with_link_bandwidth)
from deep500.utils.errors import Deep500Error
from deep500.utils.machine import load_machine

MACHINE = {
    "name": "synthetic",
    "network": {"alpha_s": 2e-6, "beta_s_per_byte": 1e-9},   # B0 = 8 Gbit/s
    "reduction": {"gamma_cache_s_per_byte": 5e-10, "gamma_memory_s_per_byte": 5e-10},
    "memory": {"bandwidth_bytes_per_s": 1e10},
    "compute": {"peak_flops_per_s": {"gemm": {1: 1e10}}},
}
SWEEPS = ["link_bandwidth=4e9,8e9,16e9", "compute_speed=0.5..2:3", "ranks=2,8",
          "gamma=2e-10,5e-10"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """One analytic sweep through the CLI: (its JSON, the folder it wrote in)."""
    folder = tmp_path_factory.mktemp("sweep")
    recipe = {"name": "swept", "experiment": "distributed",
              "fixed": {"dataset": {"name": "digits", "normalize": "standardize"},
                        "network": {"model": "mlp", "hidden": [32]},
                        "optimizer": {"type": "sgd", "learning_rate": 0.1},
                        "batch_size": 8, "epochs": 1, "threads": 1, "seed": 0,
                        "scheme": {"scheme": "ConsistentDecentralized",
                                   "algorithm": "ring"}}}
    (folder / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    (folder / "machine.yaml").write_text(yaml.safe_dump(MACHINE))
    argv = ["predict", str(folder / "recipe.yaml"), "--machine", str(folder / "machine.yaml"),
            "--compute", "analytic", "--json", str(folder / "sweep.json"),
            "--plot", str(folder / "sweep.png")]
    for sweep in SWEEPS:
        argv += ["--sweep", sweep]
    assert main(argv) == 0
    return json.loads((folder / "sweep.json").read_text()), folder


# --- specs ------------------------------------------------------------------------------

def test_ranges_are_log_spaced_with_exact_ends():
    sweep = parse_sweep("link_bandwidth=1e9..400e9")
    assert sweep.spacing == "log" and len(sweep.values) == 5
    assert sweep.values[0] == 1e9 and sweep.values[-1] == 400e9
    np.testing.assert_allclose(np.diff(np.log(sweep.values)), math.log(400) / 4, rtol=1e-12)
    assert parse_sweep("ranks=1..1024:11").values == tuple(2 ** i for i in range(11))
    assert parse_sweep("batch=16..64:9").values == (16, 19, 23, 27, 32, 38, 45, 54, 64)
    assert parse_sweep("gamma=1e-10..1e-10").values == (1e-10,)


def test_lists_and_rate_units():
    sweep = parse_sweep("link_bandwidth=5gbit, 500mbit,1e9")
    assert sweep.values == (5e8, 1e9, 5e9) and sweep.spacing == "list"
    assert parse_sweep("link_bandwidth=1gbps").values == (8e9,)   # tc(8): bytes/s
    assert parse_sweep("compute_speed=2").values == (2.0,)
    assert parse_sweep("batch=64,16,16").values == (16, 64)
    assert set(AXES) == {"link_bandwidth", "compute_speed", "gamma", "ranks", "batch"}


@pytest.mark.parametrize("text, message", [
    ("bandwidth=1..2", "unknown axis 'bandwidth'; the axes are link_bandwidth"),
    ("ranks", "give AXIS=SPEC"),
    ("ranks=", "give AXIS=SPEC"),
    ("ranks=8..2", "starts above its end"),
    ("ranks=0,2", "not positive"),
    ("compute_speed=-1..2", "not positive"),
    ("link_bandwidth=1e9..4e9:0", "0 points; give n >= 1"),
    ("link_bandwidth=1e9..4e9:x", "not an integer"),
    ("link_bandwidth=1e9..4e9:1", "one point cannot span"),
    ("batch=1.5", "not an integer"),
    ("ranks=1..2..3", "a range is a..b or a..b:n"),
    ("link_bandwidth=5furlongs", "not a number; a number of bit/s or one with a unit"),
    ("gamma=1gbit", "not a number"),
    ("compute_speed=inf", "not a number"),
])
def test_bad_specs_say_what_is_wrong(text, message):
    with pytest.raises(Deep500Error, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_sweep(text)


def test_an_axis_once_and_a_bounded_grid():
    with pytest.raises(Deep500Error, match="given twice"):
        parse_sweeps(["ranks=2,4", "ranks=8"])
    with pytest.raises(Deep500Error, match="a grid of 160000 points"):
        parse_sweeps(["link_bandwidth=1e9..4e9:400", "compute_speed=1..4:400"])


# --- what the axes change ---------------------------------------------------------------

def test_link_bandwidth_scales_the_wire_time_and_keeps_the_rest():
    machine = load_machine({**MACHINE, "network": {
        "segments": [{"min_bytes": 0, "max_bytes": 1024, "alpha_s": 1e-6,
                      "beta_s_per_byte": 1e-9},      # above the link's rate: a burst
                     {"min_bytes": 1024, "max_bytes": 65536, "alpha_s": 3e-6,
                      "beta_s_per_byte": 3e-9},
                     {"min_bytes": 65536, "max_bytes": None, "alpha_s": 5e-6,
                      "beta_s_per_byte": 2e-9}],
        "exchange_segments": [{"min_bytes": 0, "max_bytes": None, "alpha_s": 4e-6,
                               "beta_s_per_byte": 2.5e-9}]}})
    # B0 = 8 / 2e-9 = 4 Gbit/s; at 16 Gbit/s a byte's wire time drops from 2 to 0.5 ns
    faster = with_link_bandwidth(machine, 16e9)
    assert [s.beta_s_per_byte for s in faster.segments] == pytest.approx(
        [0.25e-9, 1.5e-9, 0.5e-9])
    assert faster.exchange_segments[0].beta_s_per_byte == pytest.approx(1.0e-9)
    assert [s.alpha_s for s in faster.segments] == [1e-6, 3e-6, 5e-6]
    slower = with_link_bandwidth(machine, 2e9)     # 4 ns on the wire
    assert [s.beta_s_per_byte for s in slower.segments] == pytest.approx(
        [2e-9, 5e-9, 4e-9])
    assert slower.exchange_segments[0].beta_s_per_byte == pytest.approx(4.5e-9)
    same = with_link_bandwidth(machine, 4e9)
    assert [s.beta_s_per_byte for s in same.segments] == pytest.approx(
        [s.beta_s_per_byte for s in machine.segments], rel=1e-12)
    assert faster.gamma(1 << 20) == machine.gamma(1 << 20)
    flat = with_gamma(machine, 1e-11)
    assert flat.gamma(10) == flat.gamma(1 << 30) == 1e-11
    assert flat.segments == machine.segments


def test_compute_speed_divides_the_compute_not_the_fusion_copy():
    import deep500 as d5
    from deep500.networks import create_model
    model = create_model("mlp", input_shape=(1, 8, 8), hidden=[16], classes=10,
                         loss="softmax_cross_entropy", seed=0)
    profile = d5.modelled_step_profile(model, load_machine(MACHINE), batch=8)
    fast = with_compute_speed(profile, 4.0)
    assert fast.compute_s == pytest.approx(profile.compute_s / 4)
    assert fast.update_s == pytest.approx(profile.update_s / 4)
    assert fast.fusion_s == profile.fusion_s and fast.gradient_bytes == profile.gradient_bytes
    assert with_compute_speed(profile, 1.0) is profile


# --- the grid through the CLI -----------------------------------------------------------

def test_the_json_holds_every_point_of_the_grid(swept):
    data, _ = swept
    assert data["schema"] == "deep500-predict-sweep/1" and data["machine"] == "synthetic"
    names = [axis["name"] for axis in data["axes"]]
    assert names == ["link_bandwidth", "compute_speed", "ranks", "gamma"]
    assert [axis["unit"] for axis in data["axes"]] == ["bit/s", "x", "ranks", "s/byte"]
    assert data["axes"][1]["values"] == pytest.approx([0.5, 1.0, 2.0])
    (workload,) = data["workloads"]
    assert workload["shape"] == [3, 3, 2, 2] and len(workload["points"]) == 36
    assert workload["base"]["link_bandwidth"] == pytest.approx(8e9)
    assert workload["base"]["batch"] == 8 and workload["base"]["gamma"] == 5e-10
    assert workload["slice"] == {"link_bandwidth": 8e9, "compute_speed": 1.0,
                                 "ranks": 2, "gamma": 5e-10}   # no --ranks: the middle
    coordinates = {tuple(p[n] for n in names) for p in workload["points"]}
    assert len(coordinates) == 36
    for point in workload["points"]:
        assert point["step_s"] > 0 and 0 <= point["comm_fraction"] < 1
        assert point["step_s"] >= point["compute_s"] + point["update_s"]


def _neighbours(points, axis):
    """Pairs of points that differ only in ``axis``, in its increasing order."""
    others = lambda p: tuple((k, p[k]) for k in sorted(p) if k in  # noqa: E731
                             ("link_bandwidth", "compute_speed", "ranks", "gamma", "batch")
                             and k != axis)
    lines = {}
    for point in points:
        lines.setdefault(others(point), []).append(point)
    for line in lines.values():
        line.sort(key=lambda p: p[axis])
        yield from zip(line, line[1:])


@pytest.mark.parametrize("axis", ["link_bandwidth", "compute_speed"])
def test_more_bandwidth_or_compute_speed_is_never_slower(swept, axis):
    data, _ = swept
    pairs = list(_neighbours(data["workloads"][0]["points"], axis))
    assert len(pairs) == 24
    for slower, faster in pairs:
        assert faster["step_s"] < slower["step_s"], (slower, faster)
        if axis == "link_bandwidth":
            assert faster["compute_s"] == slower["compute_s"]
        else:
            assert faster["exposed_communication_s"] == pytest.approx(
                slower["exposed_communication_s"], rel=1e-9)


def test_the_terms_move_as_the_ring_model_says(swept):
    """Ring allreduce of n bytes on p ranks: 2(p-1)/p n beta + (p-1)/p n gamma + ..."""
    data, _ = swept
    points = data["workloads"][0]["points"]
    n = points[0]["gradient_bytes"]
    at = {(p["link_bandwidth"], p["compute_speed"], p["ranks"], p["gamma"]): p
          for p in points}
    for p in (2, 8):
        # doubling the link bandwidth from B0 halves beta = 1e-9 s/byte
        saved = (at[(8e9, 1.0, p, 5e-10)]["exposed_communication_s"]
                 - at[(16e9, 1.0, p, 5e-10)]["exposed_communication_s"])
        assert saved == pytest.approx(2 * (p - 1) / p * n * 0.5e-9, rel=1e-9)
        added = (at[(8e9, 1.0, p, 5e-10)]["exposed_communication_s"]
                 - at[(8e9, 1.0, p, 2e-10)]["exposed_communication_s"])
        assert added == pytest.approx((p - 1) / p * n * 3e-10, rel=1e-9)


def test_the_plot_and_its_svg_are_written(swept):
    _, folder = swept
    assert (folder / "sweep.png").stat().st_size > 20000
    svg = (folder / "sweep.svg").read_text()
    assert "predicted step time (ms)" in svg and "link bandwidth (Gbit/s)" in svg


def test_bad_sweeps_exit_2_with_the_reason(swept, capsys):
    _, folder = swept
    recipe, machine = str(folder / "recipe.yaml"), str(folder / "machine.yaml")
    base = ["predict", recipe, "--machine", machine, "--compute", "analytic", "--plot",
            "none"]
    assert main(base + ["--sweep", "ranks=8..2"]) == 2
    assert "starts above its end" in capsys.readouterr().err
    assert main(base + ["--sweep", "speed=1..2"]) == 2
    assert "unknown axis 'speed'" in capsys.readouterr().err
    assert main(base + ["--sweep", "link_bandwidth=1e9..4e9"]) == 2
    assert "give --ranks N" in capsys.readouterr().err
    assert main(base + ["--sweep", "batch=8,16", "--ranks", "2,4"]) == 2
    assert "give one rank count" in capsys.readouterr().err
    assert main(base + ["--sweep", "batch=8,16", "--global-batch", "64"]) == 2
    assert "--global-batch" in capsys.readouterr().err
