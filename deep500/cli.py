"""The ``deep500`` command (also ``python -m deep500``).

    deep500 run RECIPE [--out DIR] [--np N [--hostfile FILE]] [--machine FILE]
                       [--remeasure-interfered [N]] [--select TERMS]
                                     run a recipe, write results and a report; with
                                     --np, on N MPI ranks (re-run under mpirun, given
                                     the MPICH hostfile FILE if any); a recipe with
                                     'ranks' (a grid of rank counts) launches one
                                     mpirun job per count itself (no --np; --hostfile
                                     goes to each job); with
                                     --remeasure-interfered, configurations measured
                                     while other processes used the CPU are measured
                                     again (up to N times, default 2); with
                                     --machine, the experiments read that machine
                                     file (the manifest records it)
    deep500 report DIR [--per-seed] [--figure-format svg|pdf|none] [--mlperf]
                       [--samples violin|histogram]
                                     rebuild the report of a run folder (with --mlperf,
                                     also MLPerf-style logs of its training runs; with
                                     --samples, raw times per call drawn too)
    deep500 runs [--db PATH] [--add DIR...]
                                     list the runs stored in the results database
    deep500 compare A B [--fail-above 5%] [--json]
                                     compare two runs (folders or run ids): ratio B/A
                                     of each configuration with a nonparametric CI
                                     (exit status: deep500.store.gate)
    deep500 history --config FILTER [--metric M.F] [--out history.html]
                                     one configuration across git revisions (HTML):
                                     every run, interference marked, steps found
    deep500 history --all [--out history-site]
                                     an index page of every configuration's history
    deep500 history --run A..B RECIPE [--config FILTER | --all]
                                     run RECIPE at each commit of A..B first
    deep500 bisect RECIPE --good A --bad B --config FILTER
                                     the commit where a configuration got slower
    deep500 info [--json] [--frameworks]
                                     software versions and hardware (with
                                     --frameworks, PyTorch's and TensorFlow's threads)
    deep500 calibrate --out machine.yaml [--np 2 | --no-network] [--quick]
                                     measure this machine's alpha, beta, gamma, memory
                                     bandwidth, peak FLOP/s and, on 2+ ranks, each
                                     allreduce's per-call overhead into a machine file
    deep500 predict RECIPE --machine FILE [--ranks 1,2,4,...] [--compute measured|analytic]
                                     strong- and weak-scaling curves of the recipe's
                                     training, predicted without training (printed and
                                     plotted)
    deep500 conformance [...]        run ONNX's node tests on the executors
    deep500 cluster exec --cluster nodes=2,rate=1gbit -- mpirun -np 2 PROGRAM
                                     run any MPI program in an emulated cluster (network
                                     namespaces, tc links, MPICH over TCP); also
                                     'deep500 run/calibrate --cluster ...', and
                                     'deep500 cluster [--cleanup]' lists (removes) the
                                     clusters left by killed launchers
    deep500 compile SOURCE --name N --inputs float32:8x16 --outputs float32:8
                                     build a C++ operator ahead of time
    deep500 build-glue [--framework pytorch|tensorflow]
                                     build Deep500's framework glue libraries ahead of
                                     time (otherwise built on first use)

Exit status: 0 all measured and accepted; 1 some configuration failed to run or missed
an acceptance threshold (results and report are still written), or, with --baseline
and --fail-above, a configuration significantly slower than the baseline (as for
``deep500 compare``); 2 bad input (recipe, arguments, a run folder in use or not empty
without --append, a baseline that holds none of the recipe's configurations), nothing
run; 3 with --baseline and --fail-above, none judged slower but some configuration not
judged (measured under interference, or too few samples: ``deep500.store.gate``); 124 a
configuration ran past the recipe's timeout; 130 and 143 stopped by SIGINT and SIGTERM
(the manifest says interrupted).

Every ``deep500 run`` also stores the run (rank 0, when it ends, however it ends) in
the results database (``--db``, else ``$DEEP500_DB``, else ``results/deep500.db``; see
``docs/results_store.md``).

``deep500 run --out DIR`` wants a new or empty folder and holds it for as long as it
runs; ``--append`` adds the run to a folder as a new session.

Under ``mpirun -np N deep500 run ...`` (or ``deep500 run --np N ...``, which runs the
command under the ``mpirun`` beside the Python interpreter and stays to finish, store
and report the run however the job ends: ``deep500.recipe.launcher``) every rank runs
the recipe and rank 0 alone writes the run's records. A recipe error stops every rank with
exit status 2 (every rank reads the same file, so rank 0 alone prints it); any other
failure on one rank stops them all (``guarded_main``), leaving what was written.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from deep500.utils.errors import Deep500Error


def _np_launch(ranks: int | None, hostfile: str | None = None) -> list | None:
    """Check ``--np ranks`` (and ``--hostfile``) and return ``mpirun``'s arguments for
    launching the run on the ranks (a checked MPICH hostfile, ``read_hostfile``, given
    as ``-f FILE``; the ranks, which mpirun already placed, do not read it again: on a
    cluster it may exist only where ``deep500 run`` was started), or None when this
    process is already a rank or one rank runs here."""
    from deep500.lv3_distributed.mpi_launch import in_mpi_world, read_hostfile
    if ranks is None:
        raise Deep500Error(f"--hostfile {hostfile}: give the number of ranks too, "
                           f"'deep500 run --np N --hostfile {hostfile} RECIPE'")
    if ranks < 1:
        raise Deep500Error(f"--np {ranks}: the number of ranks is at least 1")
    if in_mpi_world():
        from deep500.lv3_distributed.mpi_launch import world_communicator
        world = world_communicator()
        size = world.Get_size() if world is not None else 1
        if size != ranks:
            raise Deep500Error(f"--np {ranks}, but mpirun started {size} rank(s); give "
                               f"one of the two (mpirun -np {ranks} deep500 run RECIPE, or "
                               f"deep500 run --np {ranks} RECIPE)")
        return None
    mpirun_args = []
    if hostfile is not None:
        read_hostfile(hostfile)
        mpirun_args = ["-f", os.path.abspath(hostfile)]
    return mpirun_args if ranks > 1 else None


def _recipe_of(args):
    """The checked recipe ``args`` name, with ``--machine`` and ``--select`` applied."""
    from deep500.recipe.runner import load_run_recipe
    return load_run_recipe(args.recipe, args.machine, getattr(args, "select", None))


def _run_ranks(args, comm):
    """Every rank checks the recipe and the ranks agree on the outcome (an error is
    raised on every rank alike), then runs it; a failure on one rank while running stops
    them all. Returns the RunSummary."""
    from deep500.lv3_distributed.mpi_launch import guarded_main
    from deep500.recipe import run_recipe
    from deep500.recipe.rank_grid import check_launch
    try:
        check_launch(_recipe_of(args), comm.Get_size())
        problem = None
    except Deep500Error as exc:
        problem = str(exc)
    problems = comm.allgather(problem)
    if any(problems):
        first = next(r for r, p in enumerate(problems) if p)
        differs = any(p != problems[first] for p in problems)
        raise Deep500Error(problems[first] + (f" (on rank {first}; the ranks disagree)"
                                              if differs else ""))
    from deep500.results.files import RunFolderError
    with guarded_main(comm, agreed=(RunFolderError,)):  # raised by every rank alike
        return run_recipe(args.recipe, args.out, argv=sys.argv, progress=not args.quiet,
                          remeasure_interfered=args.remeasure_interfered,
                          append=args.append, database=_database(args),
                          machine=args.machine, select=args.select)


def _grid_hostfile(args) -> list:
    """``--hostfile FILE`` without ``--np``: for a recipe with ``ranks`` (a rank grid,
    whose every mpirun job is given ``-f FILE``), the checked file as mpirun's
    arguments; otherwise the number of ranks is missing (a Deep500Error)."""
    from deep500.lv3_distributed.mpi_launch import in_mpi_world, read_hostfile
    from deep500.recipe.runner import load_run_recipe
    if in_mpi_world() or _recipe_of(args).rank_counts() is None:
        _np_launch(None, args.hostfile)  # raises: give --np
    read_hostfile(args.hostfile)
    return ["-f", os.path.abspath(args.hostfile)]


def _predict(args) -> int:
    from deep500.recipe.predict import DEFAULT_RANKS, parse_ranks, predict_recipe
    if args.sweep:
        from deep500.recipe.predict_sweep import predict_sweep
        if args.global_batch is not None:
            raise Deep500Error("--global-batch sets the strong-scaling curves' batch; with "
                               "--sweep give the batch per rank as an axis: --sweep "
                               "batch=16,64,256")
        predict_sweep(args.recipe, args.machine, args.sweep,
                      None if args.ranks is None else parse_ranks(args.ranks),
                      compute=args.compute, algorithm=args.algorithm, overlap=args.overlap,
                      comm_dtype=args.comm_dtype, threads=args.threads,
                      plot_path=None if args.plot == "none" else args.plot,
                      json_path=args.json)
        return 0
    ranks = DEFAULT_RANKS if args.ranks is None else parse_ranks(args.ranks)
    predict_recipe(args.recipe, args.machine, ranks, compute=args.compute,
                   algorithm=args.algorithm, overlap=args.overlap,
                   comm_dtype=args.comm_dtype, threads=args.threads,
                   global_batch=args.global_batch,
                   plot_path=None if args.plot == "none" else args.plot,
                   json_path=args.json)
    return 0


def _database(args) -> str:
    from deep500.store import default_path
    return args.db or default_path()


def _run_launched(args):
    """Run the recipe here, or launch it under mpirun and finish it here (``--np``, a
    rank grid)."""
    from deep500.lv3_distributed.mpi_launch import world_communicator
    from deep500.recipe import run_recipe
    mpirun_args = ranks = None
    if args.np is None and args.hostfile is not None:
        mpirun_args = _grid_hostfile(args)
    elif args.np is not None or args.hostfile is not None:
        mpirun_args = _np_launch(args.np, args.hostfile)
        ranks = args.np if mpirun_args is not None else None
    comm = world_communicator()
    if comm is None and args.np is None:
        from deep500.recipe.single_rank_notice import say_single_rank
        say_single_rank(_recipe_of(args))
    if comm is None:
        return run_recipe(args.recipe, args.out, argv=sys.argv, progress=not args.quiet,
                          remeasure_interfered=args.remeasure_interfered,
                          append=args.append, database=_database(args),
                          machine=args.machine, mpirun_args=mpirun_args, ranks=ranks,
                          select=args.select)
    return _run_ranks(args, comm)


def _recipe_cluster(path: str):
    """The recipe's ``cluster:`` (a ClusterSpec), read ahead of the run by the process
    that builds the cluster; None when it has none or cannot be read (the run then
    reports the recipe's problem as usual)."""
    from deep500.lv3_distributed.cluster import cluster_from_mapping
    from deep500.recipe.recipe_yaml import read_recipe_yaml
    from deep500.utils.errors import RecipeError
    try:
        raw = read_recipe_yaml(path)  # bounded: a hostile recipe is refused at once
    except RecipeError:
        return None
    if not isinstance(raw, dict) or raw.get("cluster") is None:
        return None
    return cluster_from_mapping(raw["cluster"], f"{path}: cluster")


def _cluster_for(args, recipe_cluster=None):
    """The emulated cluster a command runs its MPI jobs in (``--cluster``, else the
    recipe's ``cluster:``), as a context; a null context when there is none, or when
    this process is already one of its ranks."""
    import contextlib
    from deep500.lv3_distributed.cluster import (cluster_description, emulated_cluster,
                                                 parse_cluster)
    from deep500.lv3_distributed.mpi_launch import in_mpi_world
    text = getattr(args, "cluster", None)
    if text is None and recipe_cluster is None:
        return contextlib.nullcontext()
    if in_mpi_world():
        if cluster_description() is None:
            raise Deep500Error("--cluster (or a recipe's 'cluster:') starts mpirun inside "
                               "the emulated cluster itself; run 'deep500 ... --np N "
                               "--cluster ...' without mpirun around it")
        return contextlib.nullcontext()  # a rank of the cluster: it is running
    if args.np is None and getattr(args, "recipe", None) is not None and \
            _rank_counts(args) is None:
        raise Deep500Error("an emulated cluster runs MPI ranks: give --np N (or a recipe "
                           "with 'ranks'), e.g. deep500 run --np 2 --cluster "
                           "nodes=2,rate=1gbit RECIPE")
    if getattr(args, "hostfile", None) is not None:
        raise Deep500Error("--cluster places the ranks on the emulated cluster's nodes; "
                           "give --cluster or --hostfile, not both")
    spec = parse_cluster(text) if text is not None else recipe_cluster
    if args.np is None and getattr(args, "recipe", None) is not None and \
            len(_rank_counts(args) or ()) > 1:
        # a grid of several rank counts: each part starts a cluster of its own size
        from deep500.recipe.part_cluster import clusters_per_part
        return clusters_per_part(spec, progress=not getattr(args, "quiet", False))
    return emulated_cluster(spec, progress=not getattr(args, "quiet", False))


def _rank_counts(args):
    return _recipe_of(args).rank_counts()


def _cluster(args) -> int:
    from deep500.lv3_distributed.cluster import command
    if args.cleanup:
        return command.cleanup(quiet=args.quiet)
    if args.action == "exec":
        return command.exec_in_cluster(args.spec, args.program, quiet=args.quiet)
    return command.status()


def _run(args) -> int:
    from deep500.lv3_distributed.mpi_launch import world_communicator
    try:
        baseline = fail_above = None
        if args.baseline is not None:  # a bad baseline stops the run before any work
            baseline = _checked_baseline(args)
        if args.fail_above is not None:
            if baseline is None:
                raise Deep500Error("--fail-above compares with a baseline: give "
                                   "--baseline RUN (a run folder or an id from "
                                   "'deep500 runs') too")
            from deep500.store.compare import parse_threshold
            fail_above = parse_threshold(args.fail_above)
        with _cluster_for(args, _recipe_cluster(args.recipe)):
            summary = _run_launched(args)
    except Deep500Error:
        # Errors that get here are the same on every rank: rank 0 says it for all.
        world = world_communicator()
        if world is not None and world.Get_rank() != 0:
            return 2
        raise
    if summary.report_paths:
        print(f"Results: {summary.output_dir}/results.jsonl")
        for path in summary.report_paths:
            print(f"Report:  {path}")
        if summary.run_id is not None:
            print(f"Stored:  run {summary.run_id} in {_database(args)} (deep500 runs)")
        noise = summary.interference_sentence()
        if noise:  # beside the counts: a verdict on disturbed numbers says so
            print(noise)
        print(summary.sentence())
    gate = 0
    if baseline is not None and summary.report_paths:  # rank 0
        from deep500.store.compare import compare_with_baseline
        gate = compare_with_baseline(baseline, summary.output_dir, fail_above)
    if summary.exit_status:  # a rank grid's mpirun job failed (see rank_grid)
        return summary.exit_status
    return gate if summary.ok else 1


def _checked_baseline(args):
    """The run ``--baseline`` names, once it is known to hold some of the recipe's
    configurations (StoreError otherwise: exit status 2 before anything runs); rank 0
    says how many will be compared."""
    from deep500.lv3_distributed.mpi_launch import world_communicator
    from deep500.recipe.baseline_plan import check_baseline
    from deep500.store.compare import load_run
    baseline = load_run(args.baseline, _database(args))
    world = world_communicator()
    ranks = world.Get_size() if world is not None else (args.np or 1)
    line = check_baseline(_recipe_of(args), baseline, ranks)
    if world is None or world.Get_rank() == 0:
        print(line, flush=True)
    return baseline


def _report(args) -> int:
    from deep500.results.files import check_run_folder
    from deep500.report import write_reports
    # a missing or corrupt folder: a message, exit 2 (its lines: as the report reads them)
    check_run_folder(args.directory, records=False)
    figure_format = None if args.figure_format == "none" else args.figure_format
    try:
        paths = write_reports(args.directory, per_seed=args.per_seed,
                              figure_format=figure_format, samples=args.samples)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        from deep500.results.files import RunFolderError
        raise RunFolderError(
            f"{args.directory}: its records are not what 'deep500 run' writes "
            f"({type(exc).__name__}: {exc}); if deep500 run wrote this folder, that is "
            f"a bug of the report: please report it with the folder") from exc
    for path in paths:
        print(path)
    if args.mlperf:
        from deep500.store.mlperf_log import write_mlperf_logs
        for path in write_mlperf_logs(args.directory):
            print(path)
    return 0


def _runs(args) -> int:
    from deep500.store.history import runs_command
    return runs_command(args.db, add=args.add, as_json=args.json)


def _compare(args) -> int:
    from deep500.store.compare import compare_command
    return compare_command(args.a, args.b, database=args.db, fail_above=args.fail_above,
                           confidence=args.confidence, as_json=args.json)


def _history(args) -> int:
    from deep500.store.history import history_command
    from deep500.utils.output_paths import check_output_file
    if args.all and args.config:
        raise Deep500Error("history: give --config FILTER (one configuration's page) or "
                           "--all (an index of every configuration), not both")
    if args.run is None and args.recipe_file is not None:
        raise Deep500Error(f"history: a recipe ({args.recipe_file}) is only given with "
                           f"--run A..B, to run it at those revisions")
    if not args.all and not args.config and args.run is None:
        raise Deep500Error("history: give --config FILTER (one configuration's page), "
                           "--all (an index of every configuration) or --run A..B RECIPE")
    out = args.out or ("history-site" if args.all else "history.html")
    if args.all:
        if os.path.lexists(out) and not os.path.isdir(out):
            raise Deep500Error(f"--out {out} exists and is not a folder; --all writes a "
                               f"folder of pages (index.html and one page each)")
        check_output_file(os.path.join(out, "index.html"), "--out", missing_folder_ok=True)
    elif args.config:
        check_output_file(out, "--out", missing_folder_ok=True)   # the page makes its folder
    if args.run is not None:
        from deep500.store.revision_runs import run_range
        if args.recipe_file is None:
            raise Deep500Error(f"--run {args.run}: give the recipe to run, e.g. deep500 "
                               f"history --run {args.run} recipes/quickstart.yaml")
        runs = run_range(args.run, args.recipe_file, _database(args), select=args.select)
        if not any(run.status in (0, 1) for run in runs):
            raise Deep500Error(f"--run {args.run}: no revision could be measured (see "
                               f"above)")
        if not args.all and not args.config:
            print(f"Stored in {_database(args)}; see them with deep500 history --all "
                  f"--out history-site, or --config FILTER")
            return 0
    if args.all:
        from deep500.store.history_site import write_site
        index, count = write_site(out, database=args.db, metric=args.metric,
                                  recipe=args.recipe, rank=args.rank)
        print(f"{index}: {count} configuration(s)")
        return 0
    return history_command(args.config, out, database=args.db, metric=args.metric,
                           recipe=args.recipe, rank=args.rank)


def _bisect(args) -> int:
    from deep500.store.bisect import bisect_command
    from deep500.store.compare import parse_threshold
    return bisect_command(args.recipe, args.good, args.bad, args.config, _database(args),
                          metric=args.metric, threshold=parse_threshold(args.threshold),
                          rerun=args.rerun)


def _calibrate(args) -> int:
    """Measure this machine into a machine file (deep500.lv3_distributed.calibration)."""
    from deep500.lv3_distributed.calibration import run_calibration, samples_path_for
    try:
        with _cluster_for(args):
            data = run_calibration(args.out, np_ranks=args.np,
                                   network=not args.no_network, quick=args.quick,
                                   progress=not args.quiet)
    except KeyboardInterrupt:
        print(f"deep500: calibration stopped; samples measured so far are in "
              f"{samples_path_for(args.out)}", file=sys.stderr)
        raise
    if data is not None:  # rank 0
        print(f"Machine file: {args.out} (raw samples: {samples_path_for(args.out)})")
    return 0


def _info(args) -> int:
    """Versions and hardware without importing a framework (under a second); PyTorch's
    and TensorFlow's thread settings and CUDA devices only with --frameworks, which
    imports them (some 20 s on 2 cores)."""
    from deep500.utils import sysinfo
    info = {"versions": sysinfo.software_versions(), "hardware": sysinfo.hardware(),
            "threads": sysinfo.framework_threads(imported_only=not args.frameworks),
            "cuda_devices": sysinfo.cuda_devices() if args.frameworks else []}
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print("Software")
    for name, version in info["versions"].items():
        print(f"  {name:<12} {version or 'not installed'}")
    hardware = info["hardware"]
    print("Hardware")
    print(f"  CPU          {hardware['cpu_model']}")
    print(f"  cores        {hardware['physical_cores']} physical, {hardware['logical_cpus']} "
          f"logical, {hardware['usable_cpus']} usable by this process")
    gpus = hardware["gpus"]
    print("  GPU          " + (", ".join(f"{g['index']}: {g['name']} ({g['memory']})"
                                         for g in gpus) if gpus else "none"))
    if info["cuda_devices"]:
        print(f"  CUDA (torch) {', '.join(info['cuda_devices'])}")
    print("Threads")
    for name, value in info["threads"].items():
        print(f"  {name:<16} {value}")
    if not args.frameworks:
        print("  (PyTorch's and TensorFlow's thread settings and CUDA devices: "
              "'deep500 info --frameworks', which imports them)")
    return 0


def _conformance(args) -> int:
    import shlex
    from deep500.conformance import conformance_command
    command = "deep500 conformance" + " --update-docs" * args.update_docs + "".join(
        f" --{flag} {shlex.quote(str(value))}" for flag, value in
        (("executors", args.executors), ("pattern", args.pattern)) if value)
    return conformance_command(str(args.executors).split(","), out=args.out,
                               pattern=args.pattern, time_limit=args.time_limit,
                               replace=args.replace, update_docs=args.update_docs,
                               progress=not args.quiet, command=command)


def _compile(args) -> int:
    import os
    import deep500 as d5
    from deep500.utils.tensor_desc import TensorDescriptor
    definitions = {}
    for item in args.define or []:
        key, _, value = item.partition("=")
        definitions[key] = value if _ else "1"
    descriptor = d5.compile_custom_cppop(
        args.name, args.sources, [TensorDescriptor.parse(t) for t in args.inputs],
        [TensorDescriptor.parse(t) for t in args.outputs], definitions,
        args.cmake_option or [], output_folder=args.output_folder or os.path.join(
            "build", args.name), live_output=args.verbose)
    descriptor.library()  # load it once: signatures must match the descriptors
    state = "up to date" if descriptor.cache_hit else f"built in {descriptor.seconds:.1f} s"
    print(f"{descriptor.name}: {state}: {descriptor.library_path}")
    print(f"Load it with d5.load_custom_cppop({descriptor.folder!r}) (no compiler needed)")
    return 0


def _build_glue(args) -> int:
    """Build (or find in the cache) every glue library of the installed frameworks, or
    of ``--framework``; exit status 1 when one could not be built (the others are)."""
    import importlib
    from deep500.frameworks import registry
    failed = False
    with_glue = [name for name in registry.names() if registry.get(name).glue]
    for framework in [args.framework] if args.framework else with_glue:
        for module_name in registry.get(framework).glue:
            try:
                module = importlib.import_module(module_name)
            except Deep500Error as exc:  # the framework is not installed
                if args.framework:
                    raise
                print(f"{framework}: skipped ({exc})")
                break
            what = module.LOADER.what
            try:
                built = module.build(live_output=args.verbose)
            except Deep500Error as exc:
                failed = True
                print(f"{what}: FAILED: {exc}", file=sys.stderr)
                continue
            how = "found in the cache" if built.cache_hit else "built"
            print(f"{what}: {how} in {built.seconds:.2f} s: {built.library_path}")
    return 1 if failed else 0


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a count >= 0, got {text!r} (to give "
                                         f"the recipe right after the option, write "
                                         f"--remeasure-interfered=N or put it last)")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _version() -> str:
    import deep500
    return deep500.__version__


def build_parser() -> argparse.ArgumentParser:
    """The ``deep500`` command's parser: one subparser per subcommand, each added by its
    own function below."""
    parser = argparse.ArgumentParser(prog="deep500", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"deep500 {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    for add_command in (_add_run, _add_report, _add_runs, _add_compare, _add_history,
                        _add_bisect, _add_calibrate, _add_predict, _add_info, _add_conformance,
                        _add_compile, _add_build_glue, _add_cluster):
        add_command(commands)
    return parser


# -- one parser per subcommand ----------------------------------------------------------
# Options several subcommands share are added by one function each (_add_*_option).

_DEFAULT_DATABASE = "(default: $DEEP500_DB, else results/deep500.db)"


def _subcommand(commands, name: str, handler, help_text: str) -> argparse.ArgumentParser:
    """The parser of subcommand ``name``, run by ``handler(args)``."""
    parser = commands.add_parser(name, help=help_text)
    parser.set_defaults(handler=handler)
    return parser


def _add_database_option(parser, help_text: str) -> None:
    parser.add_argument("--db", metavar="PATH", help=help_text)


def _add_fail_above_option(parser, help_text: str) -> None:
    parser.add_argument("--fail-above", metavar="T", help=help_text + " when a "
                        "configuration is significantly slower by more than T (5%% or "
                        "0.05); 3 when none is but some configuration was not judged "
                        "(measured under interference, or too few samples); no "
                        "configuration in common: 2")


def _add_cluster_option(parser) -> None:
    parser.add_argument("--cluster", metavar="SPEC", help="run the MPI ranks in an "
                        "emulated cluster that Deep500 starts and removes: "
                        "nodes=N,rate=1gbit[,burst=256kb][,latency=1ms][,ppn=K]"
                        "[,mode=loopback] (needs root; docs/cluster_emulation.md)")


def _add_cluster(commands) -> None:
    cluster = _subcommand(commands, "cluster", _cluster, "emulated clusters: run a "
                          "program in one (exec), list them (status, the default), "
                          "remove leftovers (--cleanup)")
    _add_flag(cluster, "--cleanup", "remove the namespaces of clusters whose launcher "
              "was killed")
    _add_flag(cluster, "--quiet", "print nothing of Deep500's own")
    actions = cluster.add_subparsers(dest="action")
    run = actions.add_parser("exec", help="run PROGRAM in an emulated cluster built for "
                             "it, and remove the cluster after it")
    run.add_argument("--cluster", dest="spec", metavar="SPEC", required=True,
                     help="nodes=N,rate=1gbit[,burst=...][,latency=...][,ppn=K]"
                          "[,mode=loopback]")
    _add_flag(run, "--quiet", "print nothing of Deep500's own")
    run.add_argument("program", nargs=argparse.REMAINDER, help="after '--', the command "
                     "to run, e.g. mpirun -np 2 python my.py")
    actions.add_parser("status", help="list this host's emulated clusters")


def _add_flag(parser, name: str, help_text: str) -> None:
    parser.add_argument(name, action="store_true", help=help_text)


def _add_run(commands) -> None:
    run = _subcommand(commands, "run", _run, "run a recipe")
    run.add_argument("recipe", help="path of a recipe YAML file")
    output = run.add_argument_group("where the results go")
    output.add_argument("--out", help="output folder (default: results/<recipe>-<time>)")
    _add_flag(output, "--quiet", "no progress bar")
    _add_flag(output, "--append", "add this run to a folder that holds earlier runs, as a "
              "new session (otherwise --out must be new or empty)")
    output.add_argument("--machine", metavar="FILE", help="machine file for the "
                        "experiments (from 'deep500 calibrate', or a shipped name such as "
                        "infiniband-hdr); replaces the recipe's 'machine:' and is recorded "
                        "in the manifest")
    ranks = run.add_argument_group("on MPI ranks")
    ranks.add_argument("--np", type=int, metavar="N", help="run on N MPI ranks under "
                       "the mpirun beside the Python interpreter, this process staying "
                       "to finish the run however it ends (under mpirun already: N must "
                       "be its number of ranks)")
    ranks.add_argument("--hostfile", metavar="FILE", help="with --np, or for a recipe with "
                       "'ranks' (each rank count's mpirun job): the hosts to run on, "
                       "an MPICH hostfile ('host' or 'host:n' per line, '#' comments), "
                       "checked, then passed to mpirun as -f FILE (see "
                       "docs/distributed.md)")
    _add_cluster_option(ranks)
    measuring = run.add_argument_group("measuring")
    measuring.add_argument("--select", metavar="TERMS", help="run only the configurations "
                           "that every term selects: key=value (exact, or the first words "
                           "of a label) and key~text (a substring, ignoring case), joined "
                           "by commas, e.g. 'framework=pytorch,operator~Conv'; key is a "
                           "setting of the recipe")
    measuring.add_argument("--remeasure-interfered", type=_non_negative_int, nargs="?",
                           const=2, default=0, metavar="N", help="re-measure a "
                           "configuration that other processes interfered with (see "
                           "docs/measurement.md) up to N times (default 2), keeping the "
                           "last clean attempt or the least interfered; give N as "
                           "--remeasure-interfered=N or after the recipe")
    stored = run.add_argument_group("the results database and a baseline")
    _add_database_option(stored, f"results database to store the run in "
                                 f"{_DEFAULT_DATABASE}")
    stored.add_argument("--baseline", metavar="RUN", help="at the end, compare with RUN (a "
                        "run folder or an id from 'deep500 runs') as 'deep500 compare' "
                        "does; checked first: a baseline that holds none of the recipe's "
                        "configurations stops the run (exit status 2)")
    _add_fail_above_option(stored, "with --baseline: exit status 1")


def _add_report(commands) -> None:
    report = _subcommand(commands, "report", _report, "rebuild the report of a run folder")
    report.add_argument("directory")
    _add_flag(report, "--per-seed", "one row per seed (default: runs that differ only in "
              "their seed are aggregated: mean and 95%% CI)")
    report.add_argument("--figure-format", choices=("svg", "pdf", "none"), default="svg",
                        help="every plot is written as PNG (embedded in report.html) and "
                        "also in this format (default svg)")
    report.add_argument("--samples", choices=("violin", "histogram"), default=None,
                        help="also draw raw times per call of up to 12 configurations (the "
                        "widest spread first) as violins or histograms (default: not "
                        "drawn)")
    _add_flag(report, "--mlperf", "also write each training configuration as an "
              "MLPerf-style log (:::MLLOG lines) in DIR/mlperf/")


def _add_runs(commands) -> None:
    runs = _subcommand(commands, "runs", _runs, "list the runs in the results database")
    _add_database_option(runs, f"results database {_DEFAULT_DATABASE}")
    runs.add_argument("--add", nargs="+", metavar="DIR", help="store these run folders "
                      "first (again: their rows are replaced)")
    _add_flag(runs, "--json", "machine-readable output")


def _add_compare(commands) -> None:
    compare = _subcommand(commands, "compare", _compare, "compare two runs configuration "
                          "by configuration: ratio B/A with a nonparametric CI")
    compare.add_argument("a", metavar="A", help="baseline: a run folder or a run id "
                         "('deep500 runs'; -1 is the latest)")
    compare.add_argument("b", metavar="B", help="the run compared with A (folder or id)")
    _add_database_option(compare, "results database for run ids")
    _add_fail_above_option(compare, "exit status 1")
    compare.add_argument("--confidence", type=float, default=0.95,
                         help="confidence level of the intervals (default 0.95)")
    _add_flag(compare, "--json", "machine-readable output")


def _add_history(commands) -> None:
    history = _subcommand(commands, "history", _history, "one configuration's metric "
                          "across git revisions, as an HTML page with a plot (--all: an "
                          "index of every configuration; --run A..B RECIPE: run the "
                          "recipe at those revisions first)")
    history.add_argument("recipe_file", nargs="?", metavar="RECIPE", help="with --run: "
                         "the recipe to run at each revision")
    history.add_argument("--config", metavar="FILTER", help="which "
                         "configuration: key=value terms joined by commas, e.g. "
                         "framework=pytorch,operator=Relu (see docs/results_store.md)")
    _add_flag(history, "--all", "write an index page of every stored configuration, "
              "each with a sparkline, and one page each, into the folder --out")
    history.add_argument("--run", metavar="A..B", help="first run RECIPE at every commit "
                         "of the git range A..B (A excluded; A^..B includes it) or at one "
                         "revision, each in a temporary worktree with this Python "
                         "environment, storing the runs")
    history.add_argument("--select", metavar="TERMS", help="with --run: only these "
                         "configurations (as deep500 run --select)")
    history.add_argument("--metric", default="WallclockTime.median",
                         help="METRIC.FIELD (default WallclockTime.median)")
    history.add_argument("--out", help="HTML page to write (default history.html), or "
                         "with --all the folder (default history-site)")
    history.add_argument("--recipe", help="only runs of this recipe")
    history.add_argument("--rank", type=int, default=0, help="MPI rank (default 0)")
    _add_database_option(history, "results database")


def _add_bisect(commands) -> None:
    bisect = _subcommand(commands, "bisect", _bisect, "find the commit where a "
                         "configuration got slower: run RECIPE at --good, --bad and a "
                         "binary search of the commits between (as asv find)")
    bisect.add_argument("recipe", help="the recipe to run at each revision")
    bisect.add_argument("--good", required=True, metavar="REV", help="a revision where "
                        "the configuration was fast")
    bisect.add_argument("--bad", required=True, metavar="REV", help="a later revision "
                        "where it is slow")
    bisect.add_argument("--config", required=True, metavar="FILTER", help="the "
                        "configuration, as for deep500 history")
    bisect.add_argument("--metric", default="WallclockTime.median",
                        help="METRIC.FIELD (default WallclockTime.median)")
    bisect.add_argument("--threshold", default="10%", help="how much slower --bad must "
                        "be than --good (default 10%%)")
    _add_flag(bisect, "--rerun", "run every revision, even those the database already "
              "holds a run of without interference")
    _add_database_option(bisect, f"results database {_DEFAULT_DATABASE}")


def _add_calibrate(commands) -> None:
    calibrate = _subcommand(commands, "calibrate", _calibrate, "measure this machine "
                            "(ping-pong alpha-beta, reduction gamma, memory bandwidth, "
                            "peak FLOP/s, per-call allreduce overhead) into a machine "
                            "file (docs/performance_models.md)")
    calibrate.add_argument("--out", required=True, help="machine file (YAML) to write; raw "
                           "samples go beside it in OUT.samples.jsonl as they are measured")
    calibrate.add_argument("--np", type=int, metavar="N", help="run the ping-pong and the "
                           "4-byte allreduce calls (per-call overhead o) on N >= 2 MPI "
                           "ranks (under the mpirun beside the Python interpreter)")
    _add_cluster_option(calibrate)
    _add_flag(calibrate, "--no-network", "skip the ping-pong (one rank): the file then has "
              "no network model and no allreduce overheads")
    _add_flag(calibrate, "--quick", "small sizes and few repeats (seconds; for tests, not "
              "for predictions)")
    _add_flag(calibrate, "--quiet", "no progress bar")


def _add_predict(commands) -> None:
    predict = _subcommand(commands, "predict", _predict, "strong- and weak-scaling curves "
                          "(or --sweep: what-if grids) of a recipe's training, predicted "
                          "(no training; docs/performance_models.md)")
    predict.add_argument("recipe", help="a 'distributed' or 'training' recipe")
    model = predict.add_argument_group("what is predicted")
    model.add_argument("--machine", required=True, metavar="FILE", help="machine file "
                       "(from 'deep500 calibrate') or a shipped one by name, e.g. "
                       "infiniband-hdr or infiniband-edr")
    model.add_argument("--ranks", help="rank counts: a list (1,4,8) or a progression "
                       "to its last term (1,2,4,...,1024: powers of two, the default; "
                       "1,2,3,...,8: every count); with --sweep, the one rank count of "
                       "every point")
    model.add_argument("--sweep", action="append", metavar="AXIS=SPEC", help="what-if "
                       "grid instead of scaling curves (repeatable): axes link_bandwidth "
                       "(bit/s, or tc units: 5gbit), compute_speed (x profiled), gamma "
                       "(s/byte), ranks, batch (per rank); SPEC a..b (5 log-spaced "
                       "points), a..b:n or a,b,c. E.g. --sweep link_bandwidth=1e9..400e9 "
                       "--sweep ranks=2,16,128")
    model.add_argument("--compute", choices=("measured", "analytic"), default="measured",
                       help="per-layer compute: profiled here (default) or the roofline "
                       "of the machine file")
    model.add_argument("--algorithm", help="allreduce algorithm (default: the recipe's "
                       "scheme's, else ring)")
    _add_flag(model, "--overlap", "overlap per-bucket allreduces with backprop")
    model.add_argument("--comm-dtype", default="float32",
                       choices=("float32", "float16", "bfloat16"))
    model.add_argument("--threads", type=_positive_int, help="threads per rank (default: the "
                       "recipe's)")
    model.add_argument("--global-batch", type=_positive_int, help="strong scaling's global "
                       "batch (default: batch per rank x 64)")
    output = predict.add_argument_group("output")
    output.add_argument("--plot", default="predict.png", help="plot to write (default "
                        "predict.png, and .svg beside it; 'none' for no plot)")
    output.add_argument("--json", metavar="FILE", help="also write the curves as JSON")


def _add_info(commands) -> None:
    info = _subcommand(commands, "info", _info, "software versions and hardware")
    _add_flag(info, "--json", "machine-readable output")
    _add_flag(info, "--frameworks", "also import PyTorch and TensorFlow to read their "
              "thread settings and CUDA devices (takes seconds)")


class _FrameworkNames:
    """The registry's framework names (those with glue only, if asked), read when argparse
    shows or checks them, not when the parser is built: the registry loads NumPy and ONNX,
    a second that 'deep500 info' and every '--help' would otherwise wait for."""

    def __init__(self, with_glue: bool = False):
        self.with_glue = with_glue

    def _names(self) -> list:
        from deep500.frameworks import registry
        return sorted(n for n in registry.names() if registry.get(n).glue) \
            if self.with_glue else list(registry.names())

    def __iter__(self):
        return iter(self._names())

    def __contains__(self, name) -> bool:
        return name in self._names()

    def __str__(self) -> str:
        return ",".join(self._names())


def _add_conformance(commands) -> None:
    conformance = _subcommand(commands, "conformance", _conformance, "run ONNX's node "
                              "tests on the executors; write a table and the locked "
                              "passing set")
    conformance.add_argument("--executors", default=_FrameworkNames(),
                             help="comma-separated executors (default: every registered "
                             "framework: %(default)s)")
    conformance.add_argument("--out", metavar="DIR", default=os.path.join("results",
                             "conformance"), help="folder for conformance.md, its per-case "
                             "matrix conformance_cases.md, every case's outcome "
                             "conformance.json and the locked passing set with this run's "
                             "passing cases conformance_passing.json (default: %(default)s)")
    _add_flag(conformance, "--update-docs", "also regenerate the repository's tracked "
              "docs/conformance.md, docs/conformance_cases.md and "
              "tests/lv1_network/conformance_passing.json (a run of every case only; "
              "default: they are only read)")
    conformance.add_argument("--pattern", help="only cases whose name matches this regex "
                             "(default: every case)")
    conformance.add_argument("--time-limit", type=float, default=20.0,
                             help="seconds per case before its remaining data sets are "
                             "skipped (default: %(default)s)")
    conformance.add_argument("--replace", action="store_true", help="unlock the locked cases "
                             "that no longer pass (default: keep them and exit 1)")
    conformance.add_argument("--quiet", action="store_true", help="no progress bar")


def _add_compile(commands) -> None:
    compile_ = _subcommand(commands, "compile", _compile, "build a C++ operator ahead of "
                           "time (load it later with d5.load_custom_cppop)")
    compile_.add_argument("sources", nargs="+", help="C++ source files")
    compile_.add_argument("--name", required=True, help="operator name (a C identifier)")
    compile_.add_argument("--inputs", nargs="*", default=[], metavar="DTYPE:SHAPE",
                          help="input descriptors in forward order, e.g. float32:8x16")
    compile_.add_argument("--outputs", nargs="+", required=True, metavar="DTYPE:SHAPE",
                          help="output descriptors, e.g. float32:8")
    compile_.add_argument("-D", "--define", action="append", metavar="KEY=VALUE",
                          help="compile definition (repeatable)")
    compile_.add_argument("--cmake-option", action="append", metavar="OPTION",
                          help="extra CMake configure argument (repeatable), e.g. "
                          "--cmake-option=-DCMAKE_BUILD_TYPE=Debug")
    compile_.add_argument("--output-folder", help="where to put the library and its "
                          "manifest (default: build/NAME)")
    _add_flag(compile_, "--verbose", "show CMake and compiler output as it comes")


def _add_build_glue(commands) -> None:
    glue = _subcommand(commands, "build-glue", _build_glue, "build Deep500's framework "
                       "glue ahead of time (a Docker image, before an MPI job)")
    glue.add_argument("--framework", choices=_FrameworkNames(with_glue=True),
                      metavar="NAME", help="only this framework's, one of %(choices)s "
                      "(default: every installed framework's)")
    _add_flag(glue, "--verbose", "show the compiler's output")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    from deep500.utils.interrupts import signals_raise
    try:
        with signals_raise():  # SIGTERM unwinds like Ctrl-C: manifests, builds cleaned up
            return args.handler(args)
    except Deep500Error as exc:
        print(f"deep500: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        what = f" ({exc})" if str(exc) else ""
        kept = "; results measured so far are on disk" if args.command == "run" else ""
        print(f"deep500: interrupted{what}{kept}", file=sys.stderr)
        return getattr(exc, "exit_status", 130)


if __name__ == "__main__":
    sys.exit(main())
