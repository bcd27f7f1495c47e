"""The steps every α-β-γ-δ cost model of a collective is summed from.

A step that sends a message of m bytes costs the Hockney time α(m) + β(m)·m of the
machine model (``deep500.utils.machine``); a step that also sums the m bytes received
into a buffer adds γ(m)·m (R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of
Collective Communication Operations in MPICH", IJHPCA 19(1), 2005). A write into lines
that a peer's receive read since this rank last wrote them adds δ·m
(``MachineModel.shared_sum`` / ``shared_receive``; D. Molka et al., PACT 2009).
``deep500.lv3_distributed.collective_models`` explains the assumptions.
"""
from __future__ import annotations

import math

from deep500.utils.machine import MachineModel


class Priced:
    """A machine, the size of the buffer of the collective being priced, and whether
    the peers read that buffer last (``repeated``, see ``predict_allreduce``)."""
    __slots__ = ("machine", "resident", "repeated")

    def __init__(self, machine: MachineModel, resident: float, repeated: bool = False):
        self.machine, self.resident, self.repeated = machine, resident, bool(repeated)


def step(m: Priced, nbytes: float, reduce: bool = False, exchange: bool = False) -> float:
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


def swap(m: Priced, nbytes: float, reduce: bool = False) -> float:
    """A ``Sendrecv`` of nbytes each way (``step`` with ``exchange``)."""
    return step(m, nbytes, reduce=reduce, exchange=True)


def shared(m: Priced, nbytes: float, kind: str, always: bool = True) -> float:
    """δ·n: ``nbytes`` summed (``kind`` "sum") or received ("receive") into lines a
    peer's receive read since this rank last wrote them (``MachineModel.shared_sum`` /
    ``shared_receive``; 0 on machines without them). ``always`` False: only when the
    buffer was read by the peers before the call (``repeated``)."""
    if nbytes <= 0 or not (always or m.repeated):
        return 0.0
    rate = m.machine.shared_sum if kind == "sum" else m.machine.shared_receive
    return rate(max(nbytes, m.resident)) * nbytes


def lg(p: int) -> int:
    """⌈log2 p⌉ (0 for one rank)."""
    return int(math.ceil(math.log2(p))) if p > 1 else 0


def pof2(p: int) -> int:
    """p' = 2^⌊log2 p⌋, the largest power of two not above p."""
    return 1 << (p.bit_length() - 1)
