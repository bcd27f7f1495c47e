"""``deep500 predict RECIPE --machine FILE --ranks 1,2,4,...``: strong- and weak-scaling
curves of a recipe's training, predicted by ``d5.simulate_training`` without training.

For every distinct (network, batch size per rank, threads, allreduce algorithm) of the
recipe (experiments ``distributed`` and ``training``):

1. **Compute** of one step. ``--compute measured`` (default): the recipe's model is
   profiled here, on one rank of this machine (``measure_step_profile`` at the batch
   per rank and at 4× it, combined into per-node lines in the batch size, so the
   strong-scaling batches are interpolated, not guessed). ``--compute analytic``:
   the roofline of ``cost_model`` on the machine file's peak FLOP/s and memory
   bandwidth, for a node that is not this one (no Python overheads: a lower bound).
2. **Communication**: the α-β-γ model of the allreduce algorithm on the machine
   file's network (a shipped interconnect such as ``infiniband-hdr``, or a calibrated
   file), blocking or ``--overlap``, fp32 or ``--comm-dtype``.
3. **Curves**: weak scaling keeps the recipe's batch per rank (efficiency
   T(1)/T(p)); strong scaling keeps the global batch ``--global-batch`` (default: the
   batch per rank × 64) and gives each rank G/p samples (speedup T(1)/T(p) and
   efficiency speedup/p; rank counts with G/p < 1 are left out).

Limits (docs/performance_models.md): contention-free network (no congestion, no
topology), one rank per node's network link, compute measured on this host unless
``--compute analytic``, the wait for the slowest rank bounded by the spread measured
here. A prediction at 1024 ranks is a model's statement, not a measurement.
"""
from __future__ import annotations

import json
import os
from numbers import Integral

from deep500.recipe.scaling_curves import STRONG_BATCH_FACTOR, Workload, curves
from deep500.utils.errors import Deep500Error, RecipeError
from deep500.utils.threads import resolve_threads, thread_counts

DEFAULT_RANKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


MAX_RANK_COUNTS = 10_000   # the most rank counts a progression may expand to
_ELLIPSIS = ("...", "\u2026")
_RANKS_HINT = ("e.g. 1,2,4,8 (a list), 1,2,4,...,1024 (powers of two) or 1,2,3,...,8 "
               "(every count)")


def parse_ranks(text: str) -> list[int]:
    """The rank counts of ``--ranks``, sorted and without repeats: a comma list
    (``1,2,4,8``), or a progression written with ``...`` and its last term. The terms
    before ``...`` decide which progression: equal differences are arithmetic
    (``1,2,3,...,8``, ``4,8,12,...,64``), equal whole-number ratios geometric
    (``1,2,4,...,1024``, ``1,4,16,...,4096``). The term after ``...`` is the last
    rank count, and one of the progression's terms.

    Two terms fit both when the first divides the second (``1,2,...,8``: 1..8 or
    1,2,4,8?), a progression that never equals its last term (``1,2,4,...,1000``),
    ``...`` without two terms before it or one after it, and more than one ``...``
    are Deep500Errors that say so."""
    shown = f"--ranks {_short(str(text))}"
    terms = [t.strip() for t in str(text).split(",")]
    if not any(terms):
        raise Deep500Error(f"{shown}: give rank counts separated by commas, {_RANKS_HINT}")
    dots = [i for i, t in enumerate(terms) if t in _ELLIPSIS]
    if len(dots) > 1:
        raise Deep500Error(f"{shown}: one '...' at most; {_RANKS_HINT}")
    if any(not t for t in terms):
        raise Deep500Error(f"{shown}: an empty term (two commas in a row, or a comma at "
                           f"an end); {_RANKS_HINT}")
    numbers = [_rank_count(t, shown) for t in terms if t not in _ELLIPSIS]
    if not dots:
        return sorted(set(numbers))
    at = dots[0]
    listed, last = numbers[:at], numbers[at:]
    if len(listed) < 2:
        raise Deep500Error(f"{shown}: '...' continues a progression, so give at least "
                           f"two terms before it (three where the first divides the "
                           f"second), {_RANKS_HINT}")
    if len(last) != 1:
        raise Deep500Error(f"{shown}: '...' is followed by exactly one term, the last "
                           f"rank count (e.g. ...,1024)" if not last else
                           f"{shown}: '...' is followed by the last rank count alone, "
                           f"got {len(last)} terms after it")
    return _progression(listed, last[0], shown)


def _short(text: str, most: int = 60) -> str:
    return repr(text if len(text) <= most else text[:most] + "...")


def _rank_count(term: str, shown: str) -> int:
    try:
        value = int(term)
    except ValueError:
        raise Deep500Error(f"{shown}: {_short(term)} is not a rank count; give rank counts "
                           f"separated by commas, {_RANKS_HINT}") from None
    if value < 1:
        raise Deep500Error(f"{shown}: rank counts are integers >= 1, got {value}")
    return value


def _progression(listed: list[int], last: int, shown: str) -> list[int]:
    """Expand ``listed, ..., last`` (see :func:`parse_ranks`)."""
    if any(b <= a for a, b in zip(listed, listed[1:])):
        raise Deep500Error(f"{shown}: the terms before '...' must increase, got "
                           f"{listed}")
    differences = {b - a for a, b in zip(listed, listed[1:])}
    arithmetic = len(differences) == 1
    ratios = {b // a if b % a == 0 else None for a, b in zip(listed, listed[1:])}
    geometric = len(ratios) == 1 and None not in ratios
    if arithmetic and geometric:
        a, b = listed
        raise Deep500Error(f"{shown}: {a},{b},... fits both a difference of {b - a} and a "
                           f"ratio of {b // a}; give a third term: {a},{b},{2 * b - a},..."
                           f" (arithmetic) or {a},{b},{b * (b // a)},... (geometric)")
    if not arithmetic and not geometric:
        raise Deep500Error(f"{shown}: the terms before '...' ({listed}) have neither one "
                           f"difference nor one whole-number ratio, so they continue no "
                           f"progression; {_RANKS_HINT}")
    step = differences.pop() if arithmetic else ratios.pop()
    if last < listed[-1]:
        raise Deep500Error(f"{shown}: the last rank count, {last}, is below the terms "
                           f"before '...' ({listed})")
    values, value = list(listed), listed[-1]
    while value < last:
        value = value + step if arithmetic else value * step
        values.append(value)
        if len(values) > MAX_RANK_COUNTS:
            raise Deep500Error(f"{shown}: more than {MAX_RANK_COUNTS} rank counts; take "
                               f"a larger step")
    if value != last:
        kind = (f"adding {step}" if arithmetic else f"multiplying by {step}")
        below = values[-2] if len(values) >= 2 and values[-2] < last else None
        near = (f"it goes {below}, {value}" if below is not None and value > last
                else f"its terms pass {last}")
        raise Deep500Error(f"{shown}: the progression ({kind}) never reaches {last}: "
                           f"{near}; end it on one of its terms")
    return values


def workloads(recipe, algorithm: str | None = None, threads: int | None = None) -> list:
    """The distinct workloads of a ``distributed`` or ``training`` recipe."""
    if recipe.experiment not in ("distributed", "training"):
        raise RecipeError(f"deep500 predict predicts training: recipe {recipe.path} is an "
                          f"'{recipe.experiment}' experiment; give a 'distributed' or "
                          f"'training' recipe")
    seen, result = set(), []
    for configuration in recipe.configurations():
        scheme = configuration.get("scheme") or {}
        chosen = algorithm or (scheme.get("algorithm") if isinstance(scheme, dict) else None) \
            or "ring"
        if isinstance(scheme, dict) and scheme.get("framework", "reference") != "reference" \
                and algorithm is None:
            chosen = "mpi"   # a framework's baseline reduces with its own library
        network = configuration["network"]
        # Profiled as the reference optimizer on the reference executor (step_profile),
        # whichever implementation and executor the recipe trains with: one workload.
        optimizer = {k: v for k, v in configuration["optimizer"].items()
                     if k != "implementation"}
        # the default of deep500 run: the usable CPUs shared by the ranks
        resolved = resolve_threads(threads or configuration.get("threads"),
                                   configuration.get("ranks") or 1)
        key = (repr(network), int(configuration.get("batch_size") or 32), resolved, chosen,
               repr(sorted(optimizer.items())))
        if key in seen:
            continue
        seen.add(key)
        label = (f"{getattr(network, 'label', network)}, "
                 f"{getattr(configuration['optimizer'], 'label', optimizer['type'])}, "
                 f"batch {key[1]}/rank, {key[2]} thread(s), {chosen} allreduce")
        result.append(Workload(label, network, dict(configuration["dataset"]),
                               configuration.get("loss", "softmax_cross_entropy"),
                               int(configuration.get("seed", 0)), optimizer, key[1], key[2],
                               chosen, scheme.get("segment_bytes") if isinstance(scheme, dict)
                               else None))
    return result


def _model_and_data(workload: Workload):
    from deep500.datasets import load_dataset
    from deep500.recipe.experiments.training import build_network
    options = dict(workload.dataset)
    train, _ = load_dataset(options.pop("name"), **options)
    configuration = {"network": workload.network, "seed": workload.seed,
                     "loss": workload.loss}
    return build_network(configuration, train), train


def step_profile(workload: Workload, compute: str, machine, reruns: int = 30,
                 largest_batch: int | None = None):
    """The workload's StepProfile: measured here at the batch per rank and at
    ``largest_batch`` (default 4× it; the strong-scaling global batch), combined into
    per-node lines in the batch size; or analytic."""
    import deep500 as d5
    model, train = _model_and_data(workload)
    if compute not in ("measured", "analytic"):
        raise Deep500Error(f"--compute {compute!r}: give 'measured' or 'analytic'")
    largest = int(largest_batch or 4 * workload.batch)
    if largest == workload.batch:
        largest = 4 * workload.batch
    batches = sorted({workload.batch, largest})
    if compute == "analytic":
        profiles = [d5.modelled_step_profile(model, machine, batch=b, threads=workload.threads,
                                             name=workload.label) for b in batches]
        return d5.StepProfile.combine(profiles).at(workload.batch)
    from deep500.recipe.experiments.networks import executor_factory, make_inputs
    from deep500.recipe.experiments.training import OptimizerSpec, make_optimizer
    profiles = []
    with thread_counts(workload.threads):
        for batch in batches:
            executor = executor_factory("reference")(model, "cpu")
            optimizer = make_optimizer(OptimizerSpec({**workload.optimizer,
                                                      "implementation": "reference"}),
                                       "reference", executor)
            inputs = make_inputs(model, batch, workload.seed, train.classes)
            profiles.append(d5.measure_step_profile(
                model, executor, optimizer, inputs, reruns=reruns, warmup=3, batch=batch,
                threads=workload.threads, name=workload.label, executor_name="reference"))
    return d5.StepProfile.combine(profiles).at(workload.batch)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def format_table(workload: Workload, result: dict) -> str:
    lines = [f"## {workload.label}",
             f"weak scaling ({workload.batch} samples per rank):",
             f"{'ranks':>6} {'step ms':>10} {'comm ms':>9} {'samples/s':>12} {'efficiency':>10}"]
    for row in result["weak"]:
        lines.append(f"{row['ranks']:>6} {_ms(row['step_s']):>10} "
                     f"{_ms(row['exposed_communication_s']):>9} {row['throughput']:>12.1f} "
                     f"{row['parallel_efficiency']:>10.1%}")
    lines += [f"strong scaling (global batch {result['global_batch']}):",
              f"{'ranks':>6} {'batch/rank':>10} {'step ms':>10} {'comm ms':>9} "
              f"{'speedup':>8} {'efficiency':>10}"]
    for row in result["strong"]:
        lines.append(f"{row['ranks']:>6} {row['batch_per_rank']:>10} {_ms(row['step_s']):>10} "
                     f"{_ms(row['exposed_communication_s']):>9} {row['speedup']:>8.2f} "
                     f"{row['strong_efficiency']:>10.1%}")
    return "\n".join(lines)


def plot(results: list, machine_name: str, path: str) -> list[str]:
    """Weak-scaling efficiency and strong-scaling speedup against ranks (log2 axes)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, (weak_axis, strong_axis) = plt.subplots(1, 2, figsize=(11, 4.2))
    for workload, result in results:
        weak_axis.plot([r["ranks"] for r in result["weak"]],
                       [r["parallel_efficiency"] for r in result["weak"]], "o-",
                       label=workload.label)
        strong_axis.plot([r["ranks"] for r in result["strong"]],
                         [r["speedup"] for r in result["strong"]], "o-", label=workload.label)
    top = max((r["ranks"] for _, result in results for r in result["strong"]), default=1)
    strong_axis.plot([1, top], [1, top], "k--", linewidth=0.8, label="ideal")
    for axis in (weak_axis, strong_axis):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("ranks")
        axis.grid(True, which="both", alpha=0.3)
    strong_axis.set_yscale("log", base=2)
    weak_axis.set_ylim(0, 1.05)
    weak_axis.set_ylabel("parallel efficiency T(1)/T(p)")
    weak_axis.set_title("weak scaling (batch per rank fixed)")
    strong_axis.set_ylabel("speedup T(1)/T(p)")
    strong_axis.set_title("strong scaling (global batch fixed)")
    strong_axis.legend(fontsize=7)
    figure.suptitle(f"predicted on machine '{machine_name}' (deep500 predict)", fontsize=10)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    written = [path]
    figure.savefig(path, dpi=110)
    root, ext = os.path.splitext(path)
    if ext.lower() == ".png":
        figure.savefig(root + ".svg")
        written.append(root + ".svg")
    plt.close(figure)
    return written


def check_options(threads=None, global_batch=None, plot_path=None, json_path=None) -> None:
    """Refuses, before anything is loaded or profiled, a thread count or global batch
    below 1 (an explicit 0 is not "the default") and a plot or JSON path that cannot
    be written (a folder, a missing folder)."""
    from deep500.utils.output_paths import check_output_file
    for option, value in (("--threads", threads), ("--global-batch", global_batch)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, Integral)
                                  or value < 1):
            raise Deep500Error(f"{option} {value!r}: give an integer >= 1, or leave it out "
                               f"for the default")
    for option, path in (("--plot", plot_path), ("--json", json_path)):
        if path:
            check_output_file(path, option)


def predict_recipe(recipe_path: str, machine, ranks=DEFAULT_RANKS, compute: str = "measured",
                   algorithm: str | None = None, overlap: bool = False,
                   comm_dtype: str = "float32", threads: int | None = None,
                   global_batch: int | None = None, plot_path: str | None = None,
                   json_path: str | None = None, echo=print) -> list:
    """Predict every workload of the recipe; print the tables, write the plot and the
    JSON. Returns [(Workload, curves)]."""
    check_options(threads, global_batch, plot_path, json_path)
    from deep500.recipe.schema import load_recipe
    from deep500.utils.machine import load_machine
    machine = load_machine(machine)
    recipe = load_recipe(recipe_path)
    results = []
    chosen = workloads(recipe, algorithm, threads)
    echo(f"# machine '{machine.name}' ({machine.source}); compute {compute}"
         + ("; overlapped" if overlap else "; blocking") + f"; {comm_dtype} on the wire")
    profiles = {}
    for workload in chosen:
        # Workloads that differ only in their allreduce share one profile.
        key = (repr(workload.network), repr(workload.dataset), workload.loss, workload.seed,
               repr(sorted(workload.optimizer.items())), workload.batch, workload.threads)
        if key not in profiles:
            g = int(global_batch or workload.batch * STRONG_BATCH_FACTOR)
            profiles[key] = step_profile(workload, compute, machine, largest_batch=g)
        profile = profiles[key]
        result = curves(profile, machine, workload, ranks, global_batch, overlap, comm_dtype)
        results.append((workload, result))
        echo(format_table(workload, result))
    if plot_path:
        for path in plot(results, machine.name, plot_path):
            echo(f"Plot: {path}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"machine": machine.name, "source": machine.source, "compute": compute,
                       "workloads": [{"label": w.label, **r} for w, r in results]}, f,
                      indent=1)
        echo(f"JSON: {json_path}")
    return results
