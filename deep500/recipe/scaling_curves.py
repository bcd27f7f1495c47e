"""Weak- and strong-scaling curves of one training workload on a machine model, by
``d5.simulate_training``: what ``deep500 predict`` prints and plots, and the ``models``
experiment's predicted curves (docs/performance_models.md).

Weak scaling keeps the batch per rank (efficiency T(1)/T(p)); strong scaling keeps a
global batch G and gives each rank G/p samples (speedup T(1)/T(p) and efficiency
speedup/p; rank counts with G/p < 1 are left out).
"""
from __future__ import annotations

from dataclasses import dataclass

# strong scaling's global batch, in batches per rank, where none is given
STRONG_BATCH_FACTOR = 64


@dataclass(frozen=True)
class Workload:
    """One distinct training setting of the recipe that the curves are predicted for."""
    label: str
    network: object          # NetworkSpec
    dataset: dict
    loss: str
    seed: int
    optimizer: dict
    batch: int
    threads: int
    algorithm: str
    segment_bytes: int | None


def curves(profile, machine, workload: Workload, ranks, global_batch: int | None = None,
           overlap: bool = False, comm_dtype: str = "float32") -> dict:
    """{"weak": [...], "strong": [...]} rows of SimulatedStep dicts per rank count."""
    import deep500 as d5
    options = dict(algorithm=workload.algorithm, overlap=overlap, comm_dtype=comm_dtype,
                   segment_bytes=workload.segment_bytes)
    weak = []
    for p in ranks:
        step = d5.simulate_training(profile, machine, p, batch_per_rank=workload.batch,
                                    **options)
        weak.append(step.to_dict())
    strong = []
    g = int(global_batch or workload.batch * STRONG_BATCH_FACTOR)
    one = d5.simulate_training(profile, machine, 1, batch_per_rank=g, **options)
    for p in ranks:
        if g // p < 1:
            continue
        step = d5.simulate_training(profile, machine, p, batch_per_rank=g // p, **options)
        row = step.to_dict()
        row["speedup"] = one.step_s / step.step_s
        row["strong_efficiency"] = row["speedup"] / p
        row["global_batch"] = (g // p) * p
        strong.append(row)
    return {"weak": weak, "strong": strong, "global_batch": g}
