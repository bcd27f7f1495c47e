"""The fold that lets power-of-two algorithms (recursive doubling, Rabenseifner) run on
any number of ranks, as MPICH does (R. Thakur, R. Rabenseifner, W. Gropp, IJHPCA 2005,
section 4.4; R. Rabenseifner, ICCS 2004).

With p' = 2^⌊log2 p⌋ and r = p - p', each even rank below 2r sends its whole buffer to
the next (odd) rank, which reduces it and takes part in the power-of-two algorithm as
new rank rank // 2 (ranks from 2r on as rank - r); at the end each such odd rank sends
the result back to its even partner. Here: running it, its traffic and its cost.
"""
from __future__ import annotations

from deep500.lv3_distributed.collectives.messages import Counter, recv, send
from deep500.lv3_distributed.collectives.pricing import Priced, pof2, shared, step
from deep500.lv3_distributed.message_tags import FOLD, UNFOLD
from deep500.lv3_distributed.volume import Traffic


def fold_partner(size: int, rank: int) -> tuple[int | None, int]:
    """``(partner, new rank)`` of ``rank``: partner ``None`` outside the fold, new rank
    -1 for a rank that hands its vector over and waits."""
    rest = size - (1 << (size.bit_length() - 1))
    if rank >= 2 * rest:
        return None, rank - rest
    return (rank + 1, -1) if rank % 2 == 0 else (rank - 1, rank // 2)


def old_rank(new_rank: int, size: int) -> int:
    """The rank that goes on as ``new_rank`` among the p' ranks."""
    rest = size - (1 << (size.bit_length() - 1))
    return new_rank * 2 + 1 if new_rank < rest else new_rank + rest


def fold(net, target, ufunc, counter: Counter) -> int:
    """The first 2r ranks pair up, even into odd. Returns this rank's new rank among
    the p' that go on, or -1 for a rank that waits."""
    partner, new_rank = fold_partner(net.size, net.rank)
    if partner is None:
        return new_rank
    if new_rank < 0:
        send(net, target, partner, FOLD, counter)
    else:
        scratch = net._scratch_for(target.dtype, target.size)
        recv(net, scratch, partner, FOLD, counter)
        ufunc(target, scratch, out=target)
    return new_rank


def unfold(net, target, new_rank: int, counter: Counter) -> None:
    """The result back to the ranks that waited."""
    partner, _ = fold_partner(net.size, net.rank)
    if partner is None:
        return
    if new_rank < 0:
        recv(net, target, partner, UNFOLD, counter)
    else:
        send(net, target, partner, UNFOLD, counter)


def run_folded(net, target, ufunc, power_of_two) -> Traffic:
    """Fold, run ``power_of_two(new_rank, counter)`` on the p' ranks that go on (the
    algorithm with ranks renumbered 0..p'-1, ``old_rank`` turning them back), unfold;
    returns this rank's traffic."""
    counter = Counter()
    new_rank = fold(net, target, ufunc, counter)
    if new_rank >= 0:
        power_of_two(new_rank, counter)
    unfold(net, target, new_rank, counter)
    return counter.traffic()


def with_fold(size: int, rank: int, n: int, inner: Traffic) -> Traffic:
    """``inner`` (the power-of-two algorithm's traffic of this rank) plus the fold's one
    message of ``n`` bytes each way for the 2r ranks in it; a waiting rank only that."""
    partner, new_rank = fold_partner(size, rank)
    if partner is None:
        return inner
    if new_rank < 0:
        return Traffic(n, n, 1, 1)
    return Traffic(inner.bytes_sent + n, inner.bytes_received + n,
                   inner.messages_sent + 1, inner.messages_received + 1)


def fold_cost(m: Priced, n: float, p: int) -> float:
    """For non-power-of-two p the extra ranks first send their vector to a partner,
    which sums it (α + nβ + nγ), and get the result back at the end (α + nβ +
    nδ_receive: into the buffer they sent; the partner's sum pays nδ_sum when
    ``repeated``); 0 for a power of two."""
    if p == pof2(p):
        return 0.0
    return (step(m, n, reduce=True) + step(m, n) + shared(m, n, "sum", False)
            + shared(m, n, "receive"))
