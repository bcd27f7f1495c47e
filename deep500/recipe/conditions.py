"""The conditions one configuration is measured under, resolved once by the runner,
applied in a ``with`` that puts the previous ones back, and recorded with the
configuration's record (as ``torch.utils.benchmark`` carries ``num_threads`` in a frozen
task spec and restores the count after the measurement).

Threads: the recipe's ``threads`` (fixed, or varied under ``mutable:``) where it gives
one, else :func:`deep500.utils.threads.resolve_threads`'s default, the usable CPUs
shared by the configuration's ranks. ``deep500 run``, ``deep500 predict`` and the
``models`` experiment all resolve it there.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

from deep500.utils.threads import resolve_threads, thread_counts


@dataclass(frozen=True)
class Conditions:
    """What one configuration is measured under: ``threads`` intra-op threads per rank
    (resolved), of which the recipe asked for ``requested_threads`` (None: the
    default)."""
    threads: int
    requested_threads: int | None = None

    @classmethod
    def of(cls, configuration: dict, ranks: int) -> "Conditions":
        """The conditions of ``configuration`` run on ``ranks`` ranks (its own ``ranks``
        where it names them, as in a rank grid)."""
        requested = configuration.get("threads")
        return cls(resolve_threads(requested, configuration.get("ranks") or ranks),
                   requested)

    @contextlib.contextmanager
    def applied(self):
        """Run the body under these conditions; on exit the thread counts in force
        before are back. Yields the record's ``threads`` entry: the requested and
        resolved counts and every library's counts in force inside
        (:func:`deep500.utils.threads.thread_conditions`)."""
        with thread_counts(self.threads) as in_force:
            yield {"requested": self.requested_threads, "resolved": self.threads,
                   "in_force": in_force}


def threads_of_plan(configurations: list[dict], ranks: int) -> list[int]:
    """The distinct resolved thread counts of a run's configurations, in plan order."""
    return list(dict.fromkeys(Conditions.of(c, ranks).threads for c in configurations))
