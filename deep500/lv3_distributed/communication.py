"""``CommunicationNetwork``: Deep500's communication over MPI (mpi4py), measured.

Every call records what this rank sent and received in ``network.volume`` (a
:class:`~deep500.lv3_distributed.volume.CommunicationVolume`). Where Deep500 sends the
messages itself the counts are exact; where MPI runs a collective with an algorithm of
its own choice (``algorithm="mpi"``) the entry holds the analytic volume of a named
algorithm and is marked ``"modelled (<algorithm>)"``.

Algorithms (``algorithm=`` of each collective; the first is the default):

* ``allreduce``: one of ``collectives.allreduce_names()``, each an object of
  :mod:`~deep500.lv3_distributed.collectives` (one file per algorithm, with its traffic
  and its α-β-γ cost): ``"ring"`` (the default, Patarasuk & Yuan, JPDC 2009),
  ``"linear"``, ``"binomial"``, ``"recursive_doubling"``, ``"rabenseifner"``,
  ``"segmented_ring"`` (Thakur, Rabenseifner & Gropp, IJHPCA 2005), Deep500's own and
  counted exactly; ``"mpi"``: ``MPI_Allreduce``, modelled as the ring (its volume is the
  lower bound of any allreduce), or as the algorithm MPICH was told to use through
  ``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` where Deep500 has the same one
  (``collectives.mpich``; the entry's ``counted`` names it).
* ``broadcast``: ``"binomial"``, Deep500's binomial tree of ``Send``/``Recv`` (MPICH's
  tree, Thakur et al. 2005). ``"mpi"``: ``MPI_Bcast``, modelled as the binomial tree.
* ``gather`` / ``scatter``: ``"linear"``, the root receives from (sends to) every other
  rank directly. ``"mpi"``: ``MPI_Gather`` / ``MPI_Scatter``, modelled as MPICH's
  binomial trees.
* ``iallreduce``: ``MPI_Iallreduce`` only, modelled as the ring.

Message sizes: every volume entry also holds a histogram of the sizes of the messages
this rank sent (``volume.message_sizes()``, power-of-two bins; see
:mod:`~deep500.lv3_distributed.message_sizes`). Deep500's own algorithms record each
buffer as they hand it to MPI (the ring's chunks, the segmented ring's segments, the
trees' whole buffers) and the non-blocking ring its steps' chunks; MPI's collectives
are recorded as the messages of the algorithm that models them: the ring's chunks
(``MPI_Allreduce`` under ``auto`` or MPICH's ring, ``MPI_Iallreduce``), the binomial
trees' buffers (``MPI_Bcast``, ``MPI_Gather``, ``MPI_Scatter``), the dissemination
barrier's empty messages; where the modelling algorithm states only totals (MPICH's
recursive doubling or reduce-scatter/allgather choice) the messages are ``unsized``.

Compressed communication: ``allreduce(..., wire_dtype="float16" | "bfloat16")`` and
``iallreduce(..., wire_dtype=...)`` send a float32 (or float64) array's values in 16
bits and reduce them at the array's precision (the algorithms that
``narrows_on_wire``, every one of ``collectives``; one that does not would raise
``UnsupportedError``).
Their volume entries are named ``"<algorithm>/<wire dtype>"`` (e.g. ``"ring/float16"``)
and count 2 bytes a value. ``wire_dtype=None`` or ``"float32"`` is the uncompressed
call, unchanged.

Arrays travel through mpi4py's buffer methods (``Send``, ``Recv``, ``Sendrecv``,
``Allreduce``...), never pickled; they must be C-contiguous NumPy arrays of a fixed-size
numeric dtype, and receive buffers must match what arrives, else ``d5.ShapeError``
names the rank. Every rank must call a collective with the same shape, dtype, root and
algorithm (not checked across ranks, which would cost a message; a mismatch a receive
notices raises ``ShapeError``). Deep500's own algorithms send on a duplicate of the
communicator, so their messages never match a user's ``recv``.

Constructing a network is collective (it duplicates the communicator): every rank of
``comm`` must construct it.
"""
from __future__ import annotations

import math

import numpy as np

from deep500.lv3_distributed import compressed_allreduce
from deep500.lv3_distributed.collectives.base import Reduction
from deep500.lv3_distributed.collectives.mpich import (MPICH_ALLREDUCE_CVAR,
                                                       check_mpich_allreduce_algorithm,
                                                       mpich_allreduce_algorithm)
from deep500.lv3_distributed.collectives import registry as collectives
from deep500.lv3_distributed.collectives.registry import UnknownAlgorithmError
from deep500.lv3_distributed.collectives.segmented_ring import (DEFAULT_SEGMENT_BYTES,
                                                                check_segment_bytes)
from deep500.lv3_distributed.message_sizes import MessageSizeHistogram
from deep500.lv3_distributed.message_tags import (BROADCAST, GATHER, SCATTER, TO_EAST,
                                                  TO_LEFT, TO_NORTH, TO_RIGHT, TO_SOUTH,
                                                  TO_WEST)
from deep500.lv3_distributed.volume import (EXACT, CommunicationVolume, Traffic,
                                            binomial_broadcast_traffic,
                                            binomial_gather_traffic,
                                            binomial_scatter_message_sizes,
                                            binomial_scatter_traffic,
                                            dissemination_barrier_traffic, modelled,
                                            ring_allreduce_message_sizes,
                                            ring_allreduce_traffic)
from deep500.lv3_distributed.wire_dtype import WireType, wire_type
from deep500.utils.errors import Deep500Error, ShapeError, UnsupportedError, require

BROADCAST_ALGORITHMS = ("binomial", "mpi")
GATHER_ALGORITHMS = ("linear", "mpi")
OPS = ("sum", "average", "max", "min")

_POINT_TO_POINT = ("recv", "recv_any", "irecv", "sendrecv")
_RING_MODEL = modelled("ring")
_BINOMIAL_MODEL = modelled("binomial tree")


def _mpi():
    require("mpi4py", "mpi", "Deep500's CommunicationNetwork")
    from mpi4py import MPI
    return MPI


def torus_shape(size: int) -> tuple[int, int]:
    """The most square 2-D grid of ``size`` ranks: (rows, cols) with rows the largest
    divisor of ``size`` not above its square root, so rows <= cols (4 -> 2x2, 6 -> 2x3,
    a prime p -> 1xp, which is a ring). Rank r sits at row r // cols, column r % cols."""
    rows = max(d for d in range(1, math.isqrt(size) + 1) if size % d == 0)
    return rows, size // rows


def check_torus_shape(shape, size: int, where: str = "torus_shape") -> tuple[int, ...]:
    """``shape`` (a list of k >= 1 positive extents) as a tuple if their product is
    ``size``, the number of ranks; else a ``Deep500Error`` naming ``where`` and what to
    change."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise Deep500Error(f"{where}={shape!r}: give a list of extents, one per "
                           f"dimension, whose product is the number of ranks ({size}), "
                           f"e.g. {list(torus_shape(size))}")
    extents = tuple(shape)
    if not extents or any(isinstance(e, bool) or not isinstance(e, (int, np.integer))
                          or e < 1 for e in extents):
        raise Deep500Error(f"{where}={list(extents)!r}: every extent must be a positive "
                           f"integer (and there must be at least one)")
    if math.prod(extents) != size:
        raise Deep500Error(f"{where}={list(extents)}: the product "
                           f"{math.prod(extents)} is not the number of ranks ({size}); "
                           f"change the shape (e.g. {list(torus_shape(size))}) or run on "
                           f"{math.prod(extents)} ranks")
    return tuple(int(e) for e in extents)


def torus_neighbour_ranks(rank: int, shape) -> list[int]:
    """The distinct ranks next to ``rank`` on the k-dimensional torus ``shape`` (ranks
    in row-major order of their coordinates, the last dimension fastest), ``rank``
    itself excluded: one step back and forward along each dimension, wrapping around.
    A dimension of extent 2 gives one neighbour (back and forward are the same rank),
    one of extent 1 none; in the order first met (dimension 0 back, forward, ...)."""
    shape = tuple(int(e) for e in shape)
    coordinates, rest = [], rank
    for extent in reversed(shape):
        rest, coordinate = divmod(rest, extent)
        coordinates.append(coordinate)
    coordinates.reverse()
    neighbours: list[int] = []
    for dim, extent in enumerate(shape):
        for offset in (-1, 1):
            moved = list(coordinates)
            moved[dim] = (moved[dim] + offset) % extent
            other = 0
            for coordinate, size in zip(moved, shape):
                other = other * size + coordinate
            if other != rank and other not in neighbours:
                neighbours.append(other)
    return neighbours


class Request:
    """A pending non-blocking operation. ``wait()`` completes it and returns its result
    (the received or reduced array; ``None`` for a send); ``test()`` says whether it has
    completed without blocking."""
    __slots__ = ("_request", "_result", "_finish", "_done", "_status")

    def __init__(self, request, result, finish=None, status=None):
        self._request = request
        self._result = result
        self._finish = finish
        self._done = False
        self._status = status

    def wait(self):
        if not self._done:
            self._request.Wait(self._status)
            self._complete()
        return self._result

    def test(self) -> bool:
        if not self._done and self._request.Test(self._status):
            self._complete()
        return self._done

    def _complete(self) -> None:
        self._done = True
        if self._finish is not None:
            self._finish(self._status)


class _DoneRequest:
    """A request that completed when it was made (a collective on one rank)."""

    def Wait(self, status=None):
        return None

    def Test(self, status=None):
        return True


def wait_all(requests) -> list:
    """Wait for every request; their results in order."""
    return [request.wait() for request in requests]


class CommunicationNetwork:
    """Communication among the ranks of an MPI communicator, with every byte counted.

    Args:
        comm: an mpi4py communicator; ``None`` is ``MPI.COMM_WORLD``.
        volume: where to record traffic; a fresh ``CommunicationVolume`` if ``None``.
        allreduce_algorithm: the default of ``allreduce`` (a name of
            ``collectives.allreduce_names()``).
        segment_bytes: the default segment size of ``"segmented_ring"``.

    Attributes: ``rank``, ``size``, ``comm``, ``volume``, ``grid`` (the 2-D torus,
    ``torus_shape(size)``), ``mpi_allreduce_algorithm`` (MPICH's ``MPI_Allreduce``
    algorithm as set in the environment, ``mpich_allreduce_algorithm()``).
    """

    def __init__(self, comm=None, volume: CommunicationVolume | None = None,
                 allreduce_algorithm: str = "ring",
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES):
        MPI = _mpi()
        self._MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._allreduce = collectives.allreduce_algorithm(
            allreduce_algorithm, f"rank {self.rank} of {self.size}: allreduce")
        self.allreduce_algorithm = self._allreduce.name
        self.segment_bytes = check_segment_bytes(segment_bytes)
        self._ring_requests = 0  # non-blocking rings started: each takes its own tag
        self.mpi_allreduce_algorithm = mpich_allreduce_algorithm()
        self._own = self.comm.Dup()
        self.volume = volume if volume is not None else CommunicationVolume(self.rank,
                                                                            self.size)
        self.grid = torus_shape(self.size)
        self._scratch = np.empty(0, np.uint8)
        self._outbox = MessageSizeHistogram()  # sizes sent by the allreduce in progress
        self._status = MPI.Status()
        self._ops = {"sum": (np.add, MPI.SUM), "average": (np.add, MPI.SUM),
                     "max": (np.maximum, MPI.MAX), "min": (np.minimum, MPI.MIN)}

    def __repr__(self) -> str:
        return (f"CommunicationNetwork(rank={self.rank}, size={self.size}, "
                f"allreduce={self.allreduce_algorithm!r})")

    def close(self) -> None:
        """Free Deep500's duplicate communicator (collective)."""
        if self._own is not None:
            self._own.Free()
            self._own = None

    # -- checks ---------------------------------------------------------------------
    def _fail(self, what: str, problem: str, fix: str) -> ShapeError:
        return ShapeError(f"rank {self.rank} of {self.size}: {what}: {problem}. {fix}")

    def _check(self, array, what: str, name: str = "array", writable: bool = False):
        if not isinstance(array, np.ndarray):
            raise self._fail(what, f"{name} is a {type(array).__name__}, not a NumPy "
                             "array", "Pass a numpy.ndarray (arrays are sent through the "
                             "buffer interface, never pickled)")
        dtype = array.dtype
        if dtype.kind not in "biufc" or not dtype.isnative:
            raise self._fail(what, f"{name} has dtype {dtype}", "Use a native-endian "
                             "bool, integer, float or complex dtype")
        if not array.flags.c_contiguous:
            raise self._fail(what, f"{name} of shape {array.shape} is not C-contiguous",
                             "Pass numpy.ascontiguousarray(array)")
        if writable and not array.flags.writeable:
            raise self._fail(what, f"{name} is read-only", "Pass a writable array")

    def _check_like(self, out, like_shape, dtype, what: str, name: str = "out"):
        self._check(out, what, name, writable=True)
        if out.shape != tuple(like_shape) or out.dtype != dtype:
            raise self._fail(what, f"{name} has shape {out.shape} and dtype {out.dtype}, "
                             f"expected {tuple(like_shape)} and {dtype}",
                             f"Allocate {name} as numpy.empty({tuple(like_shape)}, "
                             f"{dtype})")

    def _check_peer(self, rank, what: str, name: str):
        if not (isinstance(rank, (int, np.integer)) and 0 <= rank < self.size):
            raise ValueError(f"rank {self.rank}: {what}: {name}={rank!r} is not a rank of "
                             f"this communicator (0..{self.size - 1})")

    @staticmethod
    def _mismatch_fix(what: str) -> str:
        if what in _POINT_TO_POINT:
            return ("The receive buffer must have the shape and dtype of the array sent "
                    "(and the tag must match)")
        return f"Every rank must call {what} with the same shape and dtype"

    def _check_received(self, status, expected: int, what: str, source) -> None:
        got = status.Get_count(self._MPI.BYTE)
        if got != expected:
            raise self._fail(what, f"received {got} bytes from rank {source} into a "
                             f"buffer of {expected} bytes", self._mismatch_fix(what))

    def _truncated(self, exc, what: str) -> Exception:
        if exc.Get_error_class() == self._MPI.ERR_TRUNCATE:
            return self._fail(what, "a message was larger than the receive buffer",
                              self._mismatch_fix(what))
        return exc

    def _choose(self, algorithm, allowed, what):
        if algorithm not in allowed:
            raise UnknownAlgorithmError(f"rank {self.rank} of {self.size}: {what}: "
                             f"algorithm={algorithm!r}; choose one of "
                             f"{', '.join(map(repr, allowed))}")
        return algorithm

    def _scratch_for(self, dtype, count: int) -> np.ndarray:
        need = count * dtype.itemsize
        if self._scratch.nbytes < need:
            self._scratch = np.empty(need, np.uint8)
        return self._scratch[:need].view(dtype)

    def _output(self, array, out, what):
        """``out`` checked against ``array`` (``out`` may be ``array`` itself, to reduce
        in place), or a new array like it."""
        if out is None:
            return np.empty_like(array)
        if out is not array:
            self._check_like(out, array.shape, array.dtype, what)
        elif not out.flags.writeable:
            raise self._fail(what, "array is read-only", "Pass a writable array to "
                             "reduce in place, or no out")
        return out

    def _algorithm(self, algorithm):
        """The allreduce algorithm's object (``None``: the network's default)."""
        if algorithm is None:
            return self._allreduce
        where = f"rank {self.rank} of {self.size}: allreduce"
        return collectives.allreduce_algorithm(algorithm, where)

    # -- allreduce ------------------------------------------------------------------
    def allreduce(self, array: np.ndarray, op: str = "sum", out: np.ndarray | None = None,
                  algorithm: str | None = None, segment_bytes: int | None = None,
                  mpi_algorithm: str | None = None,
                  wire_dtype: str | None = None) -> np.ndarray:
        """Reduce ``array`` over all ranks; every rank gets the result.

        ``op``: ``"sum"``, ``"average"`` (sum / size; float and complex only), ``"max"``,
        ``"min"``. ``out`` (same shape and dtype; may be ``array`` itself for in place)
        receives the result, else a new array is returned. ``algorithm``: a name of
        ``collectives.allreduce_names()`` or an ``AllreduceAlgorithm`` (default
        ``self.allreduce_algorithm``); Deep500's own (all but ``"mpi"``) leave
        bit-identical results on all ranks and record their traffic exactly, under their
        own name. ``segment_bytes``: the segment size of ``"segmented_ring"`` (default
        ``self.segment_bytes``; the other algorithms ignore it, so one call can sweep
        every name). ``mpi_algorithm``: with ``"mpi"``, the MPICH algorithm
        this call expects (one of ``MPICH_ALLREDUCE_ALGORITHMS``); MPICH takes it from
        ``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` at ``MPI_Init``, so it cannot be changed
        here: a value other than the one in effect raises ``Deep500Error`` saying how
        to set it. The ``"mpi"`` entry of ``volume`` is modelled: as MPICH's forced
        algorithm where Deep500 has the same one, else as the ring, and says which.
        With one rank it is a copy, recorded as zero traffic (exact).
        ``wire_dtype``: ``"float16"`` or ``"bfloat16"`` sends the values of a float32
        (float64) array in 16 bits and reduces them at the array's precision (the
        algorithms that ``narrows_on_wire``: every one Deep500 has); ``None`` or
        ``"float32"``: the values as they are.
        """
        ufunc, mpi_op = self._reduction(array, op, "allreduce")
        wire = self._wire(array, wire_dtype, "allreduce")
        out = self._output(array, out, "allreduce")
        chosen = self._algorithm(algorithm)
        if mpi_algorithm is not None:
            self.check_mpi_algorithm(mpi_algorithm)
        reduction = Reduction(ufunc, mpi_op, op == "average")
        name = chosen.name if wire is None else f"{chosen.name}/{wire.name}"
        if wire is not None and not chosen.narrows_on_wire:
            raise UnsupportedError(
                f"rank {self.rank} of {self.size}: allreduce algorithm={chosen.name!r} "
                f"cannot send {wire.name} on the wire; the algorithms that can are "
                f"{', '.join(collectives.allreduce_names(narrows_on_wire=True))} (or use "
                f"wire_dtype='float32')")
        if self.size == 1:
            if out is not array:
                np.copyto(out, array)
            self.volume.record("allreduce", name, EXACT, 0, 0, 0, 0)
            return out
        self._outbox.clear()
        try:
            if wire is None:
                traffic = chosen.run(self, array, out, reduction,
                                     segment_bytes=segment_bytes)
            else:
                traffic = chosen.narrowed_run(self, array, out, reduction, wire,
                                              segment_bytes=segment_bytes)
        except self._MPI.Exception as exc:
            raise self._truncated(exc, "allreduce") from exc
        if chosen.counted_exactly:
            # an algorithm that sends without collectives.messages leaves the outbox
            # short of its traffic: its messages are then recorded as unsized
            sizes = self._outbox if self._outbox.messages == traffic.messages_sent else None
        else:
            sizes = chosen.message_sizes(
                array.size, array.itemsize if wire is None else wire.itemsize, self.size,
                self.rank, mpi_algorithm=self.mpi_allreduce_algorithm)
        self.volume.record_traffic("allreduce", name, chosen.counted(self), traffic, sizes)
        return out

    def allreduce_traffic(self, count: int, itemsize: int, algorithm: str | None = None,
                          segment_bytes: int | None = None,
                          wire_dtype: str | None = None) -> Traffic:
        """What one ``allreduce`` of ``count`` elements of ``itemsize`` bytes records
        for this rank: the algorithm's exact closed form (``AllreduceAlgorithm.traffic``),
        or for ``"mpi"`` the model it records (the MPICH choice's, else the ring). With
        a ``wire_dtype`` narrower than float32 the values travel in its itemsize."""
        wire = wire_type(wire_dtype)
        if wire is not None:
            itemsize = wire.itemsize
        return self._algorithm(algorithm).traffic(
            count, itemsize, self.size, self.rank,
            segment_bytes=self.segment_bytes if segment_bytes is None else segment_bytes,
            mpi_algorithm=self.mpi_allreduce_algorithm)

    def check_mpi_algorithm(self, mpi_algorithm: str) -> str:
        """``mpi_algorithm`` if it is MPICH's allreduce algorithm in effect, else a
        ``Deep500Error``: unknown names list the known ones; a known one that is not in
        effect says to set ``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`` before MPI starts."""
        check_mpich_allreduce_algorithm(mpi_algorithm)
        if mpi_algorithm != self.mpi_allreduce_algorithm:
            raise Deep500Error(
                f"rank {self.rank} of {self.size}: mpi_algorithm={mpi_algorithm!r}, but "
                f"MPICH started with {MPICH_ALLREDUCE_CVAR}="
                f"{self.mpi_allreduce_algorithm!r}. MPICH reads it once, at MPI_Init: "
                f"set it in the environment before starting MPI, e.g. "
                f"'{MPICH_ALLREDUCE_CVAR}={mpi_algorithm} deep500 run --np N ...' or "
                f"'... mpirun -np N ...'")
        return mpi_algorithm

    def _wire(self, array, wire_dtype, what) -> WireType | None:
        """The ``WireType`` of ``wire_dtype`` (``None``: uncompressed), checked
        against ``array``."""
        wire = wire_type(wire_dtype)
        if wire is not None and (array.dtype.kind != "f" or array.itemsize < 4):
            raise UnsupportedError(f"rank {self.rank} of {self.size}: {what} with "
                                   f"wire_dtype={wire_dtype!r} narrows float32 or float64 "
                                   f"arrays; got {array.dtype}")
        return wire

    def _reduction(self, array, op, what):
        self._check(array, what)
        if op not in self._ops:
            raise ValueError(f"rank {self.rank} of {self.size}: {what}: op={op!r}; "
                             f"choose one of {', '.join(OPS)}")
        kind = array.dtype.kind
        if kind == "b" or (op == "average" and kind not in "fc") or (
                op in ("max", "min") and kind == "c"):
            raise UnsupportedError(f"rank {self.rank} of {self.size}: {what} with "
                                   f"op={op!r} does not "
                                   f"support dtype {array.dtype}; use a float array")
        return self._ops[op]

    def iallreduce(self, array: np.ndarray, op: str = "sum",
                   out: np.ndarray | None = None,
                   wire_dtype: str | None = None, algorithm: str = "mpi") -> Request:
        """Non-blocking allreduce. Neither array may be touched until ``wait()``, which
        returns the result (and divides by the size for ``"average"``); ``test()``
        advances it. ``algorithm``: ``"mpi"`` (``MPI_Iallreduce``; volume modelled as
        the ring) or ``"ring"`` (Deep500's ring, ``collectives.ring_request``: the
        blocking ring's result bit for bit, bytes counted exactly).
        ``wire_dtype`` (``"float16"``, ``"bfloat16"``): the values travel in 16 bits and
        are reduced at the array's precision: by a user-defined MPI operation with
        ``"mpi"`` (``compressed_allreduce``), by the ring itself with ``"ring"`` (bit
        for bit the blocking ring's ``run_narrowed``)."""
        ufunc, mpi_op = self._reduction(array, op, "iallreduce")
        wire = self._wire(array, wire_dtype, "iallreduce")
        out = self._output(array, out, "iallreduce")
        chosen = self._algorithm(algorithm)
        if not chosen.non_blocking:
            raise UnsupportedError(
                f"iallreduce: algorithm={chosen.name!r} has no non-blocking form; the "
                f"algorithms that have one are "
                f"{', '.join(collectives.allreduce_names(non_blocking=True))}")
        if chosen.name == "ring":
            return self._ring_iallreduce(array, out, ufunc, op == "average", wire)
        if wire is not None:
            return self._wire_iallreduce(array, out, ufunc, op == "average", wire)
        request = self.comm.Iallreduce(self._MPI.IN_PLACE if out is array else array, out,
                                       mpi_op)
        self.volume.record_traffic("iallreduce", "mpi", _RING_MODEL,
                                   ring_allreduce_traffic(array.size, array.itemsize,
                                                          self.size, self.rank),
                                   ring_allreduce_message_sizes(array.size, array.itemsize,
                                                                self.size, self.rank))
        size = self.size

        def average(status):
            np.true_divide(out, size, out=out)
        return Request(request, out, average if op == "average" else None)

    def _ring_iallreduce(self, array, out, ufunc, average, wire):
        from deep500.lv3_distributed.collectives.ring_request import (NarrowedRingRequest,
                                                                      RingRequest)
        if out is not array:
            np.copyto(out, array)
        name = "ring" if wire is None else f"ring/{wire.name}"
        if self.size == 1:
            self.volume.record("iallreduce", name, EXACT, 0, 0, 0, 0)
            return Request(_DoneRequest(), out)
        sequence, self._ring_requests = self._ring_requests, self._ring_requests + 1
        if wire is None:
            request = RingRequest(self, out.reshape(-1), out, ufunc, average, sequence)
        else:
            request = NarrowedRingRequest(self, out.reshape(-1), out, ufunc, average,
                                          sequence, wire)
        itemsize = array.itemsize if wire is None else wire.itemsize
        self.volume.record_traffic("iallreduce", name, EXACT,
                                   ring_allreduce_traffic(array.size, itemsize,
                                                          self.size, self.rank),
                                   ring_allreduce_message_sizes(array.size, itemsize,
                                                                self.size, self.rank))
        return request

    def _wire_iallreduce(self, array, out, ufunc, average, wire) -> Request:
        narrowed, buffer, operation = compressed_allreduce.narrowed_for_mpi(
            self._MPI, array, wire, ufunc)
        request = self.comm.Iallreduce(self._MPI.IN_PLACE, buffer, operation)
        self.volume.record_traffic("iallreduce", f"mpi/{wire.name}", _RING_MODEL,
                                   ring_allreduce_traffic(array.size, wire.itemsize,
                                                          self.size, self.rank),
                                   ring_allreduce_message_sizes(array.size, wire.itemsize,
                                                                self.size, self.rank))
        size = self.size

        def finish(status):
            compressed_allreduce.finish_mpi(narrowed, out, wire, average, size)
        return Request(request, out, finish)

    # -- rooted collectives -----------------------------------------------------------
    def broadcast(self, array: np.ndarray, root: int = 0,
                  algorithm: str = "binomial") -> np.ndarray:
        """Copy the root's ``array`` into ``array`` on every rank (in place; returned).

        ``"binomial"``: relative rank v = (rank - root) mod p receives from v with its
        lowest set bit cleared, then sends to v + 2^k for each 2^k below that bit
        (MPICH's binomial tree, Thakur et al. 2005); counted exactly.
        """
        self._check(array, "broadcast", writable=self.rank != root)
        self._check_peer(root, "broadcast", "root")
        self._choose(algorithm, BROADCAST_ALGORITHMS, "broadcast")
        if algorithm == "mpi":
            self.comm.Bcast(array, root)
            traffic = binomial_broadcast_traffic(array.nbytes, self.size, self.rank, root)
            self.volume.record_traffic("broadcast", "mpi", _BINOMIAL_MODEL, traffic,
                                       [(array.nbytes, traffic.messages_sent)])
            return array
        p, comm, status = self.size, self._own, self._status
        relative = (self.rank - root) % p
        sent = received = messages_sent = messages_received = 0
        mask = 1
        try:
            while mask < p:
                if relative & mask:
                    parent = (relative - mask + root) % p
                    comm.Recv(array, parent, BROADCAST, status)
                    self._check_received(status, array.nbytes, "broadcast", parent)
                    received += array.nbytes
                    messages_received += 1
                    break
                mask <<= 1
        except self._MPI.Exception as exc:
            raise self._truncated(exc, "broadcast") from exc
        mask >>= 1
        while mask > 0:
            if relative + mask < p:
                comm.Send(array, (relative + mask + root) % p, BROADCAST)
                sent += array.nbytes
                messages_sent += 1
            mask >>= 1
        self.volume.record("broadcast", "binomial", EXACT, sent, received, messages_sent,
                           messages_received, [(array.nbytes, messages_sent)])
        return array

    def gather(self, array: np.ndarray, root: int = 0, out: np.ndarray | None = None,
               algorithm: str = "linear") -> np.ndarray | None:
        """Stack every rank's ``array`` at the root: shape (size, *array.shape), row i
        from rank i; ``None`` on the other ranks. ``"linear"``: each rank sends to the
        root directly (counted exactly)."""
        self._check(array, "gather")
        self._check_peer(root, "gather", "root")
        self._choose(algorithm, GATHER_ALGORITHMS, "gather")
        p, is_root = self.size, self.rank == root
        if is_root:
            shape = (p,) + array.shape
            if out is None:
                out = np.empty(shape, array.dtype)
            else:
                self._check_like(out, shape, array.dtype, "gather")
        if algorithm == "mpi":
            try:
                self.comm.Gather(array, out if is_root else None, root)
            except self._MPI.Exception as exc:
                raise self._truncated(exc, "gather") from exc
            self.volume.record_traffic("gather", "mpi", _BINOMIAL_MODEL,
                                       binomial_gather_traffic(array.nbytes, p, self.rank,
                                                               root))
            return out if is_root else None
        if not is_root:
            self._own.Send(array, root, GATHER)
            self.volume.record("gather", "linear", EXACT, array.nbytes, 0, 1, 0)
            return None
        out[root] = array
        sources = [i for i in range(p) if i != root]
        statuses = [self._MPI.Status() for _ in sources]
        requests = [self._own.Irecv(out[i], i, GATHER) for i in sources]
        try:
            self._MPI.Request.Waitall(requests, statuses)
        except self._MPI.Exception as exc:
            raise self._truncated(exc, "gather") from exc
        for source, status in zip(sources, statuses):
            self._check_received(status, array.nbytes, "gather", source)
        self.volume.record("gather", "linear", EXACT, 0, array.nbytes * (p - 1), 0, p - 1)
        return out

    def scatter(self, array: np.ndarray | None, out: np.ndarray, root: int = 0,
                algorithm: str = "linear") -> np.ndarray:
        """Give rank i row i of the root's ``array`` (shape (size, *out.shape)) in
        ``out`` (returned). ``array`` is only read at the root (pass ``None``
        elsewhere). ``"linear"``: the root sends each rank its row directly (counted
        exactly)."""
        self._check(out, "scatter", "out", writable=True)
        self._check_peer(root, "scatter", "root")
        self._choose(algorithm, GATHER_ALGORITHMS, "scatter")
        p, is_root = self.size, self.rank == root
        if is_root:
            self._check(array, "scatter")
            if array.shape != (p,) + out.shape or array.dtype != out.dtype:
                raise self._fail("scatter", f"array has shape {array.shape} and dtype "
                                 f"{array.dtype}, out {out.shape} and {out.dtype}",
                                 f"At the root, array must be (size={p}, *out.shape) "
                                 "of out's dtype")
        if algorithm == "mpi":
            try:
                self.comm.Scatter(array if is_root else None, out, root)
            except self._MPI.Exception as exc:
                raise self._truncated(exc, "scatter") from exc
            self.volume.record_traffic("scatter", "mpi", _BINOMIAL_MODEL,
                                       binomial_scatter_traffic(out.nbytes, p, self.rank,
                                                                root),
                                       binomial_scatter_message_sizes(out.nbytes, p,
                                                                      self.rank, root))
            return out
        if not is_root:
            try:
                self._own.Recv(out, root, SCATTER, self._status)
            except self._MPI.Exception as exc:
                raise self._truncated(exc, "scatter") from exc
            self._check_received(self._status, out.nbytes, "scatter", root)
            self.volume.record("scatter", "linear", EXACT, 0, out.nbytes, 0, 1)
            return out
        requests = [self._own.Isend(array[i], i, SCATTER) for i in range(p)
                    if i != root]
        out[...] = array[root]
        self._MPI.Request.Waitall(requests)
        self.volume.record("scatter", "linear", EXACT, out.nbytes * (p - 1), 0, p - 1, 0,
                           [(out.nbytes, p - 1)])
        return out

    def barrier(self) -> None:
        """``MPI_Barrier``; modelled as the dissemination barrier (zero-byte messages)."""
        self.comm.Barrier()
        traffic = dissemination_barrier_traffic(self.size)
        self.volume.record_traffic("barrier", "mpi", modelled("dissemination"), traffic,
                                   [(0, traffic.messages_sent)])

    # -- point to point ---------------------------------------------------------------
    def send(self, array: np.ndarray, dest: int, tag: int = 0) -> None:
        """Blocking send of ``array`` to rank ``dest`` (``MPI_Send``)."""
        self._check(array, "send")
        self._check_peer(dest, "send", "dest")
        self.comm.Send(array, dest, tag)
        self.volume.record("send", "direct", EXACT, array.nbytes, 0, 1, 0)

    def recv(self, out: np.ndarray, source: int, tag: int = 0) -> np.ndarray:
        """Blocking receive into ``out`` (returned) from rank ``source``; the message
        must fill ``out`` exactly."""
        self._check(out, "recv", "out", writable=True)
        self._check_peer(source, "recv", "source")
        return self._recv(out, source, tag, "recv")

    def recv_any(self, out: np.ndarray, tag: int | None = None):
        """Receive into ``out`` from any rank (and any tag if ``tag`` is None); returns
        ``(out, source, tag)``."""
        self._check(out, "recv_any", "out", writable=True)
        MPI = self._MPI
        self._recv(out, MPI.ANY_SOURCE, MPI.ANY_TAG if tag is None else tag, "recv_any")
        return out, self._status.Get_source(), self._status.Get_tag()

    def _recv(self, out, source, tag, what):
        try:
            self.comm.Recv(out, source, tag, self._status)
        except self._MPI.Exception as exc:
            raise self._truncated(exc, what) from exc
        self._check_received(self._status, out.nbytes, what, self._status.Get_source())
        self.volume.record(what, "direct", EXACT, 0, out.nbytes, 0, 1)
        return out

    def sendrecv(self, array: np.ndarray, dest: int, out: np.ndarray, source: int,
                 tag: int = 0) -> np.ndarray:
        """Send ``array`` to ``dest`` while receiving ``out`` (returned) from
        ``source`` (``MPI_Sendrecv``: no deadlock when ranks exchange in a cycle)."""
        self._check(array, "sendrecv")
        self._check(out, "sendrecv", "out", writable=True)
        self._check_peer(dest, "sendrecv", "dest")
        self._check_peer(source, "sendrecv", "source")
        try:
            self.comm.Sendrecv(array, dest, tag, out, source, tag, self._status)
        except self._MPI.Exception as exc:
            raise self._truncated(exc, "sendrecv") from exc
        self._check_received(self._status, out.nbytes, "sendrecv", source)
        self.volume.record("sendrecv", "direct", EXACT, array.nbytes, out.nbytes, 1, 1)
        return out

    def isend(self, array: np.ndarray, dest: int, tag: int = 0) -> Request:
        """Non-blocking send (``MPI_Isend``); ``array`` must not change until
        ``wait()``. Counted when posted."""
        self._check(array, "isend")
        self._check_peer(dest, "isend", "dest")
        request = self.comm.Isend(array, dest, tag)
        self.volume.record("isend", "direct", EXACT, array.nbytes, 0, 1, 0)
        return Request(request, None)

    def irecv(self, out: np.ndarray, source: int, tag: int = 0) -> Request:
        """Non-blocking receive into ``out`` (``MPI_Irecv``); ``wait()`` returns
        ``out`` and raises ``ShapeError`` if the message did not fill it. Counted when
        posted."""
        self._check(out, "irecv", "out", writable=True)
        self._check_peer(source, "irecv", "source")
        request = self.comm.Irecv(out, source, tag)
        self.volume.record("irecv", "direct", EXACT, 0, out.nbytes, 0, 1)

        def finish(status):
            self._check_received(status, out.nbytes, "irecv", source)
        return Request(request, out, finish, self._MPI.Status())

    # -- neighbour exchange -----------------------------------------------------------
    def _exchange(self, array, to_rank, to_tag, from_rank, out, what):
        """Send ``array`` to ``to_rank`` and receive ``out`` from ``from_rank``; a local
        copy (not counted) when both are this rank."""
        if to_rank == self.rank and from_rank == self.rank:
            np.copyto(out, array)
            return 0
        try:
            self._own.Sendrecv(array, to_rank, to_tag, out, from_rank, to_tag,
                               self._status)
        except self._MPI.Exception as exc:
            raise self._truncated(exc, what) from exc
        self._check_received(self._status, out.nbytes, what, from_rank)
        return 1

    def ring_exchange(self, array: np.ndarray):
        """Exchange ``array`` with both ring neighbours (rank ± 1 mod size); returns
        ``(from_left, from_right)``: the arrays of ranks r - 1 and r + 1. Two
        ``Sendrecv``: n bytes to the right and to the left, n from each (counted
        exactly; with one rank both are local copies)."""
        self._check(array, "ring_exchange")
        p, r = self.size, self.rank
        left, right = (r - 1) % p, (r + 1) % p
        from_left, from_right = np.empty_like(array), np.empty_like(array)
        messages = self._exchange(array, right, TO_RIGHT, left, from_left,
                                  "ring_exchange")
        messages += self._exchange(array, left, TO_LEFT, right, from_right,
                                   "ring_exchange")
        self.volume.record("ring_exchange", "direct", EXACT, messages * array.nbytes,
                           messages * array.nbytes, messages, messages,
                           [(array.nbytes, messages)])
        return from_left, from_right

    def torus_neighbours(self, rank: int | None = None) -> dict[str, int]:
        """Ranks north, south, west and east of ``rank`` (default this rank) on the
        ``grid`` torus (wrapping around)."""
        rows, cols = self.grid
        rank = self.rank if rank is None else rank
        row, col = divmod(rank, cols)
        return {"north": ((row - 1) % rows) * cols + col,
                "south": ((row + 1) % rows) * cols + col,
                "west": row * cols + (col - 1) % cols,
                "east": row * cols + (col + 1) % cols}

    def torus_exchange(self, array: np.ndarray) -> dict[str, np.ndarray]:
        """Exchange ``array`` with the four neighbours on the 2-D torus ``grid``
        (``torus_shape(size)``); returns the neighbours' arrays by direction ("north",
        "south", "west", "east"). Four ``Sendrecv`` (n bytes each way each); a
        dimension of extent 1 wraps onto this rank and is a local copy, not counted, so
        on a 1 x p grid this is the ring exchange."""
        self._check(array, "torus_exchange")
        near = self.torus_neighbours()
        got = {direction: np.empty_like(array) for direction in near}
        what = "torus_exchange"
        messages = self._exchange(array, near["south"], TO_SOUTH, near["north"],
                                  got["north"], what)
        messages += self._exchange(array, near["north"], TO_NORTH, near["south"],
                                   got["south"], what)
        messages += self._exchange(array, near["east"], TO_EAST, near["west"],
                                   got["west"], what)
        messages += self._exchange(array, near["west"], TO_WEST, near["east"],
                                   got["east"], what)
        self.volume.record("torus_exchange", "direct", EXACT, messages * array.nbytes,
                           messages * array.nbytes, messages, messages,
                           [(array.nbytes, messages)])
        return got

    # -- bookkeeping --------------------------------------------------------------------
    def volume_by_rank(self, root: int = 0) -> list[dict] | None:
        """Every rank's ``volume.to_dict()`` at the root (``None`` elsewhere). These
        small dictionaries are pickled (mpi4py's lowercase ``gather``) and not counted:
        they are Deep500's bookkeeping, not the measured scheme's traffic."""
        return self.comm.gather(self.volume.to_dict(), root=root)

    def abort(self, code: int = 1) -> None:
        """Stop every rank of the communicator (``MPI_Abort``)."""
        self.comm.Abort(code)
