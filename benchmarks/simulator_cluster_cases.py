"""What ``benchmarks/lv3_simulator.py --cluster`` measures: the models, the four ways a
step communicates, the recipe settings of one model on N nodes, and the runtime
estimate printed at the start.

Models (zoo models, reference executor, reference SGD, one thread per rank), each sized
so that its step takes 20–200 ms on a rank and its gradient allreduce is a visible
share of the step at its link rate (steps measured on this project's 2-vCPU VM):

========  ==================================  =====  =========  ==========  =======
key       model, data                         batch  gradients  link rate   bucket
========  ==================================  =====  =========  ==========  =======
mlp       MLP 64-1024-1024-1024-10,           16     8.7 MB     1 Gbit/s    1 MiB
          synthetic 1x8x8 (the digits' shape)
lenet     LeNet-5, synthetic 3x32x32          16     0.25 MB    250 Mbit/s  64 KiB
resnet20  ResNet-20 (zero-initialised         8      1.09 MB    250 Mbit/s  256 KiB
          residual scales), synthetic 3x16x16
========  ==================================  =====  =========  ==========  =======

The MLP is communication-bound (about 75 ms of allreduce at 1 Gbit/s against 15 ms of
compute); LeNet's 0.25 MB would be 10% of its step at 1 Gbit/s and goes over 250 Mbit/s
links instead (a quarter to a third of the step), as does ResNet-20's 1.09 MB (about
40% of a step whose compute is about 60 ms at 16x16 pixels; at CIFAR's 32x32 a step of
batch 4 took 180 ms).
Buckets are sized so that the overlapped step has several (LeNet's fully connected
layers form one that starts while its convolutions still run backward). The zoo's
transformer can be profiled too (``lv0_operators.cost_model`` has rules for its
operators since 2026-11-28) but is not a case yet: it trains on the generated
token-order task, whose 27k parameters would need a slower link than these to matter.

Communication, ``ConsistentDecentralized`` with float32 or bfloat16 on the wire and
Deep500's ring allreduce in both modes (the simulator is given the same algorithm):

* blocking: one ring allreduce of the fused gradients after backprop (it narrows each
  chunk to the wire type itself);
* overlapped: Deep500's non-blocking ring per bucket during backprop
  (``collectives/ring_request.py``; it narrows as the blocking ring does),
  ``progress="thread"``: a background thread tests every 0.5 ms so that the link keeps
  moving while a node computes.

Not ``mpi``: MPICH reduces a narrowed buffer with a user-defined operation, a Python
callback, and an 8.7 MB bfloat16 allreduce then took 105 ms against 80 ms in float32
and 40 ms for the same bytes with a built-in operation (2 nodes, 1 Gbit/s), a cost the
simulator prices only as two casts (docs/performance_models.md says why). Until
2026-11-29 the overlapped rows ran ``MPI_Iallreduce`` (the non-blocking ring could not
narrow then), and their bf16 rows were the sweep's worst (0.67–0.75 of the measured
step).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from deep500.lv3_distributed.cluster.spec import cluster_from_mapping

ALGORITHMS = {"blocking": "ring", "overlapped": "ring"}   # measured and simulated
SCHEME = "ConsistentDecentralized"
MODES = (("blocking", "float32"), ("blocking", "bfloat16"),
         ("overlapped", "float32"), ("overlapped", "bfloat16"))
WIRE = {"float32": "fp32", "bfloat16": "bf16"}
TEST_SAMPLES = 32
LEARNING_RATE = 0.01        # random labels: a small rate keeps every loss finite


@dataclass(frozen=True)
class Case:
    """One model of the sweep: its zoo network and dataset (recipe syntax), batch per
    rank, link rate, overlap bucket, and its step alone on this host (measured once,
    for the runtime estimate only)."""
    key: str
    label: str
    network: dict
    dataset: dict
    batch: int
    rate: str
    bucket_bytes: int
    alone_step_s: float

    @functools.cached_property
    def gradient_bytes(self) -> int:
        """Bytes of float32 gradients: the zoo model built for the dataset's shape."""
        import deep500 as d5
        from deep500.networks import create_model, parameter_count
        dataset = dict(self.dataset)
        shape = d5.dataset_shape(dataset.pop("name"), **dataset)
        network = dict(self.network)
        model = create_model(network.pop("model"), input_shape=shape["input"],
                             classes=shape["classes"], **network)
        return 4 * parameter_count(model)


CASES = {case.key: case for case in (
    Case("mlp", "mlp 64-1024-1024-1024-10",
         {"model": "mlp", "hidden": [1024, 1024, 1024]},
         {"name": "synthetic", "shape": [1, 8, 8]}, 16, "1gbit", 1 << 20, 0.015),
    Case("lenet", "lenet-5 3x32x32",
         {"model": "lenet"}, {"name": "synthetic", "shape": [3, 32, 32]}, 16, "250mbit",
         64 << 10, 0.021),
    Case("resnet20", "resnet-20 3x16x16",
         {"model": "resnet20", "zero_init_residual": True},
         {"name": "synthetic", "shape": [3, 16, 16]}, 8, "250mbit", 256 << 10, 0.057),
)}


def configurations(nodes: int) -> list:
    """The (mode, wire dtype) pairs measured on ``nodes`` nodes: all four with a
    network; on one node only blocking float32 (without communication the other three
    run the same step)."""
    return list(MODES) if nodes > 1 else [MODES[0]]


def scheme_entry(case: Case, mode: str, dtype: str) -> dict:
    """The recipe's scheme entry of one configuration."""
    entry = {"scheme": SCHEME, "algorithm": ALGORITHMS[mode], "comm_dtype": dtype}
    if mode == "overlapped":
        # A compute-only pass every 10 steps gives the run's own compute speed (the
        # prediction at the run's speed); it lengthens 1 step in 10, which the median
        # over steps passes over.
        entry.update(overlap=True, bucket_bytes=case.bucket_bytes, progress="thread",
                     compute_only_every=10)
    return entry


def mode_of(scheme: dict) -> tuple:
    """(mode, dtype) of a record's scheme entry."""
    return ("overlapped" if scheme.get("overlap") else "blocking",
            scheme.get("comm_dtype", "float32"))


def settings(case: Case, nodes: int, steps: int) -> dict:
    """The recipe's fixed settings of ``case`` on ``nodes`` ranks: an epoch of ``steps``
    steps plus the first, which the step times leave out."""
    dataset = {**case.dataset, "train_samples": (steps + 1) * case.batch * nodes,
               "test_samples": TEST_SAMPLES}
    return {"dataset": dataset, "network": dict(case.network),
            "optimizer": {"type": "sgd", "learning_rate": LEARNING_RATE},
            "batch_size": case.batch, "epochs": 1, "loss": "softmax_cross_entropy",
            "threads": 1, "seed": 0, "test_batch_size": TEST_SAMPLES}


def recipe(case: Case, nodes: int, steps: int) -> dict:
    """One launch: every configuration of ``case`` on ``nodes`` nodes."""
    return {"name": f"simulator-cluster-{case.key}-{nodes}", "experiment": "distributed",
            "fixed": settings(case, nodes, steps),
            "mutable": {"scheme": [scheme_entry(case, mode, dtype)
                                   for mode, dtype in configurations(nodes)]},
            "metrics": {"TrainingAccuracy": {}}}


def cluster_spec(nodes: int, rate: str, extra: dict):
    """The ClusterSpec of ``nodes`` nodes at ``rate`` with the user's other fields."""
    return cluster_from_mapping({**extra, "nodes": nodes, "rate": rate}, "--cluster")


# The parts of the runtime estimate, measured on this project's 2-vCPU VM: a quick
# calibration of 2 nodes took 33-41 s at 1 Gbit/s and 85-95 s at 250 Mbit/s (a fixed
# part and the traffic of its allreduce-in-context table at the link rate); a full one
# 3 min at 1 Gbit/s. A launch of ``deep500 run`` starts in about 12 s and each
# configuration sets up in about 4 s; a profile runs a step about 6 times per rerun.
CALIBRATION_FIXED_S = {"quick": 15.0, "full": 60.0}
CALIBRATION_BYTES = {"quick": 2.4e9, "full": 1.45e10}
LAUNCH_S, CONFIGURATION_S, PROFILE_STEPS_PER_RERUN = 12.0, 4.0, 6


def step_estimate(case: Case, nodes: int, cores: int) -> float:
    """A rough step time: the step alone, slowed by sharing the cores, plus a ring
    allreduce of the gradients at the TCP payload rate of the link."""
    rate = cluster_spec(2, case.rate, {}).rate_bytes * 1448 / 1514
    wire = 2 * (nodes - 1) / nodes * case.gradient_bytes / rate
    return case.alone_step_s * max(1.0, nodes / cores) + wire


def runtime_estimate(cases, nodes, rounds: int, steps: int, reruns: int, calibrations,
                     cores: int) -> float:
    """Seconds the sweep should take (the parts above; each calibration ("quick",
    "full") once per node count and rate)."""
    seconds = 0.0
    for count in (n for n in nodes if n > 1):
        for rate in {case.rate for case in cases}:
            link = cluster_spec(count, rate, {}).rate_bytes * 1448 / 1514
            seconds += sum(CALIBRATION_FIXED_S[kind] + CALIBRATION_BYTES[kind] / link
                           * 2 * (count - 1) / count * max(1.0, count / cores)
                           for kind in calibrations)
    for count in nodes:
        for case in cases:
            step = step_estimate(case, count, cores)
            alone = case.alone_step_s * max(1.0, count / cores)
            seconds += rounds * (LAUNCH_S + len(configurations(count)) *
                                 (CONFIGURATION_S + (steps + 2) * step)
                                 + reruns * PROFILE_STEPS_PER_RERUN * alone)
    return seconds


def gradient_share(case: Case) -> float:
    """The allreduce's share of a 2-node blocking step by ``step_estimate``."""
    step = step_estimate(case, 2, 2)
    return 1 - case.alone_step_s / step if step > 0 else math.nan
