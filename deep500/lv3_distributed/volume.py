"""Communication volume: bytes and messages per rank, per collective, counted or modelled.

``CommunicationVolume`` holds, for one rank, one entry per (collective, algorithm):
calls, bytes sent, bytes received, messages sent, messages received, and how the
numbers were obtained:

* ``"exact"``: Deep500 sent the messages itself (its allreduce algorithms, whose
  per-rank traffic the ``*_allreduce_traffic`` functions below state, the binomial
  broadcast, the linear gather and scatter, point-to-point, neighbour exchanges), and
  the counts are the sizes of the buffers it handed to MPI, added up as it sent them.
  A message is one MPI send (zero-byte messages of empty ring chunks included);
  messages a rank would send to itself are local copies, neither sent nor counted.
* ``"modelled (<algorithm>)"``: MPI ran the collective with an algorithm of its own
  choosing (``algorithm="mpi"``), which Deep500 cannot see. The entry then holds the
  analytic volume of the named algorithm, computed by the functions below, and says so.

Byte counts are payload bytes (``ndarray.nbytes``); MPI's headers and protocol
messages (rendezvous handshakes) are not included, for either kind.

``CommunicationVolumeMetric`` wraps a volume in the metric protocol of
``deep500.utils.metric``: bytes and messages per run of a measured region.
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

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


def segment_elements(segment_bytes: int, itemsize: int) -> int:
    """Elements per segment of ``segmented_ring``: the whole elements that fit in
    ``segment_bytes``, at least one."""
    return max(1, int(segment_bytes) // itemsize)


def _segments(elements: int, per_segment: int) -> int:
    return max(1, -(-elements // per_segment))


@lru_cache(maxsize=4096)
def segmented_ring_allreduce_traffic(count: int, itemsize: int, size: int, rank: int,
                                     segment_bytes: int) -> Traffic:
    """The ring allreduce with each chunk sent as segments (Patarasuk & Yuan 2009,
    the pipelined ring): the bytes of ``ring_allreduce_traffic``; a chunk of c_i
    elements travels as k_i = max(1, ceil(c_i / e)) messages, e =
    ``segment_elements(segment_bytes, itemsize)``, so (indices mod p)::

        messages sent     = sum_{i != r+1} k_i + sum_{i != r+2} k_i
        messages received = sum_{i != r} k_i + sum_{i != r+1} k_i

    which is 2(p - 1) ceil(n / (p e)) each way when p divides the n elements.
    """
    if size == 1:
        return Traffic(0, 0, 0, 0)
    ring = ring_allreduce_traffic(count, itemsize, size, rank)
    e = segment_elements(segment_bytes, itemsize)
    k = [_segments(c, e) for c in ring_chunks(count, size)]
    total = sum(k)
    sent = 2 * total - k[(rank + 1) % size] - k[(rank + 2) % size]
    received = 2 * total - k[rank] - k[(rank + 1) % size]
    return Traffic(ring.bytes_sent, ring.bytes_received, sent, received)


def linear_allreduce_traffic(count: int, itemsize: int, size: int, rank: int) -> Traffic:
    """Linear allreduce: reduce at rank 0 (every other rank sends its n bytes there),
    then the root sends the result to each rank (Thakur et al. 2005 call this the
    naive algorithm): rank 0 sends and receives (p - 1) messages of n bytes, every
    other rank one each way."""
    n = count * itemsize
    if size == 1:
        return Traffic(0, 0, 0, 0)
    if rank == 0:
        return Traffic((size - 1) * n, (size - 1) * n, size - 1, size - 1)
    return Traffic(n, n, 1, 1)


def binomial_allreduce_traffic(count: int, itemsize: int, size: int, rank: int) -> Traffic:
    """Binomial-tree reduce to rank 0 then binomial-tree broadcast from it (Thakur et
    al. 2005, 4.1-4.2): a rank with c children in the tree receives c messages of n
    bytes and sends one to its parent, then receives one from the parent and sends c;
    rank 0 (c = ceil(log2 p)) only the c each way."""
    n = count * itemsize
    messages = len(binomial_children(rank, size)) + (1 if rank else 0)
    return Traffic(messages * n, messages * n, messages, messages)


def fold_partner(size: int, rank: int) -> tuple[int | None, int]:
    """Non-power-of-two p (Thakur et al. 2005, 4.4; Rabenseifner 2004): with
    p' = 2^floor(log2 p) and r = p - p', the even ranks below 2r hand their vector to
    the next rank and wait; the odd ones go on as new rank rank // 2, the ranks from
    2r as rank - r. Returns ``(partner, new rank)``: partner ``None`` outside the fold,
    new rank -1 for a rank that waits."""
    rest = size - (1 << (size.bit_length() - 1))
    if rank >= 2 * rest:
        return None, rank - rest
    return (rank + 1, -1) if rank % 2 == 0 else (rank - 1, rank // 2)


def _with_fold(size: int, rank: int, n: int, inner: Traffic) -> Traffic:
    partner, new_rank = fold_partner(size, rank)
    if partner is None:
        return inner
    if new_rank < 0:
        return Traffic(n, n, 1, 1)
    return Traffic(inner.bytes_sent + n, inner.bytes_received + n,
                   inner.messages_sent + 1, inner.messages_received + 1)


@lru_cache(maxsize=4096)
def recursive_doubling_allreduce_traffic(count: int, itemsize: int, size: int,
                                         rank: int) -> Traffic:
    """Recursive doubling (Thakur et al. 2005, 4.4): log2 p' exchanges of the whole
    n bytes each way; for non-power-of-two p the fold adds one message of n bytes
    each way to the 2r ranks in it (the waiting ones send and receive only that)."""
    n = count * itemsize
    steps = (1 << (size.bit_length() - 1)).bit_length() - 1
    return _with_fold(size, rank, n, Traffic(steps * n, steps * n, steps, steps))


@lru_cache(maxsize=4096)
def rabenseifner_allreduce_traffic(count: int, itemsize: int, size: int,
                                   rank: int) -> Traffic:
    """Rabenseifner's allreduce (Rabenseifner, ICCS 2004; Thakur et al. 2005, 4.4):
    the n elements cut into p' blocks (``ring_chunks``); reduce-scatter step k sends
    the half of the block range R_k held that the partner keeps and receives the other
    half, the allgather repeats the steps in reverse with the halves swapped, so each
    step moves |R_k| elements each way over both phases::

        bytes sent = bytes received = itemsize * sum_{k < log2 p'} |R_k|,
        R_0 = all blocks, R_{k+1} = the half of R_k picked by bit k of the new rank
        messages = 2 log2 p' each way

    which is 2(p'-1)/p' n bytes when p' divides the elements; plus the fold's one
    message of n bytes each way for the 2r ranks in it.
    """
    n = count * itemsize
    partner, new_rank = fold_partner(size, rank)
    pof2 = 1 << (size.bit_length() - 1)
    if new_rank < 0:
        return Traffic(n, n, 1, 1)
    chunks = ring_chunks(count, pof2)
    lo, hi, mask, moved, steps = 0, pof2, 1, 0, 0
    while mask < pof2:
        moved += sum(chunks[lo:hi])
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if not new_rank & mask else (mid, hi)
        mask <<= 1
        steps += 2
    return _with_fold(size, rank, n, Traffic(moved * itemsize, moved * itemsize, steps,
                                             steps))


def allreduce_traffic(algorithm: str, count: int, itemsize: int, size: int, rank: int,
                      segment_bytes: int | None = None) -> Traffic:
    """The per-rank traffic of one allreduce by Deep500's ``algorithm`` (``"ring"``,
    ``"segmented_ring"``, ``"linear"``, ``"binomial"``, ``"recursive_doubling"``,
    ``"rabenseifner"``); ``segment_bytes`` for ``segmented_ring`` only."""
    if size == 1:
        return Traffic(0, 0, 0, 0)
    if algorithm == "segmented_ring":
        return segmented_ring_allreduce_traffic(count, itemsize, size, rank,
                                                segment_bytes)
    return _ALLREDUCE_TRAFFIC[algorithm](count, itemsize, size, rank)


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


_ALLREDUCE_TRAFFIC = {"ring": ring_allreduce_traffic,
                      "linear": linear_allreduce_traffic,
                      "binomial": binomial_allreduce_traffic,
                      "recursive_doubling": recursive_doubling_allreduce_traffic,
                      "rabenseifner": rabenseifner_allreduce_traffic}


# -- the counters -----------------------------------------------------------------------
class VolumeEntry:
    """Counters of one (collective, algorithm) on one rank."""
    __slots__ = ("collective", "algorithm", "counted") + _FIELDS

    def __init__(self, collective: str, algorithm: str, counted: str):
        self.collective = collective
        self.algorithm = algorithm
        self.counted = counted
        self.calls = self.bytes_sent = self.bytes_received = 0
        self.messages_sent = self.messages_received = 0

    def to_dict(self) -> dict:
        return {"collective": self.collective, "algorithm": self.algorithm,
                "counted": self.counted,
                **{name: getattr(self, name) for name in _FIELDS}}

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
               bytes_received: int, messages_sent: int, messages_received: int) -> None:
        """Add one call's traffic to the entry of (collective, algorithm)."""
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

    def record_traffic(self, collective: str, algorithm: str, counted: str,
                       traffic: Traffic) -> None:
        self.record(collective, algorithm, counted, *traffic)

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

    def reset(self) -> None:
        self._entries = {}

    def copy(self) -> "CommunicationVolume":
        twin = CommunicationVolume(self.rank, self.size)
        for key, entry in self._entries.items():
            clone = VolumeEntry(entry.collective, entry.algorithm, entry.counted)
            for name in _FIELDS:
                setattr(clone, name, getattr(entry, name))
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
