"""Deep500's ring allreduce as a non-blocking request: the same 2(p - 1) steps as
``collectives.ring`` (Patarasuk & Yuan 2009), each posted as an ``Isend``/``Irecv``
pair, and advanced by ``test()`` (or ``wait()``): a step whose messages have arrived is
reduced and the next one posted. Between calls the transfer proceeds on its own where
the network moves the bytes (an emulated or real cluster's TCP stack, an RDMA NIC), so
backpropagation can hide it, as with ``MPI_Iallreduce``. Its traffic is the ring's exact
closed form (``CommunicationNetwork.iallreduce`` records it when the request starts).

The result is bit for bit that of the blocking ring (each sum is this rank's values plus
what arrived, in the same order). ``NarrowedRingRequest`` does the same with 16 bits on
the wire, bit for bit ``Ring.run_narrowed``: each reduce-scatter step narrows the chunk
it sends and widens the one it receives before adding it, the owner of a reduced chunk
narrows it once, the allgather passes narrowed chunks, and the whole result is widened
at the end. Several requests may be outstanding: each takes the
next of ``NONBLOCKING_RING_TAGS`` tags, in the order the ranks start them (MPI matches by source, tag and
communicator, MPI-4.0 section 3.5).
"""
from __future__ import annotations

import numpy as np

from deep500.lv3_distributed.collectives.messages import chunk_bounds
from deep500.lv3_distributed.message_tags import NONBLOCKING_RING_FIRST, NONBLOCKING_RING_TAGS


class RingRequest:
    """One non-blocking ring allreduce of ``target`` (flat, reduced in place) on
    ``net``; ``test()``, ``wait()`` as ``communication.Request``."""

    def __init__(self, net, target: np.ndarray, result: np.ndarray, ufunc, average: bool,
                 sequence: int):
        self._net, self._target, self._result = net, target, result
        self._ufunc, self._average = ufunc, average
        self._tag = NONBLOCKING_RING_FIRST + sequence % NONBLOCKING_RING_TAGS
        p, r = net.size, net.rank
        self._bounds = chunk_bounds(target.size, p)
        self._right, self._left = (r + 1) % p, (r - 1) % p
        self._allocate(self._bounds[1] - self._bounds[0])
        self._steps, self._step, self._requests = 2 * (p - 1), 0, None
        self._post()

    def _allocate(self, largest: int) -> None:
        """The receive buffer of a reduce-scatter step (the largest chunk)."""
        self._scratch = np.empty(largest, self._target.dtype)

    @property
    def done(self) -> bool:
        return self._step == self._steps

    def _chunks(self) -> tuple:
        """(chunk sent, chunk received) of the current step: reduce-scatter step s
        sends chunk r - s and receives r - s - 1; allgather step t sends r + 1 - t and
        receives r - t."""
        p, r, s = self._net.size, self._net.rank, self._step
        if s < p - 1:
            return (r - s) % p, (r - s - 1) % p
        t = s - (p - 1)
        return (r + 1 - t) % p, (r - t) % p

    def _slice(self, chunk: int) -> np.ndarray:
        return self._target[self._bounds[chunk]:self._bounds[chunk + 1]]

    def _buffers(self, sent: int, received: int) -> tuple:
        """(outgoing, incoming) buffers of the current step."""
        if self._step < self._net.size - 1:
            return self._slice(sent), self._scratch[:self._slice(received).size]
        return self._slice(sent), self._slice(received)

    def _post(self) -> None:
        outgoing, incoming = self._buffers(*self._chunks())
        comm = self._net._own
        self._requests = [comm.Irecv(incoming, self._left, self._tag),
                          comm.Isend(outgoing, self._right, self._tag)]

    def _arrived(self, count: int) -> np.ndarray:
        """The values a reduce-scatter step received, at the buffer's precision."""
        return self._scratch[:count]

    def _owned_reduced(self, owned: int) -> None:
        """The chunk this rank owns is fully reduced (averaged here, on n/p values)."""
        if self._average:
            np.true_divide(self._slice(owned), self._net.size, out=self._slice(owned))

    def _finished(self) -> None:
        """Every step is done."""

    def _finish_step(self) -> None:
        p = self._net.size
        if self._step < p - 1:
            _, received = self._chunks()
            chunk = self._slice(received)
            self._ufunc(chunk, self._arrived(chunk.size), out=chunk)
        self._step += 1
        if self._step == p - 1:
            self._owned_reduced((self._net.rank + 1) % p)
        if self.done:
            self._finished()
        else:
            self._post()

    def test(self) -> bool:
        """Advance every step whose messages have arrived; True when all have."""
        MPI = self._net._MPI
        while not self.done and MPI.Request.Testall(self._requests):
            self._finish_step()
        return self.done

    def wait(self) -> np.ndarray:
        MPI = self._net._MPI
        while not self.done:
            MPI.Request.Waitall(self._requests)
            self._finish_step()
        return self._result


class NarrowedRingRequest(RingRequest):
    """``RingRequest`` with ``wire`` (a ``WireType``) on the wire (module docstring)."""

    def __init__(self, net, target: np.ndarray, result: np.ndarray, ufunc, average: bool,
                 sequence: int, wire):
        self._wire = wire
        super().__init__(net, target, result, ufunc, average, sequence)

    def _allocate(self, largest: int) -> None:
        self._narrowed = self._wire.empty(self._target.size)   # the buffer as it travels
        self._incoming = self._wire.empty(largest)
        self._widened = np.empty(largest, self._target.dtype)

    def _wire_slice(self, chunk: int) -> np.ndarray:
        return self._narrowed[self._bounds[chunk]:self._bounds[chunk + 1]]

    def _buffers(self, sent: int, received: int) -> tuple:
        if self._step < self._net.size - 1:
            outgoing = self._wire.encode(self._slice(sent), self._wire_slice(sent))
            return outgoing, self._incoming[:self._slice(received).size]
        return self._wire_slice(sent), self._wire_slice(received)

    def _arrived(self, count: int) -> np.ndarray:
        return self._wire.decode(self._incoming[:count], self._widened[:count])

    def _owned_reduced(self, owned: int) -> None:
        super()._owned_reduced(owned)
        self._wire.encode(self._slice(owned), self._wire_slice(owned))

    def _finished(self) -> None:
        self._wire.decode(self._narrowed, self._target)
