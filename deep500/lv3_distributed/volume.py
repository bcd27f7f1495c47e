"""Communication volume: bytes and messages per rank, per collective, counted or modelled.

``CommunicationVolume`` holds, for one rank, one entry per (collective, algorithm):
calls, bytes sent, bytes received, messages sent, messages received, and how the
numbers were obtained:

* ``"exact"``: Deep500 sent the messages itself (its allreduce algorithms, each of
  which states its per-rank traffic in closed form, ``AllreduceAlgorithm.traffic`` in
  ``deep500.lv3_distributed.collectives``; the binomial broadcast, the linear gather
  and scatter, point-to-point, neighbour exchanges), and
  the counts are the sizes of the buffers it handed to MPI, added up as it sent them.
  A message is one MPI send (zero-byte messages of empty ring chunks included);
  messages a rank would send to itself are local copies, neither sent nor counted.
* ``"modelled (<algorithm>)"``: MPI ran the collective with an algorithm of its own
  choosing (``algorithm="mpi"``), which Deep500 cannot see. The entry then holds the
  analytic volume of the named algorithm, computed by the functions below, and says so.

Every entry also keeps a :class:`~deep500.lv3_distributed.message_sizes.MessageSizeHistogram`
of the messages this rank sent (power-of-two bins of counts and bytes), whose totals
are the entry's ``bytes_sent`` and ``messages_sent``: exact where Deep500 sent the
messages (each buffer's size as handed to MPI), the named algorithm's messages where
the entry is modelled and the model states them (the ring's chunks, the binomial
trees' buffers, the barrier's empty messages), and ``unsized`` where a model states only
totals (see ``record``).

Byte counts are payload bytes (``ndarray.nbytes``); MPI's headers and protocol
messages (rendezvous handshakes) are not included, for either kind.

``CommunicationVolumeMetric`` wraps a volume in the metric protocol of
``deep500.utils.metric``: bytes and messages per run of a measured region.
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from deep500.lv3_distributed.message_sizes import MessageSizeHistogram
from deep500.utils.metric import MetricResult, TestMetric

EXACT = "exact"
_FIELDS = ("calls", "bytes_sent", "bytes_received", "messages_sent", "messages_received")


class Traffic(NamedTuple):
    """One rank's traffic in one call of a collective."""
    bytes_sent: int
    bytes_received: int
    messages_sent: int
    messages_received: int


def modelled(algorithm: str) -> str:
    return f"modelled ({algorithm})"


# -- analytic volumes of named algorithms -----------------------------------------------
def ring_chunks(count: int, size: int) -> list[int]:
    """Elements per chunk when ``count`` elements are cut into ``size`` chunks: the first
    ``count % size`` chunks hold one element more (as ``numpy.array_split``)."""
    base, extra = divmod(count, size)
    return [base + (1 if i < extra else 0) for i in range(size)]


@lru_cache(maxsize=4096)  # called on every modelled call: keep it cheap
def ring_allreduce_traffic(count: int, itemsize: int, size: int, rank: int) -> Traffic:
    """The bandwidth-optimal ring allreduce (Patarasuk & Yuan, "Bandwidth optimal
    all-reduce algorithms for clusters of workstations", JPDC 2009): a reduce-scatter
    of p - 1 steps, then an allgather of p - 1 steps, one message to the right and one
    from the left per step.

    With chunk sizes c_i (``ring_chunks``), rank r sends every chunk but c_{r+1} in the
    reduce-scatter and every chunk but c_{r+2} in the allgather, and receives every
    chunk but c_r, then every chunk but c_{r+1} (indices mod p)::

        sent     = (2n - c_{r+1} - c_{r+2}) * itemsize
        received = (2n - c_r - c_{r+1}) * itemsize
        messages = 2(p - 1) each way

    which is 2(p-1)/p * n * itemsize each way when p divides n, the lower bound for
    any allreduce.
    """
    if size == 1:
        return Traffic(0, 0, 0, 0)
    c = ring_chunks(count, size)
    sent = 2 * count - c[(rank + 1) % size] - c[(rank + 2) % size]
    received = 2 * count - c[rank] - c[(rank + 1) % size]
    return Traffic(sent * itemsize, received * itemsize, 2 * (size - 1), 2 * (size - 1))


@lru_cache(maxsize=4096)
def ring_allreduce_message_sizes(count: int, itemsize: int, size: int,
                                 rank: int) -> tuple[tuple[int, int], ...]:
    """The messages rank ``rank`` sends in the ring allreduce, as ``(bytes, how many)``
    pairs: every chunk but c_{r+1} in the reduce-scatter, every chunk but c_{r+2} in the
    allgather (``ring_allreduce_traffic``); at most two distinct sizes."""
    if size == 1:
        return ()
    c = ring_chunks(count, size)
    sizes: dict[int, int] = {}
    for skipped in ((rank + 1) % size, (rank + 2) % size):
        for chunk, elements in enumerate(c):
            if chunk != skipped:
                sizes[elements * itemsize] = sizes.get(elements * itemsize, 0) + 1
    return tuple(sorted(sizes.items()))


def binomial_parent(relative: int) -> int:
    """Parent of relative rank ``relative`` > 0 in MPICH's binomial tree: the rank with
    its lowest set bit cleared (Thakur, Rabenseifner & Gropp, "Optimization of
    collective communication operations in MPICH", IJHPCA 2005)."""
    return relative & (relative - 1)


def binomial_children(relative: int, size: int) -> list[int]:
    """Children of ``relative`` (root 0): relative + 2^k for every 2^k below its lowest
    set bit (every 2^k < size for the root) that is still below ``size``."""
    limit = (relative & -relative) if relative else size
    children, mask = [], 1
    while mask < limit and relative + mask < size:
        children.append(relative + mask)
        mask <<= 1
    return children


def binomial_subtree(relative: int, size: int) -> int:
    """Ranks in the subtree rooted at ``relative``, itself included."""
    if relative == 0:
        return size
    return min(relative & -relative, size - relative)


@lru_cache(maxsize=4096)
def binomial_broadcast_traffic(nbytes: int, size: int, rank: int, root: int) -> Traffic:
    """Binomial-tree broadcast (MPICH's algorithm for short messages and for fewer than
    8 ranks; Thakur et al. 2005): every rank but the root receives the buffer once from
    its parent and sends it to each of its children."""
    relative = (rank - root) % size
    children = len(binomial_children(relative, size))
    received = 0 if relative == 0 else 1
    return Traffic(children * nbytes, received * nbytes, children, received)


@lru_cache(maxsize=4096)
def binomial_gather_traffic(nbytes: int, size: int, rank: int, root: int) -> Traffic:
    """Binomial-tree gather (MPICH's intra-communicator gather; Thakur et al. 2005):
    each child sends its whole subtree's blocks to its parent in one message, so a rank
    sends subtree·n bytes and receives (subtree - 1)·n; the root receives (p - 1)·n."""
    relative = (rank - root) % size
    children = binomial_children(relative, size)
    received = sum(binomial_subtree(child, size) for child in children) * nbytes
    if relative == 0:
        return Traffic(0, received, 0, len(children))
    return Traffic(binomial_subtree(relative, size) * nbytes, received, 1, len(children))


@lru_cache(maxsize=4096)
def binomial_scatter_traffic(nbytes: int, size: int, rank: int, root: int) -> Traffic:
    """Binomial-tree scatter (MPICH's intra-communicator scatter; Thakur et al. 2005):
    the gather's messages reversed."""
    gather = binomial_gather_traffic(nbytes, size, rank, root)
    return Traffic(gather.bytes_received, gather.bytes_sent, gather.messages_received,
                   gather.messages_sent)


def binomial_scatter_message_sizes(nbytes: int, size: int, rank: int,
                                   root: int) -> list[tuple[int, int]]:
    """The messages of ``binomial_scatter_traffic``: one to each child, of its whole
    subtree's blocks."""
    relative = (rank - root) % size
    return [(binomial_subtree(child, size) * nbytes, 1)
            for child in binomial_children(relative, size)]


def linear_gather_traffic(nbytes: int, size: int, rank: int, root: int) -> Traffic:
    """Linear (flat-tree) gather: every other rank sends its n bytes to the root."""
    if size == 1:
        return Traffic(0, 0, 0, 0)
    if rank == root:
        return Traffic(0, (size - 1) * nbytes, 0, size - 1)
    return Traffic(nbytes, 0, 1, 0)


def linear_scatter_traffic(nbytes: int, size: int, rank: int, root: int) -> Traffic:
    """Linear (flat-tree) scatter: the root sends each other rank its n bytes."""
    gather = linear_gather_traffic(nbytes, size, rank, root)
    return Traffic(gather.bytes_received, gather.bytes_sent, gather.messages_received,
                   gather.messages_sent)


def dissemination_barrier_traffic(size: int) -> Traffic:
    """Dissemination barrier (Hensgen, Finkel & Manber 1988; MPICH's barrier):
    ceil(log2 p) zero-byte messages each way."""
    rounds = (size - 1).bit_length()
    return Traffic(0, 0, rounds, rounds)


# -- the counters -----------------------------------------------------------------------
class VolumeEntry:
    """Counters of one (collective, algorithm) on one rank."""
    __slots__ = ("collective", "algorithm", "counted", "sizes") + _FIELDS

    def __init__(self, collective: str, algorithm: str, counted: str):
        self.collective = collective
        self.algorithm = algorithm
        self.counted = counted
        self.sizes = MessageSizeHistogram()
        self.calls = self.bytes_sent = self.bytes_received = 0
        self.messages_sent = self.messages_received = 0

    def to_dict(self) -> dict:
        return {"collective": self.collective, "algorithm": self.algorithm,
                "counted": self.counted,
                **{name: getattr(self, name) for name in _FIELDS},
                "message_sizes": self.sizes.to_dict()}

    def __repr__(self) -> str:
        return (f"VolumeEntry({self.collective}:{self.algorithm}, {self.counted}, "
                f"calls={self.calls}, sent={self.bytes_sent} B/{self.messages_sent} msgs, "
                f"received={self.bytes_received} B/{self.messages_received} msgs)")


class CommunicationVolume:
    """Bytes and messages one rank sent and received, per collective and algorithm.

    Entries are keyed ``"<collective>:<algorithm>"`` (``"allreduce:ring"``,
    ``"allreduce:mpi"``, ``"broadcast:binomial"``, ``"send:direct"``), so exact and
    modelled counts of the same collective never mix; each says how it was counted
    (see the module docstring). ``CommunicationNetwork`` records into one of these per
    call; recording is a dictionary lookup and five integer additions (well under 1%
    of a 1 MB allreduce; ``benchmarks/lv3_allreduce.py`` prints the measured cost).
    """

    def __init__(self, rank: int = 0, size: int = 1):
        self.rank = rank
        self.size = size
        self._entries: dict[tuple[str, str], VolumeEntry] = {}

    def record(self, collective: str, algorithm: str, counted: str, bytes_sent: int,
               bytes_received: int, messages_sent: int, messages_received: int,
               sizes=None) -> None:
        """Add one call's traffic to the entry of (collective, algorithm).

        ``sizes``: the messages sent, as ``(bytes, how many)`` pairs or a
        ``MessageSizeHistogram``, whose totals must be ``bytes_sent`` and
        ``messages_sent``. Without it one message is ``bytes_sent`` bytes, and several
        go to the histogram's ``unsized`` messages."""
        entry = self._entries.get((collective, algorithm))
        if entry is None:
            entry = self._entries[(collective, algorithm)] = VolumeEntry(
                collective, algorithm, counted)
        elif entry.counted != counted:
            entry.counted = "mixed"
        entry.calls += 1
        entry.bytes_sent += bytes_sent
        entry.bytes_received += bytes_received
        entry.messages_sent += messages_sent
        entry.messages_received += messages_received
        if sizes is not None:
            if isinstance(sizes, MessageSizeHistogram):
                entry.sizes.merge(sizes)
            else:
                entry.sizes.add_sizes(sizes)
        elif messages_sent == 1:
            entry.sizes.add(bytes_sent)
        elif messages_sent or bytes_sent:
            entry.sizes.add_unsized(bytes_sent, messages_sent)

    def record_traffic(self, collective: str, algorithm: str, counted: str,
                       traffic: Traffic, sizes=None) -> None:
        self.record(collective, algorithm, counted, *traffic, sizes=sizes)

    @property
    def entries(self) -> dict[str, VolumeEntry]:
        """Entries by ``"<collective>:<algorithm>"``, in the order first recorded."""
        return {f"{c}:{a}": e for (c, a), e in self._entries.items()}

    def entry(self, collective: str, algorithm: str) -> VolumeEntry:
        """The entry of (collective, algorithm); an all-zero one if never recorded."""
        found = self._entries.get((collective, algorithm))
        return found if found is not None else VolumeEntry(collective, algorithm, EXACT)

    def total(self) -> dict:
        """Sums over every entry; ``counted`` is ``"exact"`` only if every entry is."""
        sums = {name: sum(getattr(e, name) for e in self._entries.values())
                for name in _FIELDS}
        exact = all(e.counted == EXACT for e in self._entries.values())
        return {**sums, "counted": EXACT if exact else "includes modelled"}

    def message_sizes(self) -> MessageSizeHistogram:
        """The message-size histogram over every entry."""
        merged = MessageSizeHistogram()
        for entry in self._entries.values():
            merged.merge(entry.sizes)
        return merged

    def reset(self) -> None:
        self._entries = {}

    def copy(self) -> "CommunicationVolume":
        twin = CommunicationVolume(self.rank, self.size)
        for key, entry in self._entries.items():
            clone = VolumeEntry(entry.collective, entry.algorithm, entry.counted)
            for name in _FIELDS:
                setattr(clone, name, getattr(entry, name))
            clone.sizes = entry.sizes.copy()
            twin._entries[key] = clone
        return twin

    def __sub__(self, earlier: "CommunicationVolume") -> "CommunicationVolume":
        """What was recorded since ``earlier`` (a ``copy()`` taken before)."""
        difference = self.copy()
        for key, entry in difference._entries.items():
            before = earlier._entries.get(key)
            if before is not None:
                for name in _FIELDS:
                    setattr(entry, name, getattr(entry, name) - getattr(before, name))
                entry.sizes = entry.sizes - before.sizes
        difference._entries = {k: e for k, e in difference._entries.items() if e.calls}
        return difference

    def to_dict(self) -> dict:
        return {"rank": self.rank, "size": self.size,
                "entries": {key: e.to_dict() for key, e in self.entries.items()},
                "total": self.total()}

    def __repr__(self) -> str:
        total = self.total()
        return (f"CommunicationVolume(rank={self.rank}/{self.size}, "
                f"sent={total['bytes_sent']} B, received={total['bytes_received']} B, "
                f"{len(self._entries)} entries, {total['counted']})")


class CommunicationVolumeMetric(TestMetric):
    """Bytes and messages this rank sent and received per run of a measured region.

    Give it the ``CommunicationNetwork`` (or its ``CommunicationVolume``) that the
    region communicates through. The primary value is bytes sent per run (the median
    over runs; deterministic schemes send the same every run); the samples keep each
    run's totals, ``conditions`` the rank, size and per-entry breakdown of the last run.
    """

    def __init__(self, network_or_volume):
        self._volume = getattr(network_or_volume, "volume", network_or_volume)
        self._before: CommunicationVolume | None = None
        self._runs: list[CommunicationVolume] = []

    @property
    def name(self) -> str:
        return "CommunicationVolume"

    def begin(self, inputs=None) -> None:
        self._before = self._volume.copy()

    def end(self, outputs=None) -> None:
        self._runs.append(self._volume - self._before)

    def reset(self) -> None:
        self._runs = []

    def measure(self, inputs=None, outputs=None, reference_outputs=None) -> MetricResult:
        totals = [run.total() for run in self._runs]
        summary = {"runs": len(totals)}
        for name in _FIELDS[1:]:
            values = sorted(t[name] for t in totals)
            summary[name] = values[len(values) // 2] if values else 0
        summary["counted"] = (EXACT if all(t["counted"] == EXACT for t in totals)
                              else "includes modelled")
        last = self._runs[-1].to_dict()["entries"] if self._runs else {}
        return MetricResult(metric=self.name, summary=summary, primary="bytes_sent",
                            unit="bytes", samples=totals,
                            conditions={"rank": self._volume.rank,
                                        "size": self._volume.size, "entries": last})
