"""α-β-γ time models of the collectives and neighbour exchanges Level 3 uses.

Every model prices an algorithm as the sum of its communication steps
(``collectives.pricing``): a step that sends a message of m bytes costs the Hockney time
α(m) + β(m)·m of the machine model (``deep500.utils.machine``), and a step that also
sums m received bytes into a buffer adds γ(m)·m. With one (α, β, γ) for every size the
sums collapse to the textbook closed forms quoted in each docstring (p ranks, n bytes
per rank, lg = log2). An allreduce algorithm's model is its object's ``cost``
(``deep500.lv3_distributed.collectives``, one file per algorithm);
:func:`predict_allreduce` looks the name up there. The broadcast, reduce-scatter,
allgather and neighbour-exchange models are below. Sources:

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
``deep500.lv3_distributed.calibration.coherence`` measures it). The allreduce models add
δ for every byte an algorithm writes into a range it has sent: recursive doubling sums into
the buffer it has just sent; the allgather of the ring and of Rabenseifner receives
into the chunks sent in the reduce-scatter; the broadcast of linear and binomial
receives into the buffer the parent read. With ``repeated`` (the same buffer
allreduced call after call) the first sums pay it too. Machine files of networks
have no δ (0): a NIC reads the pages, no core keeps them.
"""
from __future__ import annotations

import math

from deep500.lv3_distributed.collectives.pricing import Priced, lg, pof2, step, swap
from deep500.lv3_distributed.collectives.registry import allreduce_algorithm
from deep500.utils.errors import Deep500Error
from deep500.utils.machine import load_machine


#: The largest message the models price (16 EiB): beyond it, the α-β-γ sums of the
#: most extreme machine a file may describe could overflow to inf.
MAX_BYTES = 2.0 ** 64


def _check(nbytes, ranks, what):
    try:
        n, p, exact = float(nbytes), int(ranks), float(ranks)
    except (TypeError, ValueError, OverflowError):
        raise Deep500Error(f"{what}: nbytes ({nbytes!r}) must be a number and ranks "
                           f"({ranks!r}) an integer") from None
    if not 0 <= n <= MAX_BYTES:
        raise Deep500Error(f"{what}: nbytes is {nbytes!r}; give a number of bytes from 0 to "
                           f"2**64")
    if p < 1 or p != exact:
        raise Deep500Error(f"{what}: ranks is {ranks!r}; give an integer >= 1")
    return n, p


def _model(table, algorithm, what):
    if algorithm not in table:
        raise Deep500Error(f"{what}: unknown algorithm {algorithm!r}; known: "
                           f"{', '.join(table)}")
    return table[algorithm]


def _predict(table, algorithm, nbytes, ranks, machine, what) -> float:
    """Seconds of ``table[algorithm]`` for ``nbytes`` over ``ranks`` ranks; 0 on one
    rank or for no bytes."""
    model = _model(table, algorithm, what)
    n, p = _check(nbytes, ranks, what)
    return 0.0 if p == 1 or n == 0 else model(Priced(load_machine(machine), n), n, p)


def predict_allreduce(algorithm, nbytes: float, ranks: int, machine,
                      segment_bytes: float | None = None, repeated: bool = False) -> float:
    """Predicted seconds of an allreduce of ``nbytes`` per rank over ``ranks`` ranks.

    ``algorithm``: a name of ``collectives.allreduce_names()`` or an
    ``AllreduceAlgorithm`` (the formulas are in each one's ``_cost`` docstring);
    ``machine``: a machine file's path, a dict or a ``MachineModel``;
    ``segment_bytes``: the segment size of ``segmented_ring``. One rank costs 0.

    ``repeated``: the buffer was allreduced just before and not written since (an
    allreduce benchmark's loop, OSU's ``osu_allreduce``): the peers' receives of the
    last call read every line, so this call's first writes pay δ too. False (the
    default): this rank wrote the buffer since, as backprop writes the gradients.
    """
    chosen = allreduce_algorithm(algorithm, "predict_allreduce")
    n, p = _check(nbytes, ranks, "predict_allreduce")
    if p == 1 or n == 0:
        return 0.0
    return chosen.cost(load_machine(machine), n, p, repeated, segment_bytes=segment_bytes)


def predict_allreduce_call(algorithm, nbytes: float, ranks: int, machine,
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
    chosen = allreduce_algorithm(algorithm, "predict_allreduce_call")
    _check(nbytes, ranks, "predict_allreduce_call")
    return chosen.call_cost(load_machine(machine), nbytes, ranks, in_context, repeated,
                            segment_bytes=segment_bytes)


# --- broadcast, reduce-scatter, allgather --------------------------------------------

def _bcast_binomial(m, n, p):
    """Binomial tree (Thakur et al. 2005, 4.1): T = ⌈lg p⌉(α + nβ)."""
    return lg(p) * step(m, n)


def _bcast_linear(m, n, p):
    """The root sends to each rank in turn: T = (p-1)(α + nβ)."""
    return (p - 1) * step(m, n)


def _bcast_scatter_allgather(m, n, p):
    """Van de Geijn's long-message broadcast (Thakur et al. 2005, 4.1): binomial
    scatter then ring allgather. T = (lg p + p - 1)α + 2(p-1)/p nβ."""
    scatter = sum(step(m, n / 2 ** k) for k in range(1, lg(p) + 1))
    return scatter + (p - 1) * swap(m, n / p)


BROADCAST_MODELS = {"binomial": _bcast_binomial, "linear": _bcast_linear,
                    "scatter_allgather": _bcast_scatter_allgather}


def predict_broadcast(algorithm: str, nbytes: float, ranks: int, machine) -> float:
    """Predicted seconds to broadcast ``nbytes`` from one rank to ``ranks`` ranks
    (``algorithm`` in ``BROADCAST_MODELS``; also accepts ``"mpi"``, priced as MPICH's
    binomial tree below 12 KB and scatter-allgather from it, Thakur et al. 2005)."""
    n, _ = _check(nbytes, ranks, "predict_broadcast")
    if algorithm == "mpi":
        algorithm = "binomial" if n < 12288 else "scatter_allgather"
    return _predict(BROADCAST_MODELS, algorithm, nbytes, ranks, machine,
                    "predict_broadcast")


def _rs_ring(m, n, p):
    """Ring reduce-scatter: T = (p-1)α + (p-1)/p nβ + (p-1)/p nγ."""
    return (p - 1) * swap(m, n / p, reduce=True)


def _rs_recursive_halving(m, n, p):
    """Recursive halving (Thakur et al. 2005, 4.5; p a power of two, else folded):
    T = lg p α + (p-1)/p nβ + (p-1)/p nγ."""
    q = pof2(p)
    t = sum(swap(m, n / 2 ** k, reduce=True) for k in range(1, lg(q) + 1))
    return t + (0.0 if p == q else step(m, n, reduce=True))


REDUCE_SCATTER_MODELS = {"ring": _rs_ring, "recursive_halving": _rs_recursive_halving}


def predict_reduce_scatter(algorithm: str, nbytes: float, ranks: int, machine) -> float:
    """Predicted seconds to reduce ``nbytes`` per rank and leave each rank 1/p of the
    sum (``algorithm`` in ``REDUCE_SCATTER_MODELS``)."""
    return _predict(REDUCE_SCATTER_MODELS, algorithm, nbytes, ranks, machine,
                    "predict_reduce_scatter")


def _ag_ring(m, n, p):
    """Ring allgather (Thakur et al. 2005, 4.3): T = (p-1)α + (p-1)/p nβ."""
    return (p - 1) * swap(m, n / p)


def _ag_recursive_doubling(m, n, p):
    """Recursive doubling (Thakur et al. 2005, 4.3; p a power of two, else the
    result is sent to the extra ranks): T = lg p α + (p-1)/p nβ."""
    q = pof2(p)
    t = sum(swap(m, n / 2 ** k) for k in range(1, lg(q) + 1))
    return t + (0.0 if p == q else step(m, n))


ALLGATHER_MODELS = {"ring": _ag_ring, "recursive_doubling": _ag_recursive_doubling}


def predict_allgather(algorithm: str, nbytes: float, ranks: int, machine) -> float:
    """Predicted seconds to gather ``nbytes`` in total (n/p from each rank) on every
    rank (``algorithm`` in ``ALLGATHER_MODELS``)."""
    return _predict(ALLGATHER_MODELS, algorithm, nbytes, ranks, machine,
                    "predict_allgather")


# --- neighbour exchanges ---------------------------------------------------------------

def _exchanges(count, nbytes, ranks, machine, what) -> float:
    """``count`` ``Sendrecv`` of ``nbytes`` each way: T = count(α + nβ); 0 on one rank."""
    n, p = _check(nbytes, ranks, what)
    return 0.0 if p == 1 or n == 0 else count * swap(Priced(load_machine(machine), n), n)


def predict_ring_exchange(nbytes: float, ranks: int, machine) -> float:
    """``CommunicationNetwork.ring_exchange``: two ``Sendrecv`` of ``nbytes`` each way
    (to the left and to the right neighbour): T = 2(α + nβ); 0 on one rank."""
    return _exchanges(2, nbytes, ranks, machine, "predict_ring_exchange")


def predict_torus_exchange(nbytes: float, ranks: int, machine) -> float:
    """``CommunicationNetwork.torus_exchange``: four ``Sendrecv`` of ``nbytes`` each way
    (north, south, east, west on the 2-D torus): T = 4(α + nβ); 0 on one rank."""
    return _exchanges(4, nbytes, ranks, machine, "predict_torus_exchange")
