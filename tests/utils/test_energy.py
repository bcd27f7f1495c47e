"""d5.Energy: joules per call from the powercap/RAPL counters, checked on a fake sysfs
tree (counter arithmetic, wrap-around, which zones are summed), and "not available:
<reason>" where the counters cannot be read (this machine has no powercap folder;
permission denied; no zone); in a recipe's metrics and the report's table."""
import os
import textwrap

import pytest

import deep500 as d5
from deep500.utils import energy
from deep500.utils.metric import run_measured
from deep500.utils.energy import Energy, rapl_zones

RANGE = 262_143_328_850   # max_energy_range_uj of a real package zone


def zone(root, folder, name, value, max_range=RANGE):
    path = root / folder
    path.mkdir()
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{value}\n")
    if max_range is not None:
        (path / "max_energy_range_uj").write_text(f"{max_range}\n")
    return path


def set_counter(path, value):
    (path / "energy_uj").write_text(f"{value}\n")


@pytest.fixture
def sysfs(tmp_path):
    """Two packages, each with a core and a DRAM subzone, and a platform (psys) zone."""
    root = tmp_path / "powercap"
    root.mkdir()
    (root / "intel-rapl").mkdir()   # the control type folder the kernel has too
    zones = {"p0": zone(root, "intel-rapl:0", "package-0", 1_000_000),
             "core0": zone(root, "intel-rapl:0:0", "core", 500_000),
             "dram0": zone(root, "intel-rapl:0:1", "dram", 100),
             "p1": zone(root, "intel-rapl:1", "package-1", RANGE - 300_000),
             "psys": zone(root, "intel-rapl:2", "psys", 7)}
    return root, zones


def test_package_zones_are_summed_with_wrap_around(sysfs):
    root, zones = sysfs
    metric = Energy(root=str(root))
    assert metric.available and metric.reason is None
    assert [z.name for z in metric.zones if z.counted] == ["package-0", "package-1"]
    metric.begin()
    set_counter(zones["p0"], 3_500_000)          # +2.5 J
    set_counter(zones["p1"], 200_000)            # wrapped: +0.3 J to the range, +0.2 J
    set_counter(zones["core0"], 1_500_000)       # +1 J, not summed (inside package-0)
    set_counter(zones["dram0"], 400_100)         # +0.4 J, kept apart
    set_counter(zones["psys"], 10_000_007)       # +10 J, holds the packages: not summed
    metric.end()
    result = metric.measure()
    summary = result.summary
    assert summary["available"] is True and result.unit == "J"
    assert summary["status"] == "measured: RAPL package-0, package-1"
    assert result.value == summary["joules_per_call"] == pytest.approx(3.0)
    assert result.samples == [pytest.approx(3.0)]
    assert summary["wraps"] == 1 and summary["n"] == 1
    assert summary["zones"] == pytest.approx({"package-0": 2.5, "core": 1.0, "dram": 0.4,
                                              "package-1": 0.5, "psys": 10.0})
    assert summary["counted"] == ["package-0", "package-1"]
    assert summary["watts"] > 0 and set(summary) == set(Energy.fields)
    assert result.conditions["energy_source"] == "RAPL package-0, package-1"


def test_calls_in_a_measured_loop(sysfs):
    """With a timer (innermost) over 5 runs, each run adding 0.1 J to package-0."""
    root, zones = sysfs
    for name in ("p1", "core0", "dram0", "psys"):
        os.remove(zones[name] / "energy_uj")
    state = {"uj": 1_000_000}

    def call():
        state["uj"] += 100_000
        set_counter(zones["p0"], state["uj"])
    metric, timer = Energy(root=str(root)), d5.WallclockTime(reruns=5, warmup=0)
    run_measured(call, [timer, metric])
    result = metric.measure()
    assert result.summary["n"] == 5 and result.value == pytest.approx(0.1)
    assert result.samples == [pytest.approx(0.1)] * 5
    assert result.summary["total_joules"] == pytest.approx(0.5)
    # runs this short are quantised by the counters' update interval: said
    assert "~1 ms update interval" in result.warnings[0]
    metric.reset()
    assert metric.measure().summary["status"] == ("not available: no run of the measured "
                                                  "region was recorded")


def test_top_level_zones_without_package_names_are_summed_but_psys(tmp_path):
    zone(tmp_path, "intel-rapl:0", "cpu", 10)
    zone(tmp_path, "intel-rapl:1", "psys", 10)
    zones, reason = rapl_zones(str(tmp_path))
    assert reason is None and [(z.name, z.counted) for z in zones] == [("cpu", True),
                                                                      ("psys", False)]


def test_a_counter_that_goes_back_without_a_range_is_not_guessed(tmp_path):
    path = zone(tmp_path, "intel-rapl:0", "package-0", 5_000, max_range=None)
    metric = Energy(root=str(tmp_path))
    metric.begin()
    set_counter(path, 1_000)
    metric.end()
    summary = metric.measure().summary
    assert summary["available"] is False and summary["joules_per_call"] is None
    assert "went back" in summary["status"] and summary["status"].startswith("not available")


def test_not_available_here_says_why():
    """This VM has no /sys/class/powercap; a machine with readable counters measures."""
    metric = Energy()
    result = metric.measure()
    if os.path.isdir(energy.POWERCAP) and metric.available:
        pytest.skip("this machine's RAPL counters are readable")
    summary = result.summary
    assert summary["available"] is False and result.value is None
    assert summary["status"] == f"not available: {metric.reason}"
    if not os.path.isdir(energy.POWERCAP):
        assert metric.reason.startswith("no /sys/class/powercap (no powercap driver")
    assert repr(metric).startswith("Energy(not available: ")
    # the protocol still runs: begin and end do nothing, measure says why
    metric.begin(), metric.end()
    assert metric.measure().summary["status"].startswith("not available: ")


def test_permission_denied_and_no_zone_say_so(sysfs, tmp_path, monkeypatch):
    root, _ = sysfs

    def refuse(path):
        raise PermissionError(13, "Permission denied", path)
    monkeypatch.setattr(energy, "read_counter", refuse)
    summary = Energy(root=str(root)).measure().summary
    assert summary["status"].startswith(
        f"not available: permission denied reading {root}/intel-rapl:0/energy_uj (RAPL "
        f"counters are readable by root only")
    monkeypatch.undo()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert Energy(root=str(empty)).reason.startswith("no RAPL zone")
    assert Energy(root=str(tmp_path / "absent")).reason.startswith(
        f"no {tmp_path / 'absent'}")


OPERATORS = textwrap.dedent("""
    name: energy
    fixed: {framework: reference, dtype: float32, device: cpu, seed: 0, threads: 1}
    mutable:
      operator: [{op: Relu, shape: [64, 64]}]
    metrics: {WallclockTime: {reruns: 5, warmup: 1}, Energy: {}}
""")


def test_a_recipe_records_it_and_the_table_shows_it(tmp_path, monkeypatch):
    from deep500.recipe import run_recipe
    from deep500.report import level0
    from deep500.report.reading import report_records
    path = tmp_path / "energy.yaml"
    path.write_text(OPERATORS)
    run = tmp_path / "run"
    run_recipe(str(path), str(run), argv=["deep500", "run"], progress=False,
               write_report=False)
    (record,) = [r for r in report_records(str(run)) if r.get("result")]
    (entry,) = [m for m in record["result"]["metrics"] if m["metric"] == "Energy"]
    here = Energy()
    if here.available:
        assert entry["summary"]["available"] is True and entry["summary"]["n"] == 6
    else:
        assert entry["summary"]["status"] == f"not available: {here.reason}"
    monkeypatch.setattr(level0, "_plots", lambda *a, **k: [])
    (table,) = level0.build([record], str(run))["tables"]
    cell = table.rows[0][table.columns.index("Energy per call")]
    if not here.available:
        assert cell == "not available" and f"Energy not available: {here.reason}" \
            in table.note
    # a measured record's cell: joules per call and the mean power
    measured = {**record, "result": {**record["result"], "metrics": [
        {"metric": "Energy", "summary": {"available": True, "joules_per_call": 0.0123,
                                         "watts": 41.0, "status": "measured: RAPL package-0"},
         "warnings": []}]}}
    (table,) = level0.build([measured], str(run))["tables"]
    assert table.rows[0][table.columns.index("Energy per call")] == "12.3 mJ (41 W)"


def test_networks_recipes_take_it_and_training_recipes_do_not(tmp_path):
    from deep500.recipe.schema import load_recipe
    from deep500.utils.errors import RecipeError
    path = tmp_path / "nets.yaml"
    path.write_text(textwrap.dedent("""
        experiment: networks
        fixed: {executor: reference, network: {model: mlp, input_shape: [8], hidden: [4]}}
        metrics: {WallclockTime: {}, Energy: {}}
    """))
    assert "Energy" in load_recipe(str(path)).metric_params
    path.write_text(textwrap.dedent("""
        experiment: training
        fixed: {executor: reference, network: {model: mlp}, optimizer: {type: sgd}}
        metrics: {Energy: {}}
    """))
    with pytest.raises(RecipeError, match="unknown metric 'Energy' for an 'training'"):
        load_recipe(str(path))
