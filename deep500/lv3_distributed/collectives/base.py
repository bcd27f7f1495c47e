"""``AllreduceAlgorithm``: what one allreduce algorithm is to Deep500.

Each algorithm is one object that knows three things, kept together so that they can
never drift apart (Horovod's ``AllreduceOp`` subclasses and ASTRA-sim's one class per
collective do the same):

* ``run``: reduce a buffer over the ranks of a ``CommunicationNetwork`` and return the
  :class:`~deep500.lv3_distributed.volume.Traffic` it handed to MPI;
* ``traffic``: the same bytes and messages per rank in closed form, without MPI (the
  tests check that the two agree for p = 2..5);
* ``cost``: its α-β-γ-δ time on a machine model, summed from the steps of
  :mod:`~deep500.lv3_distributed.collectives.pricing` (R. Thakur, R. Rabenseifner,
  W. Gropp, "Optimization of Collective Communication Operations in MPICH", IJHPCA
  19(1), 2005; P. Patarasuk, X. Yuan, "Bandwidth optimal all-reduce algorithms for
  clusters of workstations", JPDC 69(2), 2009), and ``call_cost``, that time plus
  Deep500's per-call software overhead o (LogP's o: D. Culler et al., "LogP: Towards a
  Realistic Model of Parallel Computation", PPoPP 1993) as ``deep500 calibrate``
  measured it.

The base class carries the plumbing (one rank, copying into ``out``, the options an
algorithm takes); a subclass writes its textbook form in ``_run``, ``_traffic`` and
``_cost``.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from deep500.lv3_distributed.collectives.pricing import Priced
from deep500.lv3_distributed.volume import EXACT, Traffic

NO_TRAFFIC = Traffic(0, 0, 0, 0)


class Reduction(NamedTuple):
    """What an allreduce computes: ``ufunc`` (``numpy.add``, ``maximum`` or
    ``minimum``) for Deep500's own algorithms, the same as an MPI operation for MPI's,
    and whether the result is divided by the number of ranks."""
    ufunc: Any
    mpi_op: Any
    average: bool


def flat_result(array: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out`` holding this rank's contribution (copied from ``array`` unless it is
    ``array``), as the flat view an algorithm reduces in place."""
    if out is not array:
        np.copyto(out, array)
    return out.reshape(-1)


class AllreduceAlgorithm:
    """One allreduce algorithm (see the module docstring). Stateless: the registry holds
    one instance of each.

    Class attributes a subclass sets:
        name: the name recipes and ``CommunicationNetwork.allreduce(algorithm=...)`` use.
        options: the keyword options it takes (e.g. ``("segment_bytes",)``); the base
            class hands it those and drops the rest, so one call can sweep every name.
        counted_exactly: Deep500 sends every message itself and counts it (False for
            MPI's own, whose traffic is a model).
        narrows_on_wire: it can send 16-bit values and reduce them at the buffer's
            precision (``run_narrowed``).
        non_blocking: it has a non-blocking form (``MPI_Iallreduce``) that can overlap
            backpropagation.
    """
    name: str = ""
    options: tuple = ()
    counted_exactly: bool = True
    narrows_on_wire: bool = False
    non_blocking: bool = False

    def __repr__(self) -> str:
        return f"<allreduce algorithm {self.name!r}>"

    def _taken(self, options: dict) -> dict:
        return {key: value for key, value in options.items() if key in self.options}

    # -- running ----------------------------------------------------------------------
    def run(self, net, array: np.ndarray, out: np.ndarray, reduction: Reduction,
            **options) -> Traffic:
        """Reduce ``array`` over the ranks of ``net`` (two or more) into ``out`` (same
        shape and dtype; may be ``array``), the same result on every rank; returns the
        traffic this rank handed to MPI."""
        return self._run(net, flat_result(array, out), reduction.ufunc, reduction.average,
                         **self._taken(options))

    def _run(self, net, target: np.ndarray, ufunc, average: bool, **options) -> Traffic:
        """Reduce the flat ``target`` (this rank's contribution) in place."""
        raise NotImplementedError(f"{type(self).__name__} does not run")

    def narrowed_run(self, net, array: np.ndarray, out: np.ndarray, reduction: Reduction,
                     wire, **options) -> Traffic:
        """``run_narrowed`` handed the options this algorithm takes (as ``run`` does),
        the rest dropped."""
        return self.run_narrowed(net, array, out, reduction, wire, **self._taken(options))

    def run_narrowed(self, net, array: np.ndarray, out: np.ndarray, reduction: Reduction,
                     wire) -> Traffic:
        """``run`` with the values on the wire narrowed to ``wire`` (a
        :class:`~deep500.lv3_distributed.wire_dtype.WireType`), reduced at the
        precision of ``array``; only where ``narrows_on_wire``."""
        raise NotImplementedError(f"the {self.name} allreduce cannot narrow the wire")

    def counted(self, net) -> str:
        """How ``run``'s traffic was obtained, as ``CommunicationVolume`` records it."""
        return EXACT

    # -- the closed forms -------------------------------------------------------------
    def traffic(self, count: int, itemsize: int, size: int, rank: int,
                **options) -> Traffic:
        """Bytes and messages rank ``rank`` of ``size`` sends and receives in one
        allreduce of ``count`` elements of ``itemsize`` bytes (none on one rank)."""
        if size == 1:
            return NO_TRAFFIC
        return self._traffic(count, itemsize, size, rank, **self._taken(options))

    def _traffic(self, count: int, itemsize: int, size: int, rank: int,
                 **options) -> Traffic:
        raise NotImplementedError(f"{type(self).__name__} states no traffic")

    def message_sizes(self, count: int, itemsize: int, size: int, rank: int,
                      **options):
        """The messages ``traffic`` sends, as ``(bytes, how many)`` pairs, where the
        algorithm states them in closed form; ``None`` where it does not (its ``run``
        hands each size to the network as it sends, which is what is recorded)."""
        return None

    def cost(self, machine, nbytes: float, ranks: int, repeated: bool = False,
             **options) -> float:
        """Seconds of one allreduce of ``nbytes`` per rank over ``ranks`` ranks on
        ``machine`` (a ``MachineModel``): the α, β, γ and δ terms of ``_cost``; 0 on one
        rank or for no bytes. ``repeated``: the peers read the buffer last (see
        ``collective_models.predict_allreduce``)."""
        n, p = float(nbytes), int(ranks)
        if p == 1 or n == 0:
            return 0.0
        return self._cost(Priced(machine, n, repeated), n, p, **self._taken(options))

    def _cost(self, m: Priced, n: float, p: int, **options) -> float:
        raise NotImplementedError(f"{type(self).__name__} has no cost model")

    def call_cost(self, machine, nbytes: float, ranks: int, in_context: bool = False,
                  repeated: bool = False, **options) -> float:
        """Seconds of one ``CommunicationNetwork.allreduce`` call: ``cost`` plus the
        per-call overhead o of the machine file (``MachineModel.allreduce_overhead``),
        times its in-context factor (``allreduce_context_factor``) when ``in_context``;
        0 on one rank."""
        seconds = self.cost(machine, nbytes, ranks, repeated, **options)
        if int(ranks) == 1:
            return 0.0
        seconds += machine.allreduce_overhead(self.name)
        if in_context:
            seconds *= machine.allreduce_context_factor(self.name, nbytes)
        return seconds
