"""Run by tests/lv3_distributed/test_collectives.py under ``mpirun -np N``: Deep500's
non-blocking ring (``iallreduce(algorithm="ring")``) against the blocking ring, bit for
bit, with several requests outstanding at once and advanced by ``test()``; its traffic
recorded exactly. With ``wire_dtype`` float16 and bfloat16 it is likewise bit for bit the
blocking ring's narrowed allreduce, with 2 bytes per value counted. Any difference raises (and ``guarded_main`` ends the job non-zero);
rank 0 prints ``ring request ok`` at the end."""
import numpy as np

from deep500.lv3_distributed import CommunicationNetwork, guarded_main
from deep500.lv3_distributed.volume import ring_allreduce_traffic

COUNTS = (1, 2, 7, 1000, 4099)


def main():
    net = CommunicationNetwork()
    rng = np.random.default_rng(net.rank)
    for op in ("sum", "average"):
        arrays = [rng.standard_normal(count).astype(np.float32) for count in COUNTS]
        blocking = [net.allreduce(a, op=op, algorithm="ring") for a in arrays]
        before = net.volume.total()
        outs = [np.empty_like(a) for a in arrays]
        requests = [net.iallreduce(a, op=op, out=o, algorithm="ring")
                    for a, o in zip(arrays, outs)]
        spins = 0
        while not all(r.test() for r in requests):  # progressed by test() alone
            spins += 1
        results = [r.wait() for r in requests]
        for count, got, want in zip(COUNTS, results, blocking):
            if not np.array_equal(got, want):
                raise AssertionError(f"rank {net.rank}: {op} of {count}: the non-blocking "
                                     f"ring differs from the blocking ring")
        after = net.volume.total()
        expected = [ring_allreduce_traffic(c, 4, net.size, net.rank) for c in COUNTS]
        sent = after["bytes_sent"] - before["bytes_sent"]
        if sent != sum(t.bytes_sent for t in expected):
            raise AssertionError(f"rank {net.rank}: {sent} bytes counted, "
                                 f"{sum(t.bytes_sent for t in expected)} expected")
    for wire in ("float16", "bfloat16"):
        arrays = [rng.standard_normal(count).astype(np.float32) for count in COUNTS]
        blocking = [net.allreduce(a, op="average", algorithm="ring", wire_dtype=wire)
                    for a in arrays]
        before = net.volume.total()
        requests = [net.iallreduce(a, op="average", out=np.empty_like(a),
                                   algorithm="ring", wire_dtype=wire) for a in arrays]
        while not all(r.test() for r in requests):
            pass
        for count, got, want in zip(COUNTS, [r.wait() for r in requests], blocking):
            if not np.array_equal(got, want):
                raise AssertionError(f"rank {net.rank}: {wire} average of {count}: the "
                                     f"non-blocking ring differs from the blocking ring")
        sent = net.volume.total()["bytes_sent"] - before["bytes_sent"]
        expected = sum(ring_allreduce_traffic(c, 2, net.size, net.rank).bytes_sent
                       for c in COUNTS)
        if sent != expected:
            raise AssertionError(f"rank {net.rank}: {wire}: {sent} bytes counted, "
                                 f"{expected} expected")
    in_place = rng.standard_normal(513).astype(np.float32)
    want = net.allreduce(in_place, op="average", algorithm="ring")
    if not np.array_equal(net.iallreduce(in_place, op="average", out=in_place,
                                         algorithm="ring").wait(), want):
        raise AssertionError(f"rank {net.rank}: in place differs")
    net.close()
    if net.rank == 0:
        print("ring request ok", flush=True)


if __name__ == "__main__":
    with guarded_main():
        main()
