"""Deep500's own allreduce algorithms, on ``Send``/``Recv``/``Sendrecv`` of mpi4py buffers.

Each function reduces ``target`` (the flattened result buffer, already holding this
rank's contribution) over the ranks of ``net`` (a ``CommunicationNetwork``) in place
with ``ufunc`` (``numpy.add``, ``maximum`` or ``minimum``), divides by p if
``average``, and returns the :class:`~deep500.lv3_distributed.volume.Traffic` it handed
to MPI, added up as it sent: the ``*_allreduce_traffic`` functions of ``volume.py``
state the same counts in closed form (the tests check that they agree for p = 2..5).
A message is one MPI send (zero-byte ones included, e.g. empty blocks when there are
fewer elements than ranks). Every rank ends with bit-identical results: each element
is reduced at one rank and copied, or reduced symmetrically (a + b on one side, b + a
on the other, equal in IEEE arithmetic since all four reductions are commutative).

Algorithms (R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of collective
communication operations in MPICH", IJHPCA 19(1), 2005; P. Patarasuk, X. Yuan,
"Bandwidth optimal all-reduce algorithms for clusters of workstations", JPDC 69(2),
2009). p ranks, n bytes per rank, p' = 2^floor(log2 p):

* ``linear``: every rank sends its buffer to rank 0, which receives them in rank order
  and reduces; rank 0 then sends the result to every rank (a linear broadcast). Rank 0:
  p - 1 messages of n bytes each way; others: one each way.
* ``binomial``: binomial-tree reduce to rank 0 (relative rank v receives from
  v + 2^k for every 2^k below its lowest set bit, then sends to v with that bit
  cleared), then the binomial-tree broadcast down the same tree (Thakur et al. 2005,
  sections 4.1-4.2).
* ``recursive_doubling``: log2 p' steps; at step k ranks whose (new) ranks differ in
  bit k exchange their whole buffers and both reduce (Thakur et al. 2005, 4.4).
* ``rabenseifner``: reduce-scatter by recursive halving (step k exchanges half of the
  range held, n/2^(k+1) bytes, keeping the half whose index matches bit k of the new
  rank) then allgather by recursive doubling, the same steps reversed (R. Rabenseifner,
  "Optimization of collective reduction operations", ICCS 2004; Thakur et al. 2005,
  4.4). The n elements are cut into p' blocks as ``volume.ring_chunks``; a rank ends
  the reduce-scatter owning one block (bit-reversed order, as MPICH).
* ``segmented_ring``: the ring of ``communication.py`` (Patarasuk & Yuan) pipelined:
  each step's chunk travels as segments of at most ``segment_bytes`` (a whole number
  of elements, at least one) with non-blocking ``Isend``/``Irecv``; the receives of
  the next step are posted before this step's segments are reduced, and each segment
  is forwarded to the right as soon as it is reduced (allgather: as soon as it
  arrives), so reducing segment j overlaps the transfer of segment j + 1 and the next
  step starts before this one has finished. Same bytes as the ring; messages: one per
  segment of every chunk sent (``volume.segmented_ring_allreduce_traffic``).

Non-power-of-two p (``recursive_doubling``, ``rabenseifner``) is handled as MPICH and
Thakur et al. 2005 section 4.4 do: with r = p - p', each even rank below 2r sends its
whole buffer to the next (odd) rank, which reduces it and takes part in the
power-of-two algorithm as new rank rank // 2 (ranks from 2r on as rank - r); at the
end each such odd rank sends the result back to its even partner.
"""
from __future__ import annotations

import numpy as np

from deep500.lv3_distributed.volume import (Traffic, fold_partner, ring_chunks,
                                            segment_elements)

# Tags on Deep500's own (duplicated) communicator; communication.py uses 1-11.
_TAG_LINEAR_REDUCE, _TAG_LINEAR_BCAST = 12, 13
_TAG_BINOMIAL_REDUCE, _TAG_BINOMIAL_BCAST = 14, 15
_TAG_FOLD, _TAG_UNFOLD, _TAG_EXCHANGE = 16, 17, 18
_TAG_HALVING, _TAG_DOUBLING = 19, 20
_TAG_SEGMENT_REDUCE_SCATTER, _TAG_SEGMENT_ALLGATHER = 21, 22

#: Default segment size of ``segmented_ring`` (bytes).
DEFAULT_SEGMENT_BYTES = 1 << 20


class _Counter:
    """Bytes and messages handed to MPI by this rank in one allreduce."""
    __slots__ = ("sent", "received", "messages_sent", "messages_received")

    def __init__(self):
        self.sent = self.received = self.messages_sent = self.messages_received = 0

    def send(self, nbytes: int, messages: int = 1) -> None:
        self.sent += nbytes
        self.messages_sent += messages

    def receive(self, nbytes: int, messages: int = 1) -> None:
        self.received += nbytes
        self.messages_received += messages

    def traffic(self) -> Traffic:
        return Traffic(self.sent, self.received, self.messages_sent,
                       self.messages_received)


def _recv(net, buffer, source, tag, counter):
    net._own.Recv(buffer, source, tag, net._status)
    net._check_received(net._status, buffer.nbytes, "allreduce", source)
    counter.receive(buffer.nbytes)


def _send(net, buffer, dest, tag, counter):
    net._own.Send(buffer, dest, tag)
    counter.send(buffer.nbytes)


def _sendrecv(net, outgoing, incoming, peer, tag, counter):
    net._own.Sendrecv(outgoing, peer, tag, incoming, peer, tag, net._status)
    net._check_received(net._status, incoming.nbytes, "allreduce", peer)
    counter.send(outgoing.nbytes)
    counter.receive(incoming.nbytes)


def linear(net, target: np.ndarray, ufunc, average: bool) -> Traffic:
    """Reduce at rank 0 (p - 1 receives in rank order), then a linear broadcast."""
    p, r, counter = net.size, net.rank, _Counter()
    if r != 0:
        _send(net, target, 0, _TAG_LINEAR_REDUCE, counter)
        _recv(net, target, 0, _TAG_LINEAR_BCAST, counter)
        return counter.traffic()
    scratch = net._scratch_for(target.dtype, target.size)
    for source in range(1, p):
        _recv(net, scratch, source, _TAG_LINEAR_REDUCE, counter)
        ufunc(target, scratch, out=target)
    if average:
        np.true_divide(target, p, out=target)
    for dest in range(1, p):
        _send(net, target, dest, _TAG_LINEAR_BCAST, counter)
    return counter.traffic()


def binomial(net, target: np.ndarray, ufunc, average: bool) -> Traffic:
    """Binomial-tree reduce to rank 0, then binomial-tree broadcast from it."""
    p, r, counter = net.size, net.rank, _Counter()
    scratch = net._scratch_for(target.dtype, target.size)
    mask = 1
    while mask < p:
        if r & mask:
            _send(net, target, r - mask, _TAG_BINOMIAL_REDUCE, counter)
            break
        if r + mask < p:
            _recv(net, scratch, r + mask, _TAG_BINOMIAL_REDUCE, counter)
            ufunc(target, scratch, out=target)
        mask <<= 1
    if r == 0 and average:
        np.true_divide(target, p, out=target)
    mask = 1
    while mask < p:
        if r & mask:
            _recv(net, target, r - mask, _TAG_BINOMIAL_BCAST, counter)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:
        if r + mask < p:
            _send(net, target, r + mask, _TAG_BINOMIAL_BCAST, counter)
        mask >>= 1
    return counter.traffic()


def _fold(net, target, ufunc, counter) -> int:
    """Thakur et al. 2005, 4.4: the first 2r ranks pair up, even into odd. Returns this
    rank's new rank among the p' that go on, or -1 for a rank that waits."""
    partner, new_rank = fold_partner(net.size, net.rank)
    if partner is None:
        return new_rank
    if new_rank < 0:
        _send(net, target, partner, _TAG_FOLD, counter)
    else:
        scratch = net._scratch_for(target.dtype, target.size)
        _recv(net, scratch, partner, _TAG_FOLD, counter)
        ufunc(target, scratch, out=target)
    return new_rank


def _unfold(net, target, new_rank, counter) -> None:
    partner, _ = fold_partner(net.size, net.rank)
    if partner is None:
        return
    if new_rank < 0:
        _recv(net, target, partner, _TAG_UNFOLD, counter)
    else:
        _send(net, target, partner, _TAG_UNFOLD, counter)


def _old_rank(new_rank: int, size: int) -> int:
    rest = size - (1 << (size.bit_length() - 1))
    return new_rank * 2 + 1 if new_rank < rest else new_rank + rest


def recursive_doubling(net, target: np.ndarray, ufunc, average: bool) -> Traffic:
    """log2 p' exchanges of the whole buffer, after the fold of non-power-of-two p."""
    counter = _Counter()
    new_rank = _fold(net, target, ufunc, counter)
    if new_rank >= 0:
        pof2 = 1 << (net.size.bit_length() - 1)
        scratch = net._scratch_for(target.dtype, target.size)
        mask = 1
        while mask < pof2:
            peer = _old_rank(new_rank ^ mask, net.size)
            _sendrecv(net, target, scratch, peer, _TAG_EXCHANGE, counter)
            ufunc(target, scratch, out=target)
            mask <<= 1
        if average:
            np.true_divide(target, net.size, out=target)
    _unfold(net, target, new_rank, counter)
    return counter.traffic()


def rabenseifner(net, target: np.ndarray, ufunc, average: bool) -> Traffic:
    """Recursive-halving reduce-scatter, then recursive-doubling allgather, on p'
    blocks, after the fold of non-power-of-two p."""
    counter = _Counter()
    new_rank = _fold(net, target, ufunc, counter)
    if new_rank >= 0:
        pof2 = 1 << (net.size.bit_length() - 1)
        chunks = ring_chunks(target.size, pof2)
        bounds = np.concatenate(([0], np.cumsum(chunks))).tolist()
        scratch = net._scratch_for(target.dtype, bounds[(pof2 + 1) // 2])
        lo, hi, mask, steps = 0, pof2, 1, []
        while mask < pof2:
            peer = _old_rank(new_rank ^ mask, net.size)
            mid = (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if not new_rank & mask else (
                (mid, hi), (lo, mid))
            k0, k1 = bounds[keep[0]], bounds[keep[1]]
            incoming = scratch[:k1 - k0]
            _sendrecv(net, target[bounds[give[0]]:bounds[give[1]]], incoming, peer,
                      _TAG_HALVING, counter)
            ufunc(target[k0:k1], incoming, out=target[k0:k1])
            steps.append((peer, keep, give))
            lo, hi = keep
            mask <<= 1
        if average:
            owned = target[bounds[lo]:bounds[hi]]
            np.true_divide(owned, net.size, out=owned)
        for peer, keep, give in reversed(steps):
            _sendrecv(net, target[bounds[keep[0]]:bounds[keep[1]]],
                      target[bounds[give[0]]:bounds[give[1]]], peer, _TAG_DOUBLING,
                      counter)
    _unfold(net, target, new_rank, counter)
    return counter.traffic()


def segmented_ring(net, target: np.ndarray, ufunc, average: bool,
                   segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> Traffic:
    """The ring pipelined in segments of at most ``segment_bytes`` (see the module
    docstring): reduce-scatter step s receives chunk (r - s - 1) from the left and
    reduces it; chunk (r - s) goes to the right (at step 0 this rank's own, later the
    chunk just reduced, forwarded segment by segment). Allgather step s receives chunk
    (r - s) straight into ``target`` and forwards it at step s + 1."""
    MPI = net._MPI
    p, r, comm, counter = net.size, net.rank, net._own, _Counter()
    per_segment = segment_elements(segment_bytes, target.itemsize)
    chunks = ring_chunks(target.size, p)
    bounds = np.concatenate(([0], np.cumsum(chunks))).tolist()
    right, left = (r + 1) % p, (r - 1) % p

    def segments(chunk):
        lo, hi = bounds[chunk], bounds[chunk + 1]
        starts = range(lo, hi, per_segment) if hi > lo else [lo]
        return [(start, min(start + per_segment, hi)) for start in starts]

    def isend(lo, hi, tag, sends):
        sends.append(comm.Isend(target[lo:hi], right, tag))
        counter.send((hi - lo) * target.itemsize)

    def post_receives(chunk, buffer, offset, tag):
        posted = []
        for lo, hi in segments(chunk):
            part = buffer[lo - offset:hi - offset]
            posted.append((comm.Irecv(part, left, tag), part, lo, hi))
            counter.receive(part.nbytes)
        return posted

    def wait(request, part):
        request.Wait(net._status)
        net._check_received(net._status, part.nbytes, "allreduce", left)

    largest = max(chunks)
    scratch = net._scratch_for(target.dtype, 2 * largest)
    halves = (scratch[:largest], scratch[largest:])
    sends = []
    tag = _TAG_SEGMENT_REDUCE_SCATTER
    for lo, hi in segments(r % p):
        isend(lo, hi, tag, sends)
    pending = post_receives((r - 1) % p, halves[0], bounds[(r - 1) % p], tag)
    for step in range(p - 1):
        chunk = (r - step - 1) % p
        following = None
        if step + 1 < p - 1:
            after = (r - step - 2) % p
            following = post_receives(after, halves[(step + 1) % 2], bounds[after], tag)
        for request, part, lo, hi in pending:
            wait(request, part)
            ufunc(target[lo:hi], part, out=target[lo:hi])
            if following is not None:  # the reduced segment goes on at the next step
                isend(lo, hi, tag, sends)
        pending = following
    owned = (r + 1) % p
    if average:
        chunk = target[bounds[owned]:bounds[owned + 1]]
        np.true_divide(chunk, p, out=chunk)
    MPI.Request.Waitall(sends)
    sends = []
    tag = _TAG_SEGMENT_ALLGATHER
    received = [post_receives((r - step) % p, target, 0, tag) for step in range(p - 1)]
    for lo, hi in segments(owned):
        isend(lo, hi, tag, sends)
    for step in range(p - 1):
        for request, part, lo, hi in received[step]:
            wait(request, part)
            if step + 1 < p - 1:
                isend(lo, hi, tag, sends)
    MPI.Request.Waitall(sends)
    return counter.traffic()


ALGORITHMS = {"linear": linear, "binomial": binomial,
              "recursive_doubling": recursive_doubling, "rabenseifner": rabenseifner,
              "segmented_ring": segmented_ring}
