"""α-β-γ time models of the collectives and neighbour exchanges Level 3 uses.

Every model prices an algorithm as the sum of its communication steps: a step that
sends a message of m bytes costs the Hockney time α(m) + β(m)·m of the machine model
(``deep500.utils.machine``), and a step that also sums m received bytes into a buffer
adds γ(m)·m. With one (α, β, γ) for every size the sums collapse to the textbook
closed forms quoted in each docstring (p ranks, n bytes per rank, lg = log2):

* R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication
  Operations in MPICH", IJHPCA 19(1):49-66, 2005 (binomial, recursive doubling,
  Rabenseifner, the fold for non-power-of-two p, MPICH's size thresholds);
* E. Chan, M. Heimlich, A. Purkayastha, R. van de Geijn, "Collective communication:
  theory, practice, and experience", CCPE 19(13), 2007 (ring/bucket algorithms,
  lower bounds);
* P. Patarasuk, X. Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
  workstations", JPDC 69(2), 2009 (the ring allreduce, segmented/pipelined);
* A. Castelló (Catalán), PhD thesis, Table 4.8 (the same costs, used by PyDTNN's
  simulator).

The models assume what the textbook does: one message in flight per rank and
direction, a full-duplex link (a ``Sendrecv`` of m bytes each way costs one α + β·m),
no contention, no overlap of the reduction with communication. Steps in which two
ranks ``Sendrecv`` to each other at once (ring, recursive doubling and halving,
Rabenseifner, ring allgather, the neighbour exchanges) are priced by the machine's
exchange fit when it has one (``MachineModel.exchange_time``): on one host the two
directions share CPUs and memory, and the full-duplex assumption underestimates them.
Linear and binomial steps (one direction at a time) and the fold use the one-way
ping-pong fit.

One term is not in the textbook: δ (s/byte, ``MachineModel.shared_sum`` and
``shared_receive``), what summing or receiving costs more into lines that a peer's
receive read since this rank last wrote them.
Between ranks on one host the MPI library copies a large message once, the receiver
reading the sender's pages, so those lines end up in two cores' caches and the
sender's next store to each must invalidate the other copy (Molka et al., PACT 2009;
``deep500.lv3_distributed.calibration_coherence`` measures it). The allreduce models add δ for
every byte an algorithm writes into a range it has sent: recursive doubling sums into
the buffer it has just sent; the allgather of the ring and of Rabenseifner receives
into the chunks sent in the reduce-scatter; the broadcast of linear and binomial
receives into the buffer the parent read. With ``repeated`` (the same buffer
allreduced call after call) the first sums pay it too. Machine files of networks
have no δ (0): a NIC reads the pages, no core keeps them.
"""
from __future__ import annotations

import math

from deep500.utils.errors import Deep500Error
from deep500.utils.machine import MachineModel, load_machine

#: Default segment size (bytes) of ``segmented_ring`` when none is given.
DEFAULT_SEGMENT_BYTES = 1 << 20
#: MPICH's ``MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE`` default: recursive doubling below it,
#: Rabenseifner from it (Thakur et al. 2005, section 4.4).
MPICH_ALLREDUCE_SHORT_MSG_BYTES = 2048


def _check(nbytes, ranks, what):
    try:
        n, p = float(nbytes), int(ranks)
    except (TypeError, ValueError):
        raise Deep500Error(f"{what}: nbytes ({nbytes!r}) must be a number and ranks "
                           f"({ranks!r}) an integer") from None
    if not n >= 0 or math.isinf(n):
        raise Deep500Error(f"{what}: nbytes is {nbytes!r}; give a finite number of bytes >= 0")
    if p < 1 or p != float(ranks):
        raise Deep500Error(f"{what}: ranks is {ranks!r}; give an integer >= 1")
    return n, p


class _Priced:
    """A machine, the size of the buffer of the collective being priced, and whether
    the peers read that buffer last (``repeated``, see ``predict_allreduce``)."""
    __slots__ = ("machine", "resident", "repeated")

    def __init__(self, machine: MachineModel, resident: float, repeated: bool = False):
        self.machine, self.resident, self.repeated = machine, resident, bool(repeated)


def _step(m: _Priced, nbytes: float, reduce: bool = False, exchange: bool = False) -> float:
    """One message of nbytes (α + β·n), plus the sum of nbytes into a buffer (γ·n).
    ``exchange``: a ``Sendrecv`` of nbytes each way at once, priced by the machine's
    exchange fit when it has one (else as one message: full duplex). β and γ are taken
    at the size of the collective's whole buffer when it is larger than the message:
    pieces of a buffer that does not fit in the caches move and are summed at the
    memory-resident rates."""
    if nbytes <= 0:
        return 0.0
    machine, resident = m.machine, max(nbytes, m.resident)
    t = (machine.exchange_time(nbytes, resident) if exchange
         else machine.p2p_time(nbytes, resident))
    return t + machine.gamma(resident) * nbytes if reduce else t


def _shared(m: _Priced, nbytes: float, kind: str, always: bool = True) -> float:
    """δ·n: ``nbytes`` summed (``kind`` "sum") or received ("receive") into lines a
    peer's receive read since this rank last wrote them (``MachineModel.shared_sum`` /
    ``shared_receive``; 0 on machines without them). ``always`` False: only when the
    buffer was read by the peers before the call (``repeated``)."""
    if nbytes <= 0 or not (always or m.repeated):
        return 0.0
    rate = m.machine.shared_sum if kind == "sum" else m.machine.shared_receive
    return rate(max(nbytes, m.resident)) * nbytes


def _priced(model, machine, n, p, repeated=False, **options):
    return model(_Priced(machine, n, repeated), n, p, **options)


def _swap(m, nbytes, reduce=False):
    return _step(m, nbytes, reduce=reduce, exchange=True)


def _lg(p: int) -> int:
    return int(math.ceil(math.log2(p))) if p > 1 else 0


def _pof2(p: int) -> int:
    return 1 << (p.bit_length() - 1)


# --- allreduce --------------------------------------------------------------------------

def _linear(m, n, p, **_):
    """Reduce at a root, then broadcast, both linear: the root receives and sums p - 1
    messages, then sends p - 1. T = 2(p-1)α + 2(p-1)nβ + (p-1)nγ + nδ_receive: the
    last rank receives the result into the buffer the root read (plus nδ_sum for the
    root's first sum when ``repeated``)."""
    return (p - 1) * (_step(m, n, reduce=True) + _step(m, n)) \
        + _shared(m, n, "sum", False) + _shared(m, n, "receive")


def _binomial(m, n, p, **_):
    """Binomial-tree reduce then binomial-tree broadcast (Thakur et al. 2005, 4.2 and
    4.1): T = 2⌈lg p⌉(α + nβ) + ⌈lg p⌉nγ + ⌈lg p⌉nδ_receive: each rank down the
    broadcast's path receives into the buffer its parent read in the reduce (plus
    nδ_sum for the first sums when ``repeated``)."""
    return _lg(p) * (_step(m, n, reduce=True) + _step(m, n) + _shared(m, n, "receive")) \
        + _shared(m, n, "sum", False)


def _fold(m, n, p):
    """Thakur et al. 2005, 4.4: for non-power-of-two p the p - p' extra ranks
    (p' = 2^⌊lg p⌋) first send their vector to a partner, which sums it (α + nβ + nγ),
    and get the result back at the end (α + nβ + nδ_receive: into the buffer they
    sent; the partner's sum pays nδ_sum when ``repeated``)."""
    if p == _pof2(p):
        return 0.0
    return (_step(m, n, reduce=True) + _step(m, n) + _shared(m, n, "sum", False)
            + _shared(m, n, "receive"))


def _recursive_doubling(m, n, p, **_):
    """Recursive doubling (Thakur et al. 2005, 4.4): lg p' exchanges of the full
    vector, each summed. T = lg p'(α + nβ + nγ + nδ_sum), plus the fold for p ≠ p':
    each step sums into the buffer it has just sent."""
    q = _pof2(p)
    return _lg(q) * (_swap(m, n, reduce=True) + _shared(m, n, "sum")) + _fold(m, n, p)


def _rabenseifner(m, n, p, **_):
    """Rabenseifner: reduce-scatter by recursive halving, then allgather by recursive
    doubling (Thakur et al. 2005, 4.4): step k moves n/2^k bytes.
    T = 2 lg p' α + 2(p'-1)/p' nβ + (p'-1)/p' nγ + (p'-1)/p' nδ_receive, plus the fold
    for p ≠ p': the allgather receives each half into the range it sent in the
    reduce-scatter (the reduce-scatter's sums pay δ_sum when ``repeated``)."""
    q = _pof2(p)
    t = sum(_swap(m, n / 2 ** k, reduce=True) + _shared(m, n / 2 ** k, "sum", False)
            + _swap(m, n / 2 ** k) + _shared(m, n / 2 ** k, "receive")
            for k in range(1, _lg(q) + 1))
    return t + _fold(m, n, p)


def _ring(m, n, p, **_):
    """Ring (Patarasuk & Yuan 2009; Chan et al. 2007): p - 1 reduce-scatter steps and
    p - 1 allgather steps on chunks of n/p. T = 2(p-1)α + 2(p-1)/p nβ + (p-1)/p nγ
    + (p-1)/p nδ_receive: each allgather step receives into the chunk this rank sent
    in the reduce-scatter (the reduce-scatter's sums pay δ_sum when ``repeated``)."""
    c = n / p
    return (p - 1) * (_swap(m, c, reduce=True) + _shared(m, c, "sum", False) + _swap(m, c)
                      + _shared(m, c, "receive"))


def _segmented_ring(m, n, p, segment_bytes=None, **_):
    """The ring with every chunk of n/p sent as k = ⌈n/(p s)⌉ segments of at most s
    bytes (Patarasuk & Yuan 2009): T = 2(p-1)kα + 2(p-1)/p nβ + (p-1)/p nγ. Pipelining
    can hide the sums behind transfers on a machine with idle cores; this model does
    not assume it (it is exact for a blocking segment loop). δ as for the ring."""
    s = float(segment_bytes or DEFAULT_SEGMENT_BYTES)
    if not s > 0:
        raise Deep500Error(f"segmented_ring: segment_bytes is {segment_bytes!r}; give a "
                           f"positive number of bytes")
    c = n / p
    k = max(1, math.ceil(c / s))
    last = c - (k - 1) * s
    per_chunk_reduce = (k - 1) * _swap(m, s, reduce=True) + _swap(m, last, reduce=True)
    per_chunk_copy = (k - 1) * _swap(m, s) + _swap(m, last)
    return (p - 1) * (per_chunk_reduce + per_chunk_copy + _shared(m, c, "sum", False)
                      + _shared(m, c, "receive"))


def _mpi(m, n, p, short_msg_bytes=MPICH_ALLREDUCE_SHORT_MSG_BYTES, **_):
    """``MPI_Allreduce`` modelled as MPICH's default choice (Thakur et al. 2005, 4.4;
    ``MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE`` = 2048 B): recursive doubling for messages
    below the threshold, Rabenseifner from it. An MPI library with another selection
    (MPICH's JSON tuning files, Open MPI's ``tuned`` decision) is priced the same way
    but may pick otherwise."""
    return _recursive_doubling(m, n, p) if n < short_msg_bytes else _rabenseifner(m, n, p)


ALLREDUCE_MODELS = {
    "linear": _linear,
    "binomial": _binomial,
    "recursive_doubling": _recursive_doubling,
    "rabenseifner": _rabenseifner,
    "ring": _ring,
    "segmented_ring": _segmented_ring,
    "mpi": _mpi,
}


def _model(table, algorithm, what):
    if algorithm not in table:
        raise Deep500Error(f"{what}: unknown algorithm {algorithm!r}; known: "
                           f"{', '.join(table)}")
    return table[algorithm]


def predict_allreduce(algorithm: str, nbytes: float, ranks: int, machine,
                      segment_bytes: float | None = None, repeated: bool = False) -> float:
    """Predicted seconds of an allreduce of ``nbytes`` per rank over ``ranks`` ranks.

    ``algorithm``: one of ``ALLREDUCE_MODELS`` (the formulas are in each function's
    docstring); ``machine``: a machine file's path, a dict or a ``MachineModel``;
    ``segment_bytes``: the segment size of ``segmented_ring``. One rank costs 0.

    ``repeated``: the buffer was allreduced just before and not written since (an
    allreduce benchmark's loop, OSU's ``osu_allreduce``): the peers' receives of the
    last call read every line, so this call's first writes pay δ too. False (the
    default): this rank wrote the buffer since, as backprop writes the gradients.
    """
    model = _model(ALLREDUCE_MODELS, algorithm, "predict_allreduce")
    n, p = _check(nbytes, ranks, "predict_allreduce")
    if p == 1 or n == 0:
        return 0.0
    return _priced(model, load_machine(machine), n, p, repeated=repeated,
                   segment_bytes=segment_bytes)


def predict_allreduce_call(algorithm: str, nbytes: float, ranks: int, machine,
                           segment_bytes: float | None = None,
                           in_context: bool = False, repeated: bool = False) -> float:
    """Predicted seconds of one ``CommunicationNetwork.allreduce`` call: the α-β-γ
    model (:func:`predict_allreduce`) plus Deep500's per-call software overhead o of
    ``algorithm`` from the machine file (``MachineModel.allreduce_overhead``, LogP's o,
    Culler et al., PPoPP 1993; 0 when the file has none). One rank costs 0.

    ``in_context``: the call inside a training step, between compute phases rather
    than back to back: the result times ``MachineModel.allreduce_context_factor``,
    the slow-down ``deep500 calibrate`` measured for calls between compute bursts
    (1.0 when the file has none). The factor is measured at the calibration's rank
    count and applied as is at every other: it stands for what the compute does to
    the caches and the ranks' arrival, a property of the node more than of p.
    ``repeated``: as for :func:`predict_allreduce`."""
    seconds = predict_allreduce(algorithm, nbytes, ranks, machine, segment_bytes, repeated)
    if int(ranks) == 1:
        return 0.0
    model = load_machine(machine)
    seconds += model.allreduce_overhead(algorithm)
    if in_context:
        seconds *= model.allreduce_context_factor(algorithm, nbytes)
    return seconds


# --- broadcast, reduce-scatter, allgather --------------------------------------------

def _bcast_binomial(m, n, p):
    """Binomial tree (Thakur et al. 2005, 4.1): T = ⌈lg p⌉(α + nβ)."""
    return _lg(p) * _step(m, n)


def _bcast_linear(m, n, p):
    """The root sends to each rank in turn: T = (p-1)(α + nβ)."""
    return (p - 1) * _step(m, n)


def _bcast_scatter_allgather(m, n, p):
    """Van de Geijn's long-message broadcast (Thakur et al. 2005, 4.1): binomial
    scatter then ring allgather. T = (lg p + p - 1)α + 2(p-1)/p nβ."""
    scatter = sum(_step(m, n / 2 ** k) for k in range(1, _lg(p) + 1))
    return scatter + (p - 1) * _swap(m, n / p)


BROADCAST_MODELS = {"binomial": _bcast_binomial, "linear": _bcast_linear,
                    "scatter_allgather": _bcast_scatter_allgather}


def predict_broadcast(algorithm: str, nbytes: float, ranks: int, machine) -> float:
    """Predicted seconds to broadcast ``nbytes`` from one rank to ``ranks`` ranks
    (``algorithm`` in ``BROADCAST_MODELS``; also accepts ``"mpi"``, priced as MPICH's
    binomial tree below 12 KB and scatter-allgather from it, Thakur et al. 2005)."""
    n, p = _check(nbytes, ranks, "predict_broadcast")
    if algorithm == "mpi":
        algorithm = "binomial" if n < 12288 else "scatter_allgather"
    model = _model(BROADCAST_MODELS, algorithm, "predict_broadcast")
    return 0.0 if p == 1 or n == 0 else _priced(model, load_machine(machine), n, p)


def _rs_ring(m, n, p):
    """Ring reduce-scatter: T = (p-1)α + (p-1)/p nβ + (p-1)/p nγ."""
    return (p - 1) * _swap(m, n / p, reduce=True)


def _rs_recursive_halving(m, n, p):
    """Recursive halving (Thakur et al. 2005, 4.5; p a power of two, else folded):
    T = lg p α + (p-1)/p nβ + (p-1)/p nγ."""
    q = _pof2(p)
    t = sum(_swap(m, n / 2 ** k, reduce=True) for k in range(1, _lg(q) + 1))
    return t + (0.0 if p == q else _step(m, n, reduce=True))


REDUCE_SCATTER_MODELS = {"ring": _rs_ring, "recursive_halving": _rs_recursive_halving}


def predict_reduce_scatter(algorithm: str, nbytes: float, ranks: int, machine) -> float:
    """Predicted seconds to reduce ``nbytes`` per rank and leave each rank 1/p of the
    sum (``algorithm`` in ``REDUCE_SCATTER_MODELS``)."""
    model = _model(REDUCE_SCATTER_MODELS, algorithm, "predict_reduce_scatter")
    n, p = _check(nbytes, ranks, "predict_reduce_scatter")
    return 0.0 if p == 1 or n == 0 else _priced(model, load_machine(machine), n, p)


def _ag_ring(m, n, p):
    """Ring allgather (Thakur et al. 2005, 4.3): T = (p-1)α + (p-1)/p nβ."""
    return (p - 1) * _swap(m, n / p)


def _ag_recursive_doubling(m, n, p):
    """Recursive doubling (Thakur et al. 2005, 4.3; p a power of two, else the
    result is sent to the extra ranks): T = lg p α + (p-1)/p nβ."""
    q = _pof2(p)
    t = sum(_swap(m, n / 2 ** k) for k in range(1, _lg(q) + 1))
    return t + (0.0 if p == q else _step(m, n))


ALLGATHER_MODELS = {"ring": _ag_ring, "recursive_doubling": _ag_recursive_doubling}


def predict_allgather(algorithm: str, nbytes: float, ranks: int, machine) -> float:
    """Predicted seconds to gather ``nbytes`` in total (n/p from each rank) on every
    rank (``algorithm`` in ``ALLGATHER_MODELS``)."""
    model = _model(ALLGATHER_MODELS, algorithm, "predict_allgather")
    n, p = _check(nbytes, ranks, "predict_allgather")
    return 0.0 if p == 1 or n == 0 else _priced(model, load_machine(machine), n, p)


# --- neighbour exchanges ---------------------------------------------------------------

def predict_ring_exchange(nbytes: float, ranks: int, machine) -> float:
    """``CommunicationNetwork.ring_exchange``: two ``Sendrecv`` of ``nbytes`` each way
    (to the left and to the right neighbour): T = 2(α + nβ); 0 on one rank."""
    n, p = _check(nbytes, ranks, "predict_ring_exchange")
    return 0.0 if p == 1 or n == 0 else 2 * _swap(_Priced(load_machine(machine), n), n)


def predict_torus_exchange(nbytes: float, ranks: int, machine) -> float:
    """``CommunicationNetwork.torus_exchange``: four ``Sendrecv`` of ``nbytes`` each way
    (north, south, east, west on the 2-D torus): T = 4(α + nβ); 0 on one rank."""
    n, p = _check(nbytes, ranks, "predict_torus_exchange")
    return 0.0 if p == 1 or n == 0 else 4 * _swap(_Priced(load_machine(machine), n), n)
