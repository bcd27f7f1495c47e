"""Non-blocking bucket exchanges of the overlapped neighbour and parameter-server
schemes: the same messages and the same arithmetic as their blocking steps, posted
per gradient bucket as backprop completes it (``GradientBuckets(exchange=...)``) and
advanced by ``test()``.

* :class:`NeighbourMeanRequest`: the bucket is sent to each ring (or torus) neighbour
  and theirs received, one message per direction as ``ring_exchange`` /
  ``torus_exchange`` send them; on completion the bucket becomes the mean over the
  neighbourhood, summed in ascending rank order (``ConsistentNeighbors``' order), so
  each element equals the blocking scheme's bit for bit.
* :class:`GatherMeanRequest`: each worker sends its bucket to the root; the root
  receives every worker's and, on completion, takes the mean over the ranks in rank
  order (``np.mean`` over axis 0, as the blocking parameter server's gather), again
  bit for bit.

Bytes are recorded when a request is posted, under the blocking operation's name, so a
scheme's measured traffic equals its ``analytic_traffic`` whether it overlaps or not.
Tags: ``message_tags.BUCKET_*`` on the network's own communicator; several requests of
one kind may be in flight, matched in the order the ranks post them (MPI's
non-overtaking rule, MPI-4.0 section 3.5).
"""
from __future__ import annotations

import numpy as np

from deep500.lv3_distributed.message_tags import (BUCKET_GATHER, BUCKET_TO_EAST,
                                                  BUCKET_TO_LEFT, BUCKET_TO_NORTH,
                                                  BUCKET_TO_RIGHT, BUCKET_TO_SOUTH,
                                                  BUCKET_TO_WEST)
from deep500.lv3_distributed.volume import EXACT


def neighbour_directions(net, topology: str) -> list[tuple[int, int, int]]:
    """``(send to, tag, receive from)`` per direction, in ``ring_exchange`` /
    ``torus_exchange``'s order; a direction that wraps onto this rank is left out (a
    local copy there, not a message)."""
    p, r = net.size, net.rank
    if topology == "ring":
        left, right = (r - 1) % p, (r + 1) % p
        plan = [(right, BUCKET_TO_RIGHT, left), (left, BUCKET_TO_LEFT, right)]
    else:
        near = net.torus_neighbours()
        plan = [(near["south"], BUCKET_TO_SOUTH, near["north"]),
                (near["north"], BUCKET_TO_NORTH, near["south"]),
                (near["east"], BUCKET_TO_EAST, near["west"]),
                (near["west"], BUCKET_TO_WEST, near["east"])]
    return [(to, tag, source) for to, tag, source in plan if not to == source == r]


class _BucketRequest:
    """``test()`` and ``wait()`` over the posted requests (``_requests``); ``_finish``
    forms the result in ``_buffer`` once they have all completed."""
    _net = _buffer = _requests = None
    _done = False

    def _finish(self) -> None:
        raise NotImplementedError

    def test(self) -> bool:
        if not self._done and self._net._MPI.Request.Testall(self._requests):
            self._finish()
        return self._done

    def wait(self) -> np.ndarray:
        if not self._done:
            self._net._MPI.Request.Waitall(self._requests)
            self._finish()
        return self._buffer


class NeighbourMeanRequest(_BucketRequest):
    """The mean of ``buffer`` over ``neighbourhood`` (ranks, this one included),
    exchanged along ``directions`` (:func:`neighbour_directions`); ``buffer`` holds the
    mean once ``test()`` is true or ``wait()`` returned."""

    def __init__(self, net, buffer: np.ndarray, directions, neighbourhood, operation: str):
        self._net, self._buffer = net, buffer
        self._neighbourhood = list(neighbourhood)
        comm = net._own
        self._got = {}
        self._requests = []
        for to, tag, source in directions:
            incoming = np.empty_like(buffer)
            self._got[source] = incoming
            self._requests += [comm.Irecv(incoming, source, tag), comm.Isend(buffer, to, tag)]
        messages = len(directions)
        net.volume.record(operation, "direct", EXACT, messages * buffer.nbytes,
                          messages * buffer.nbytes, messages, messages,
                          [(buffer.nbytes, messages)])
        self._done = not self._requests
        if self._done:
            self._finish()

    def _finish(self) -> None:
        self._done = True
        arrays = {**self._got, self._net.rank: self._buffer}
        mean = np.zeros_like(self._buffer)
        for rank in self._neighbourhood:   # the blocking scheme's order
            mean += arrays[rank]
        mean /= len(self._neighbourhood)
        np.copyto(self._buffer, mean)


class GatherMeanRequest(_BucketRequest):
    """A worker's bucket to ``root``; at the root, every rank's bucket received and
    their mean (over ranks, in rank order) written into ``buffer``."""

    def __init__(self, net, buffer: np.ndarray, root: int):
        self._net, self._buffer = net, buffer
        comm, p = net._own, net.size
        self._rows = None
        if net.rank == root:
            self._rows = np.empty((p, buffer.size), buffer.dtype)
            self._rows[root] = buffer.reshape(-1)
            self._requests = [comm.Irecv(self._rows[rank], rank, BUCKET_GATHER)
                              for rank in range(p) if rank != root]
            net.volume.record("gather", "linear", EXACT, 0, (p - 1) * buffer.nbytes,
                              0, p - 1)
        else:
            self._requests = [comm.Isend(buffer, root, BUCKET_GATHER)]
            net.volume.record("gather", "linear", EXACT, buffer.nbytes, 0, 1, 0)
        self._done = not self._requests
        if self._done:
            self._finish()

    def _finish(self) -> None:
        self._done = True
        if self._rows is not None:
            np.mean(self._rows, axis=0, out=self._buffer.reshape(-1))
