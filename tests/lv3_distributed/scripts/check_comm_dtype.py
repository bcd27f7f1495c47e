"""Run by tests/lv3_distributed/test_comm_dtype.py under ``mpirun -np N``.

Each rank allreduces seeded float32 arrays (rank r's values come from seed 100 * r + the
case number, so the test can rebuild every rank's input) with 16-bit wire dtypes, by
every algorithm that narrows the wire (Deep500's and ``MPI_Allreduce``), and writes ``<out>/rank<R>.npz`` (every result, by
case name) and ``<out>/rank<R>.json`` (the volume recorded by each call, and the
volume of the same call in float32).
"""
import json
import os
import sys

import numpy as np

from deep500.lv3_distributed import CommunicationNetwork, guarded_main

COUNTS = (1, 2, 7, 1000, 4099)


def rank_input(rank: int, case: int, count: int) -> np.ndarray:
    values = np.random.default_rng(100 * rank + case).standard_normal(count)
    return (values * 3.0).astype(np.float32)


def cases():
    number = 0
    for algorithm in ("ring", "linear", "binomial", "recursive_doubling", "rabenseifner",
                      "segmented_ring", "mpi"):
        for wire in ("float16", "bfloat16"):
            for op in ("sum", "average"):
                for count in COUNTS:
                    number += 1
                    yield number, algorithm, wire, op, count


def main():
    out = sys.argv[1]
    net = CommunicationNetwork()
    results, volumes = {}, {}
    for number, algorithm, wire, op, count in cases():
        name = f"{number}-{algorithm}-{wire}-{op}-{count}"
        array = rank_input(net.rank, number, count)
        before = net.volume.total()
        if number % 2:      # out of place, then in place
            result = net.allreduce(array, op=op, algorithm=algorithm, wire_dtype=wire)
        else:
            result = array.copy()
            net.allreduce(result, op=op, out=result, algorithm=algorithm,
                          wire_dtype=wire)
        middle = net.volume.total()
        plain = net.allreduce(array, op=op, algorithm=algorithm)
        after = net.volume.total()
        results[name] = result
        volumes[name] = {
            "wire": [middle[k] - before[k] for k in ("bytes_sent", "bytes_received",
                                                       "messages_sent",
                                                       "messages_received")],
            "float32": [after[k] - middle[k] for k in ("bytes_sent", "bytes_received",
                                                         "messages_sent",
                                                         "messages_received")],
            "analytic": list(net.allreduce_traffic(count, 4, algorithm,
                                                   wire_dtype=wire)),
            "plain_max_error": float(np.abs(plain - result).max())}
    # the segmented ring cut into many segments (64 bytes: 32 wire values each)
    array = rank_input(net.rank, 998, 4099)
    results["segmented-64"] = net.allreduce(array, op="sum", algorithm="segmented_ring",
                                            segment_bytes=64, wire_dtype="bfloat16")
    # the non-blocking call, in place
    array = rank_input(net.rank, 999, 513)
    request = net.iallreduce(array, op="average", out=array, wire_dtype="float16")
    results["iallreduce"] = request.wait().copy()
    np.savez(os.path.join(out, f"rank{net.rank}.npz"), **results)
    with open(os.path.join(out, f"rank{net.rank}.json"), "w") as handle:
        json.dump({"volumes": volumes, "entries": net.volume.to_dict()["entries"]}, handle)
    net.close()


if __name__ == "__main__":
    with guarded_main():
        main()
