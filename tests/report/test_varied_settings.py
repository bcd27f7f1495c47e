"""Every varied setting labels its rows and plot series: a recipe varying threads and
seed next to framework and operator gets one row and one bar per configuration."""
import copy
import json
import textwrap

from deep500.recipe import run_recipe
from deep500.results.files import read_results
from deep500.report import write_reports
from deep500.report.level0 import gflops_ci
from deep500.report.records import distinct_labels, summary, varied_keys
from deep500.report.tables import fmt_number
from tests.report.conftest import column, copy_run, svg_legend_texts, table

SETTINGS = [f"threads={t}, seed={s}" for s in (0, 1) for t in (1, 2)]


def test_every_operator_configuration_has_its_own_row(operators_run, tmp_path):
    run = copy_run(operators_run, tmp_path / "run")
    write_reports(str(run))
    records = read_results(str(run))
    assert len(records) == 16 and all(r["kind"] == "measurement" for r in records)
    header, rows = table((run / "report.md").read_text(), "Level 0 — operators")
    assert header[:3] == ["Operator", "Framework", "Settings"]
    shown = [tuple(row[:3]) for row in rows]
    assert len(shown) == 16 and len(set(shown)) == 16
    expected = {(r["configuration"]["operator"]["label"], r["configuration"]["framework"],
                 f"threads={r['configuration']['threads']}, "
                 f"seed={r['configuration']['seed']}") for r in records}
    assert set(shown) == expected
    assert {row[2] for row in rows} == set(SETTINGS)


def test_every_series_is_plotted_and_named(operators_run, tmp_path):
    run = copy_run(operators_run, tmp_path / "run")
    write_reports(str(run))
    series = {f"{framework} · {setting}" for framework in ("reference", "pytorch")
              for setting in SETTINGS}
    for plot in ("level0_time.svg", "level0_gflops.svg"):
        legend = svg_legend_texts(run / "plots" / plot)
        assert sorted(legend) == sorted(series), plot
    # the PNGs are what report.html embeds
    html = (run / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2
    assert "plots/level0_time.svg" in html


def test_gflops_carry_the_time_ci(operators_run, tmp_path):
    run = copy_run(operators_run, tmp_path / "run")
    write_reports(str(run))
    records = [r for r in read_results(str(run))
               if r["configuration"]["operator"]["op_type"] == "Gemm"]
    markdown = (run / "report.md").read_text()
    cells = column(markdown, "Level 0 — operators", "GFLOP/s [95% CI]")
    for record in records:
        flops = summary(record, "FLOPs", "flops")
        low, high = gflops_ci(record)
        assert flops == 2 * 32 * 16 * 8
        assert low == flops / summary(record, "WallclockTime", "ci_high") / 1e9
        assert high == flops / summary(record, "WallclockTime", "ci_low") / 1e9
        rate = summary(record, "FLOPs", "gflops_per_s")
        assert low <= rate * (1 + 1e-12) and rate <= high * (1 + 1e-12)
        assert f"{fmt_number(rate)} [{fmt_number(low)}, {fmt_number(high)}]" in cells
    assert column(markdown, "Level 0 — operators", "GFLOP/s [95% CI]").count("n/a") == 8


def test_varied_keys_come_from_records_and_the_recipe(operators_run):
    records = read_results(str(operators_run))
    manifest = json.loads((operators_run / "manifest.json").read_text())
    assert varied_keys(records) == ["operator", "seed", "framework", "threads"]
    # one record left (a crash): the recipe still says what it varied
    assert varied_keys(records[:1], manifest) == ["framework", "operator", "threads", "seed"]
    assert varied_keys(records[:1]) == []


def test_configurations_a_label_cannot_tell_apart_get_the_differing_field(operators_run):
    """A label that leaves out what differs (here an attribute) gets the differing
    nested field appended, so no two configurations share a row."""
    record = read_results(str(operators_run))[0]
    other = copy.deepcopy(record)
    other["configuration"]["operator"]["attributes"] = {"alpha": 0.5}
    same = copy.deepcopy(record)
    labels = distinct_labels([record, other, same],
                             lambda r: r["configuration"]["operator"]["label"])
    assert labels[id(record)] == labels[id(same)] != labels[id(other)]
    assert labels[id(other)].endswith("operator.attributes.alpha=0.5")
    assert labels[id(record)].endswith("operator.attributes.alpha=unset")


def test_networks_varied_threads(tmp_path):
    recipe = tmp_path / "networks.yaml"
    recipe.write_text(textwrap.dedent("""
        name: networks-threads
        experiment: networks
        fixed: {batch_size: 4, seed: 0}
        mutable:
          executor: [reference]
          network: [{model: mlp, hidden: [16]}]
          threads: [1, 2]
        metrics:
          WallclockTime: {reruns: 3, warmup: 1}
    """))
    run_recipe(str(recipe), str(tmp_path / "run"), progress=False)
    markdown = (tmp_path / "run" / "report.md").read_text()
    header, rows = table(markdown, "Level 1 — networks")
    assert header[:3] == ["Network", "Executor", "Settings"]
    assert [row[2] for row in rows] == ["threads=1", "threads=2"]
    assert column(markdown, "Level 1 — networks", "Reruns") == ["3 (+1 warm-up)"] * 2
    legend = svg_legend_texts(tmp_path / "run" / "plots" / "level1_time.svg")
    assert sorted(legend) == ["reference · threads=1", "reference · threads=2"]
