"""How long a benchmark's run should take, from the work its arguments ask for: counts
(rounds, profiles, steps, sizes, configurations) times seconds per unit measured
earlier on this project's 2-core machine, each figure with where it was measured.

Each function returns an :class:`Estimate`, printed before anything is measured by
``benchmark_targets.expected_run_time(*estimate)``. The figures are of a loaded
machine (load averages 3-7 beside other jobs); a quiet one is faster, a busier one
slower: an estimate says what to expect, never what was measured.
"""
from __future__ import annotations

from typing import NamedTuple


class Estimate(NamedTuple):
    seconds: float
    basis: str
    at_most: float | None = None


# -- seconds per unit that several benchmarks share, and where they come from --------
# docs/performance_models.md ("Measured here", lv1_layer_models): a default run took
# 2 minutes at load 3-5 for 5 rounds x 90 profiles (15 networks x 3 batches x 2
# executors) x 9 passes (7 timed + 2 warm-up): its whole time over those passes, the
# fits and GEMM timing of then included.
LAYER_PROFILE_PASS_S = 120.0 / (5 * 90 * 9)
# Since then each evaluated model x executor also fits the per-kernel MLPs (one network
# of 200 iterations per operator type since 9e2de0a): timed on this machine on
# 2026-11-29, lv1_layer_models.py --smoke took 40.6 s of CPU time, 8.5 s of it profiles
# and GEMM sizes and about 4 s the imports and machine measurement, over 2 evaluations.
# A larger training set (the default run's) makes each fit longer.
LAYER_MODEL_FIT_S = (40.6 - 8.5 - 4.0) / 2

# Timed on this machine on 2026-11-29 (load average 7): `mpirun -np 2 python -c "from
# mpi4py import MPI; import numpy, deep500"`, the start-up of a 2-rank world.
MPIRUN_START_S = 1.1
# `deep500 calibrate --np 2 --quick` on one host, same day and load: 35.8 s; the full
# `deep500 calibrate --np 2`: 63.6 s (docs/performance_models.md's 13.5 s predates the
# in-context tables).
QUICK_CALIBRATION_S = 36.0
FULL_CALIBRATION_S = 64.0

# docs/custom_operators.md: a cold compile of a C++ operator, 0.5-0.7 s; the MPI
# operators of lv3_cpp_allreduce take longer (its smoke test: six builds and the run
# ~30 s), so a cold build is counted at 5 s.
CPP_ALLREDUCE_BUILD_S = 5.0

# docs/cluster_emulation.md: the emulated link's one-way latency (mode=nodes, 10.7 us)
# and TCP's payload per frame byte (1448 of 1514).
LINK_LATENCY_S = 10.7e-6
TCP_PAYLOAD = 1448 / 1514


def lv1_layer_models(networks: int, evaluated: int, batches: int, executors: int,
                     rounds: int, reruns: int, warmup: int) -> Estimate:
    profiles = networks * batches * executors
    passes = rounds * profiles * (reruns + warmup)
    evaluations = evaluated * executors
    return Estimate(passes * LAYER_PROFILE_PASS_S + evaluations * LAYER_MODEL_FIT_S,
                    f"{rounds} rounds x {profiles} profiles x {reruns + warmup} passes x "
                    f"~{LAYER_PROFILE_PASS_S * 1e3:.0f} ms a pass (a default run's 2 min "
                    f"over its passes, docs/performance_models.md), and {evaluations} "
                    f"evaluations x ~{LAYER_MODEL_FIT_S:.0f} s of model fits (the smoke "
                    f"run's CPU time here; more training profiles fit longer)")


# Timed on this machine on 2026-11-29 (load average 6.4), lv2_training_overhead.py
# --samples 1280 --batch 128 --rounds 2 --fixed-cost-steps 500: a LeNet epoch of 10
# steps took 2.17 s native and 2.47 s through Deep500 (1.81 ms a sample a side); the
# tiny MLP's epoch of 500 steps 6.04 and 6.22 s (12.3 ms a step a side).
LENET_TRAINING_SAMPLE_S = (2.170 + 2.471) / 2 / 1280
TINY_MLP_STEP_S = (6.043 + 6.218) / 2 / 500


def lv2_training_overhead(model: str, samples: int, batch: int, epoch_rows: int,
                          rounds: int, fixed_cost_steps: int | None, adam_models: int,
                          round_seconds: float, max_seconds: float) -> Estimate:
    """``epoch_rows``: part 1's rows of ``model`` (optimizers x same module and
    hand-written, and the A/A row); ``fixed_cost_steps`` None: no tiny-MLP row."""
    epochs = 1 + max(rounds, 2)        # the warm-up epoch, then the paired rounds
    steps = samples // batch
    part1 = epoch_rows * epochs * 2 * steps * batch * LENET_TRAINING_SAMPLE_S
    tiny = 0.0 if fixed_cost_steps is None else \
        epochs * 2 * fixed_cost_steps * TINY_MLP_STEP_S
    # lv1_executors.measure: rounds of 2 x round_seconds, cut near max_seconds (5 rounds
    # at least); 2 comparisons per model (torch's default and foreach).
    comparison = min(rounds * 2 * round_seconds, max(max_seconds, 5 * 2 * round_seconds))
    part2 = adam_models * 2 * comparison
    other = "" if model == "lenet" else f" (LeNet's time a sample; {model}'s differs)"
    tiny_row = "none" if fixed_cost_steps is None else \
        f"{epochs} x 2 x {fixed_cost_steps} steps at ~{TINY_MLP_STEP_S * 1e3:.0f} ms"
    return Estimate(part1 + tiny + part2,
                    f"{epoch_rows} epoch rows x {epochs} epochs x 2 sides x {steps} steps "
                    f"of {batch} at ~{LENET_TRAINING_SAMPLE_S * 1e3:.1f} ms a sample"
                    f"{other}; tiny-MLP row {tiny_row}; Adam {adam_models} models x 2 "
                    f"comparisons of ~{comparison:g} s; "
                    f"per-unit times of a short run here at load 6.4")


def lv3_cluster_links(rate_bytes: float, message_bytes: int, repeats: int) -> Estimate:
    """Four 2-rank worlds (shared memory, nodes, loopback, nodes over UCX); on the two
    emulations that cross the links, the warm-up and each repeat send the message one
    way and both ways (loopback's one bucket carries both directions: twice the time)."""
    message = message_bytes / (rate_bytes * TCP_PAYLOAD)
    traffic = (repeats + 1) * (2 + 3) * message
    pingpongs = 2 * (100 + 500 * repeats) * 2 * LINK_LATENCY_S
    return Estimate(4 * MPIRUN_START_S + traffic + pingpongs,
                    f"4 mpirun worlds of ~{MPIRUN_START_S:g} s start-up; {repeats + 1} x 5 "
                    f"messages of {message_bytes} B at the TCP payload of the rate "
                    f"({message:.2f} s each) and the ping-pongs at "
                    f"{LINK_LATENCY_S * 1e6:g} us (docs/cluster_emulation.md); the "
                    f"namespaces' set-up and teardown not counted")


def lv3_cpp_allreduce(sizes: int, rounds: int, round_ms: float) -> Estimate:
    timed = sizes * rounds * round_ms / 1e3
    builds = 2 * sizes * CPP_ALLREDUCE_BUILD_S
    return Estimate(MPIRUN_START_S + timed,
                    f"{sizes} sizes x {rounds} rounds of about {round_ms:g} ms with every "
                    f"variant in each round, longer where one call of each exceeds "
                    f"--round-ms; with a cold operator cache {2 * sizes} builds of ~"
                    f"{CPP_ALLREDUCE_BUILD_S:g} s (the smoke run's six: ~30 s)",
                    at_most=MPIRUN_START_S + timed + builds)


# Timed on this machine on 2026-11-29 (load average 6.3), lv3_scaling.py --steps 5
# --rounds 2 --warmup 1: the MLP 784-512-512-10 at batch 64 stepped in 23.0 ms on 1
# rank and 46.1 ms on 2; the run took 7.7 s, 6.7 s of it start-up (mpirun, data,
# models) beyond its 15 paired steps.
SCALING_MLP_SAMPLE_S = (23.0e-3 + 46.1e-3) / 64   # a 1-rank and a 2-rank step, a sample
SCALING_START_S = 6.7


def lv3_scaling(model: str, batch: int, steps: int, rounds: int, warmup: int) -> Estimate:
    paired = (warmup + rounds) * steps
    other = "" if model == "mlp" else f" (the MLP's time a sample; {model}'s differs)"
    return Estimate(SCALING_START_S + paired * batch * SCALING_MLP_SAMPLE_S,
                    f"{warmup + rounds} rounds x {steps} steps on 1 rank and on all, at "
                    f"batch {batch} ~{SCALING_MLP_SAMPLE_S * 1e3:.2f} ms a sample for the "
                    f"two{other}, and ~{SCALING_START_S:g} s of start-up: a short run here "
                    f"at load 6.3")


# Timed on this machine on 2026-11-29 (load average 5.9), lv3_overlap.py --machine FILE
# --steps 12 --rounds 1: 2-rank steps at batch 16 of 5.8 ms (the recipe's MLP) and 68 ms
# (the wide MLP), as its profile gave them; the run took 13.5 s, ~10 s of it beyond the
# steps (mpirun, data, one executor built per round and mode). LeNet on 3x32x32: 60 ms
# of compute at batch 64 (docs/cluster_emulation.md, the overlap section).
OVERLAP_SAMPLE_S = {"mlp": 5.8e-3 / 16, "wide": 68e-3 / 16, "lenet": 60e-3 / 64}
OVERLAP_START_S = 10.0
PROFILED_STEPS = 25    # measure_step_profile's reruns=20 and warmup=5


def lv3_overlap(models: list, algorithms: int, progress_modes: int, rounds: int,
                steps: int, batch: int, calibrate: bool) -> Estimate:
    per_model = rounds * algorithms * (1 + progress_modes) * steps + PROFILED_STEPS
    training = sum(per_model * batch * OVERLAP_SAMPLE_S[m] for m in models)
    calibration = QUICK_CALIBRATION_S if calibrate else 0.0
    return Estimate(calibration + OVERLAP_START_S + training,
                    f"{len(models)} models x {per_model} steps ({rounds} rounds x "
                    f"{algorithms} allreduces x {1 + progress_modes} modes x {steps}, and "
                    f"the profile) at batch {batch}, "
                    + ", ".join(f"{m} ~{OVERLAP_SAMPLE_S[m] * batch * 1e3:.0f} ms"
                                for m in models)
                    + f" a step; ~{OVERLAP_START_S:g} s of start-up"
                    + (f"; a quick calibration ~{QUICK_CALIBRATION_S:g} s" if calibrate
                       else "") + ": short runs here at load 6-7")


# Timed on this machine on 2026-11-29 (load average 5.4), lv3_simulator.py --smoke
# --machine FILE: one round took 48.3 s, of which its 3 configurations trained ~0.5 s
# each (1 epoch, deep500 run's progress bar); the rest, ~47 s, is the round's fixed
# work: two `deep500 run` processes, the 2-rank profile under mpirun with its
# in-context allreduce table (the quick calibration's repeats), the 1-rank profile.
SIMULATOR_ROUND_S = 48.3 - 3 * 0.5
SIMULATOR_CONFIGURATION_EPOCH_S = 0.5


def lv3_simulator(batches: int, algorithms: int, epochs: int, rounds: int,
                  calibrate: bool, quick: bool) -> Estimate:
    configurations = batches * (1 + algorithms)    # 1 rank: ring only; 2 ranks: each
    calibration = (QUICK_CALIBRATION_S if quick else FULL_CALIBRATION_S) if calibrate \
        else 0.0
    training = configurations * epochs * SIMULATOR_CONFIGURATION_EPOCH_S
    per_round = SIMULATOR_ROUND_S + training
    return Estimate(calibration + rounds * per_round,
                    f"{rounds} rounds x (~{SIMULATOR_ROUND_S:.0f} s of profiles and "
                    f"start-ups + {configurations} configurations x {epochs} epochs x "
                    f"~{SIMULATOR_CONFIGURATION_EPOCH_S:g} s)"
                    + (f" + a {'quick' if quick else 'full'} calibration ~"
                       f"{calibration:.0f} s" if calibrate else "")
                    + ": a smoke run here at load 5.4; more profiled steps and the full "
                      "in-context repeats add to each round")


# docs/performance_models.md ("The link axis against the emulated cluster"): the smoke
# run (quick calibration, 1 rate, 1 epoch) took 66-106 s by the machine's load, the
# full run (full calibration, 3 rates x 3 epochs) 3 min 28 s: fitted through the two,
# ~15 s a rate and epoch (the full calibration's extra folded in) and ~71 s for the
# rest; docs/cluster_emulation.md: a quick calibration on the cluster, ~35 s.
SWEEP_RATE_EPOCH_S = (208.0 - 86.0) / (3 * 3 - 1)
SWEEP_REST_S = 86.0 - SWEEP_RATE_EPOCH_S
CLUSTER_QUICK_CALIBRATION_S = 35.0


def predict_sweep_check(rates: int, epochs: int, calibrate: bool) -> Estimate:
    rest = SWEEP_REST_S - (0.0 if calibrate else CLUSTER_QUICK_CALIBRATION_S)
    return Estimate(rest + rates * epochs * SWEEP_RATE_EPOCH_S,
                    f"{rates} rates x {epochs} epochs at ~{SWEEP_RATE_EPOCH_S:.0f} s and "
                    f"~{rest:.0f} s for the calibration, the prediction and start-ups: "
                    f"fitted to the smoke and full runs of docs/performance_models.md")


# Timed on this machine on 2026-11-29 (load average 4-6), report_scaling.py with 10
# configurations x 100 and x 1000 seeds: the run folder written in 4.5 and 11.7 s, the
# report in 8.1 and 12.0 s; through the two points, ~0.8 ms a record written after a
# 3.7-s template run, and ~0.43 ms a record reported after 7.7 s of start-up (100k
# records: 51 s, as docs/reports.md's 38-55 s under a load of 5-6).
REPORT_SCALING_TEMPLATE_S = 4.5 - 1000 * (11.7 - 4.5) / 9000
REPORT_SCALING_WRITE_S = (11.7 - 4.5) / 9000
REPORT_START_S = 8.1 - 1000 * (12.0 - 8.1) / 9000
REPORT_RECORD_S = (12.0 - 8.1) / 9000


def report_scaling(records: int) -> Estimate:
    write = REPORT_SCALING_TEMPLATE_S + records * REPORT_SCALING_WRITE_S
    report = REPORT_START_S + records * REPORT_RECORD_S
    return Estimate(write + report,
                    f"{records} records written at ~{REPORT_SCALING_WRITE_S * 1e3:.1f} ms "
                    f"and reported at ~{REPORT_RECORD_S * 1e3:.2f} ms each, after ~"
                    f"{REPORT_SCALING_TEMPLATE_S:.0f} s of template run and ~"
                    f"{REPORT_START_S:.0f} s of report start-up: two short runs here at "
                    f"load 4-6")
