"""``deep500 predict RECIPE --machine FILE --sweep AXIS=SPEC ...``: what-if grids of a
recipe's predicted training step, as hardware and workload change (the what-if
heatmaps and curves of Catalán's thesis, Figs. 4.6 and 4.7, from PyDTNN's simulator).

For every distinct workload of the recipe (``predict.workloads``) and every point of
the cartesian product of the swept axes (``sweep_axes``: ``link_bandwidth``,
``compute_speed``, ``gamma``, ``ranks``, ``batch``), ``d5.simulate_training``
predicts one synchronous data-parallel step and its parts (compute, communication and
the part of it the step waits for, the wait for the slowest rank, update, throughput).
An axis that is not swept keeps its base value: the machine file's network and γ, the
profiled compute, the recipe's batch per rank, and ``--ranks N`` (or the recipe's one
rank count).

The compute is profiled once per workload as ``deep500 predict`` profiles it
(``predict.step_profile``: measured here, or ``--compute analytic``), at the smallest
and largest batch of the sweep and the recipe, so every batch of the grid is read off
per-node lines in the batch size.

Written: a table per swept axis (the others at their slice values, below), ``--json
FILE`` with every point, and ``--plot FILE``: a heatmap of step time per pair of swept
axes and a line panel per axis (``report.sweep_plots``). A swept axis is sliced at
its value nearest its base value (in log scale), or at its middle value when it has
no base (``ranks`` swept with no ``--ranks N``).
"""
from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import replace

from deep500.recipe.sweep_axes import (AXES, base_link_bandwidth, parse_sweeps,
                                       with_compute_speed, with_gamma, with_link_bandwidth)
from deep500.utils.errors import Deep500Error

SCHEMA = "deep500-predict-sweep/1"
# the parts of a SimulatedStep each point keeps (seconds, unless named otherwise)
PARTS = ("step_s", "compute_s", "forward_s", "backward_s", "other_compute_s",
         "communication_s", "exposed_communication_s", "straggler_s", "update_s",
         "throughput", "parallel_efficiency", "gradient_bytes", "buckets")


def base_ranks(ranks, recipe, sweeps) -> int | None:
    """The rank count of the points where ``ranks`` is not swept: ``--ranks N``, else
    the recipe's one rank count; None where ``ranks`` is swept and neither names one."""
    swept = any(s.axis.name == "ranks" for s in sweeps)
    if ranks is not None:
        if len(ranks) != 1:
            raise Deep500Error(f"--ranks {','.join(map(str, ranks))} with --sweep: give one "
                               f"rank count (--ranks 64), or sweep them (--sweep "
                               f"ranks={','.join(map(str, ranks))})")
        return ranks[0]
    counts = recipe.rank_counts()
    if counts and len(counts) == 1:
        return int(counts[0])
    if swept:
        return None
    raise Deep500Error("--sweep without a ranks axis needs the rank count of every point: "
                       "give --ranks N (e.g. --ranks 64) or --sweep ranks=2,8,64")


def _base_values(machine, profile, workload, ranks, sweeps) -> dict:
    """Every axis's base value (None where it has none: ranks unset, a network without
    a bandwidth when link_bandwidth is not swept)."""
    swept = {s.axis.name for s in sweeps}
    try:
        bandwidth = base_link_bandwidth(machine)
    except Deep500Error:
        if "link_bandwidth" in swept:
            raise
        bandwidth = None
    # the γ the allreduce of all gradients is priced at (collectives.pricing.step)
    return {"link_bandwidth": bandwidth, "compute_speed": 1.0,
            "gamma": machine.gamma(max(profile.gradient_bytes, 1)),
            "ranks": ranks, "batch": workload.batch}


def slice_values(sweeps, base: dict) -> dict:
    """Where each swept axis is held while others vary (the module docstring)."""
    chosen = {}
    for sweep in sweeps:
        values, target = sweep.values, base.get(sweep.axis.name)
        if target is None:
            chosen[sweep.axis.name] = values[(len(values) - 1) // 2]
        else:
            chosen[sweep.axis.name] = min(values, key=lambda v: abs(math.log(v / target)))
    return chosen


def sweep_grid(profile, machine, workload, sweeps, base: dict, overlap: bool = False,
               comm_dtype: str = "float32") -> list[dict]:
    """One dict per point of the grid (``itertools.product`` order of ``sweeps``): the
    swept axes' values, ``PARTS`` of the simulated step and ``comm_fraction``
    (exposed communication / step time)."""
    import deep500 as d5
    names = [s.axis.name for s in sweeps]
    machines, profiles, points = {}, {}, []
    for combo in itertools.product(*(s.values for s in sweeps)):
        point = dict(zip(names, combo))
        value = {**base, **point}
        key = (point.get("link_bandwidth"), point.get("gamma"))
        if key not in machines:
            m = machine if key[1] is None else with_gamma(machine, key[1])
            machines[key] = m if key[0] is None else with_link_bandwidth(m, key[0])
        key_p = (int(value["batch"]), float(value["compute_speed"]))
        if key_p not in profiles:
            profiles[key_p] = with_compute_speed(profile.at(key_p[0]), key_p[1])
        step = d5.simulate_training(profiles[key_p], machines[key], int(value["ranks"]),
                                    algorithm=workload.algorithm, overlap=overlap,
                                    comm_dtype=comm_dtype,
                                    segment_bytes=workload.segment_bytes).to_dict()
        row = {**point, **{part: step[part] for part in PARTS}}
        row["comm_fraction"] = (step["exposed_communication_s"] / step["step_s"]
                                if step["step_s"] > 0 else 0.0)
        points.append(row)
    return points


def axis_line(points, sweeps, name: str, slices: dict) -> list[dict]:
    """The points where every swept axis but ``name`` is at its slice value."""
    others = [s.axis.name for s in sweeps if s.axis.name != name]
    return [p for p in points if all(p[o] == slices[o] for o in others)]


def format_tables(label: str, points, sweeps, base: dict, slices: dict) -> str:
    from deep500.report.sweep_plots import value_text
    lines = [f"## {label}",
             "base: " + ", ".join(f"{n} {value_text(AXES[n].unit, v)}"
                                  for n, v in base.items() if v is not None)]
    for sweep in sweeps:
        name = sweep.axis.name
        held = [f"{o} {value_text(AXES[o].unit, v)}" for o, v in slices.items() if o != name]
        lines.append(f"{name} swept" + (f" ({', '.join(held)})" if held else "") + ":")
        lines.append(f"{name:>16} {'step ms':>10} {'compute ms':>10} {'comm ms':>9} "
                     f"{'wait ms':>8} {'update ms':>9} {'comm %':>7}")
        for p in axis_line(points, sweeps, name, slices):
            lines.append(f"{value_text(sweep.axis.unit, p[name]):>16} "
                         f"{p['step_s'] * 1e3:>10.3f} {p['compute_s'] * 1e3:>10.3f} "
                         f"{p['exposed_communication_s'] * 1e3:>9.3f} "
                         f"{p['straggler_s'] * 1e3:>8.3f} {p['update_s'] * 1e3:>9.3f} "
                         f"{p['comm_fraction']:>7.1%}")
    return "\n".join(lines)


def _profile(workload, compute: str, machine, sweeps):
    """The workload's profile with batch lines that span every batch of the grid."""
    from deep500.recipe.predict import step_profile
    batches = {workload.batch}
    for sweep in sweeps:
        if sweep.axis.name == "batch":
            batches.update(sweep.values)
    low, high = min(batches), max(batches)
    return step_profile(replace(workload, batch=low), compute, machine,
                        largest_batch=high if high > low else None)


def _plot_paths(path: str, count: int) -> list[str]:
    root, ext = os.path.splitext(path)
    return [path] + [f"{root}-{i + 1}{ext}" for i in range(1, count)]


def predict_sweep(recipe_path: str, machine, sweep_texts, ranks=None,
                  compute: str = "measured", algorithm: str | None = None,
                  overlap: bool = False, comm_dtype: str = "float32",
                  threads: int | None = None, plot_path: str | None = None,
                  json_path: str | None = None, echo=print) -> dict:
    """Sweep every workload of the recipe over the grid; print the tables, write the
    plot(s) and the JSON. Returns the JSON's content."""
    from deep500.recipe.predict import check_options, workloads
    from deep500.recipe.schema import load_recipe
    from deep500.utils.machine import load_machine
    check_options(threads, None, plot_path, json_path)
    sweeps = parse_sweeps(sweep_texts)
    machine = load_machine(machine)
    recipe = load_recipe(recipe_path)
    count = base_ranks(ranks, recipe, sweeps)
    chosen = workloads(recipe, algorithm, threads)
    echo(f"# machine '{machine.name}' ({machine.source}); compute {compute}"
         + ("; overlapped" if overlap else "; blocking") + f"; {comm_dtype} on the wire; "
         + " x ".join(f"{len(s.values)} {s.axis.name}" for s in sweeps) + " points")
    results, profiles = [], {}
    for workload in chosen:
        key = (repr(workload.network), repr(workload.dataset), workload.loss, workload.seed,
               repr(sorted(workload.optimizer.items())), workload.batch, workload.threads)
        if key not in profiles:
            profiles[key] = _profile(workload, compute, machine, sweeps)
        profile = profiles[key]
        base = _base_values(machine, profile, workload, count, sweeps)
        slices = slice_values(sweeps, base)
        points = sweep_grid(profile, machine, workload, sweeps, base, overlap, comm_dtype)
        echo(format_tables(workload.label, points, sweeps, base, slices))
        results.append({"label": workload.label, "algorithm": workload.algorithm,
                        "threads": workload.threads, "profile_source": profile.source,
                        "base": base, "slice": slices,
                        "shape": [len(s.values) for s in sweeps], "points": points})
    data = {"schema": SCHEMA, "machine": machine.name, "machine_source": machine.source,
            "compute": compute, "overlap": bool(overlap), "comm_dtype": comm_dtype,
            "axes": [s.to_dict() for s in sweeps], "workloads": results}
    if plot_path:
        from deep500.report.sweep_plots import sweep_figure
        for path, workload in zip(_plot_paths(plot_path, len(results)), results):
            also = "svg" if os.path.splitext(path)[1].lower() == ".png" else None
            sweep_figure(path, data, workload, also=also)
            echo(f"Plot: {path}")
    if json_path:
        os.makedirs(os.path.dirname(os.path.abspath(json_path)) or ".", exist_ok=True)
        with open(json_path, "w") as f:
            json.dump(data, f, indent=1)
        echo(f"JSON: {json_path}")
    return data
