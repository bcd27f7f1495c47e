"""Counted point-to-point steps of Deep500's own allreduce algorithms.

Each step hands an mpi4py buffer to MPI on Deep500's duplicate communicator
(``CommunicationNetwork._own``), checks that a receive was filled exactly, and adds
its bytes and messages to a ``Counter``: a message is one MPI send, zero-byte ones
included. Each send's size also goes to the network's ``_outbox`` (a
``MessageSizeHistogram`` that ``CommunicationNetwork.allreduce`` empties before the
algorithm runs and records with its traffic), so message sizes are those handed to MPI.
"""
from __future__ import annotations

import numpy as np

from deep500.lv3_distributed.volume import Traffic


class Counter:
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


def recv(net, buffer, source, tag, counter: Counter) -> None:
    net._own.Recv(buffer, source, tag, net._status)
    net._check_received(net._status, buffer.nbytes, "allreduce", source)
    counter.receive(buffer.nbytes)


def send(net, buffer, dest, tag, counter: Counter) -> None:
    net._own.Send(buffer, dest, tag)
    counter.send(buffer.nbytes)
    net._outbox.add(buffer.nbytes)


def sendrecv(net, outgoing, incoming, peer, tag, counter: Counter) -> None:
    net._own.Sendrecv(outgoing, peer, tag, incoming, peer, tag, net._status)
    net._check_received(net._status, incoming.nbytes, "allreduce", peer)
    counter.send(outgoing.nbytes)
    counter.receive(incoming.nbytes)
    net._outbox.add(outgoing.nbytes)


def chunk_bounds(count: int, parts: int) -> list[int]:
    """Where each of ``parts`` chunks of ``count`` elements starts, and the end: the
    first ``count % parts`` chunks hold one element more (``volume.ring_chunks``)."""
    base, extra = divmod(count, parts)
    return [i * base + min(i, extra) for i in range(parts + 1)]


def ring_exchange(net, outgoing, incoming, right, left, tag) -> None:
    """One ring step: send ``outgoing`` to the right while receiving ``incoming`` from
    the left."""
    net._own.Sendrecv(outgoing, right, tag, incoming, left, tag, net._status)
    net._check_received(net._status, incoming.nbytes, "allreduce", left)
    net._outbox.add(outgoing.nbytes)


def ring_allgather(net, buffer: np.ndarray, bounds: list, tag: int) -> tuple[int, int]:
    """The ring's allgather (Patarasuk & Yuan 2009): rank r holds chunk (r + 1) of
    ``buffer`` (cut at ``bounds``); step s passes chunk (r + 1 - s) to the right and
    receives chunk (r - s) from the left into its place. Returns (bytes sent, bytes
    received)."""
    p, r = net.size, net.rank
    right, left = (r + 1) % p, (r - 1) % p
    sent = received = 0
    for step in range(p - 1):
        send_chunk, recv_chunk = (r + 1 - step) % p, (r - step) % p
        outgoing = buffer[bounds[send_chunk]:bounds[send_chunk + 1]]
        incoming = buffer[bounds[recv_chunk]:bounds[recv_chunk + 1]]
        ring_exchange(net, outgoing, incoming, right, left, tag)
        sent += outgoing.nbytes
        received += incoming.nbytes
    return sent, received
