"""What one calibration measures: sizes, repeats and time budgets (``quick`` for tests
and for the ``models`` experiment's calibration on the ranks of a run)."""
from __future__ import annotations

from dataclasses import dataclass

from deep500.lv3_distributed.calibration.coherence import (COHERENCE_SIZES,
                                                           COHERENCE_SIZES_QUICK)
from deep500.utils.threads import usable_cpu_count


@dataclass
class Plan:
    """Sizes, repeats and time budgets of one calibration."""
    pingpong_sizes: list
    pingpong_budget_s: float     # per size
    pingpong_min_repeats: int
    pingpong_max_repeats: int
    gamma_sizes: list            # buffer sizes of γ, cache-resident first, memory-resident last
    triad_elements: int
    gemm_n: int
    conv_shape: tuple            # (N, C, H, W, K), 3x3 kernel, padding 1
    repeats: int
    max_threads: int
    allreduce_budget_s: float = 0.25   # per algorithm, 4-byte allreduce calls
    allreduce_min_repeats: int = 50
    allreduce_max_repeats: int = 5000
    context_repeats: int = 100         # per algorithm and size, allreduce in context
    coherence_sizes: tuple = ()        # buffer sizes of δ_sum and δ_receive
    overlap_repeats: int = 20          # per non-blocking algorithm, overlap beside compute

    @classmethod
    def make(cls, quick: bool = False) -> "Plan":
        cpus = usable_cpu_count()
        if quick:
            return cls([4 ** k for k in range(0, 11)], 0.02, 5, 50,
                       [64 << 10, 1 << 20, 4 << 20], 1 << 18, 192, (2, 16, 16, 16, 16), 5,
                       min(cpus, 2), 0.02, 20, 500, 30, COHERENCE_SIZES_QUICK, 8)
        return cls([2 ** k for k in range(0, 27)], 0.25, 10, 1000,
                   [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20],
                   1 << 23, 1024, (8, 64, 32, 32, 64), 10, cpus,
                   coherence_sizes=COHERENCE_SIZES)

    def repeats_for(self, estimate_s: float) -> int:
        """Repeats of one ping-pong or exchange size whose first timing took
        ``estimate_s``: its time budget's worth, within the minimum and maximum."""
        return int(min(self.pingpong_max_repeats,
                       max(self.pingpong_min_repeats, self.pingpong_budget_s / estimate_s)))
