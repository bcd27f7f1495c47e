"""The emulated cluster's links measured: which emulation is faithful to a full-duplex
network, and what the transport pitfall costs (docs/cluster_emulation.md).

For each way of running two ranks, under ``mpirun -np 2`` with mpi4py:

* ``shared memory``: no cluster (MPICH's default transport on one host);
* ``nodes``: ``--cluster nodes=2,rate=R`` (a namespace per node, a switch, a token
  bucket on each end of each node's link; MPICH ch4:ofi over libfabric's tcp);
* ``loopback``: ``--cluster nodes=1,rate=R,mode=loopback`` (one namespace whose ``lo``
  carries one token bucket for all traffic; ch4:ofi tcp, ``MPIR_CVAR_NOLOCAL=1``);
* ``nodes, UCX``: the nodes cluster with ``MPIR_CVAR_CH4_NETMOD=ucx`` (the default
  netmod of this MPICH build): the pitfall.

it measures (medians over repetitions, as the OSU micro-benchmarks define them):
one-way latency of an 8-byte ping-pong (``osu_latency``), unidirectional bandwidth
of ``--bytes`` messages (``osu_bw``, one at a time, each acknowledged), bidirectional
bandwidth per direction (``osu_bibw``: both ranks send at once) and the bytes that
crossed the links (interface counters). A full-duplex network of rate R carries
R × 1448/1514 of TCP payload each way at once (a 1500-byte MTU: 1448 payload bytes in
a 1514-byte frame with TCP timestamps, RFC 7323); ``bibw/bw`` is 1.0 there.

Last line: ``faithful emulation: nodes (bibw/bw X; loopback Y)``.

Run (as root): python benchmarks/lv3_cluster_links.py [--rate 1gbit] [--bytes 8388608]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmark_targets import expected_run_time  # noqa: E402
from run_time_estimates import lv3_cluster_links  # noqa: E402

TCP_PAYLOAD = 1448 / 1514


def _rank_part(out: str, size: int, repeats: int) -> None:
    import time

    import numpy as np
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    peer = 1 - comm.rank
    small, ack = np.zeros(8, np.uint8), np.zeros(1, np.uint8)
    big, sink = np.ones(size, np.uint8), np.empty(size, np.uint8)

    def timed(step, count):
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(count):
            step()
        return (time.perf_counter() - start) / count

    def pingpong():
        if comm.rank == 0:
            comm.Send(small, peer)
            comm.Recv(small, peer)
        else:
            comm.Recv(small, peer)
            comm.Send(small, peer)

    def one_way():
        if comm.rank == 0:
            comm.Send(big, peer)
            comm.Recv(ack, peer)
        else:
            comm.Recv(sink, peer)
            comm.Send(ack, peer)

    def both_ways():
        comm.Sendrecv(big, peer, recvbuf=sink, source=peer)

    timed(pingpong, 100), timed(one_way, 1), timed(both_ways, 1)  # connections, warm-up
    latency = [timed(pingpong, 500) / 2 for _ in range(repeats)]
    bandwidth = [size / timed(one_way, 1) for _ in range(repeats)]
    bidirectional = [size / timed(both_ways, 1) for _ in range(repeats)]
    if comm.rank == 0:
        with open(out, "w", encoding="utf-8") as handle:
            json.dump({"latency": float(np.median(latency)),
                       "bw": float(np.median(bandwidth)),
                       "bibw": float(np.median(bidirectional)),
                       "host": MPI.Get_processor_name()}, handle)


def _measure(label: str, cluster_text: str | None, environment: dict, size: int,
             repeats: int) -> dict:
    from deep500.lv3_distributed import mpirun_executable
    from deep500.lv3_distributed.cluster import emulated_cluster, parse_cluster
    from deep500.lv3_distributed.cluster.command import link_summary
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "result.json")
        command = [mpirun_executable(), "-np", "2", sys.executable, __file__,
                   "--rank-part", out, "--bytes", str(size), "--repeats", str(repeats)]
        links = "-"
        env = {**os.environ, "OMP_NUM_THREADS": "1", **environment}
        if cluster_text is None:
            status = subprocess.run(command, env=env).returncode
        else:
            with emulated_cluster(parse_cluster(cluster_text)) as cluster:
                before = cluster.counters()
                status = cluster.run(command, env)
                links = link_summary(before, cluster.counters())
        if status != 0:
            raise SystemExit(f"{label}: the ranks failed (exit status {status})")
        with open(out, encoding="utf-8") as handle:
            return {"label": label, "links": links, **json.load(handle)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--bytes", type=int, default=8 * 1024 * 1024)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rank-part", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_part:
        return _rank_part(args.rank_part, args.bytes, args.repeats)
    from deep500.lv3_distributed.cluster import parse_cluster
    rate = parse_cluster(f"nodes=1,rate={args.rate}").rate_bytes
    expected_run_time(*lv3_cluster_links(rate, args.bytes, args.repeats))
    runs = [("shared memory", None, {}),
            ("nodes", f"nodes=2,rate={args.rate}", {}),
            ("loopback", f"nodes=1,rate={args.rate},mode=loopback", {}),
            ("nodes, UCX", f"nodes=2,rate={args.rate}", {"MPIR_CVAR_CH4_NETMOD": "ucx"})]
    results = [_measure(label, text, env, args.bytes, args.repeats)
               for label, text, env in runs]
    ceiling = rate * TCP_PAYLOAD
    print(f"link rate {args.rate}: {rate / 1e6:.1f} MB/s, TCP payload ceiling "
          f"{ceiling / 1e6:.1f} MB/s each way; messages of {args.bytes} B, 2 ranks")
    print(f"{'emulation':<15}{'latency':>10}{'bw MB/s':>10}{'bw/ceil':>9}"
          f"{'bibw MB/s':>11}{'bibw/ceil':>10}{'bibw/bw':>9}  bytes over the links")
    for r in results:
        print(f"{r['label']:<15}{r['latency'] * 1e6:>8.1f}us{r['bw'] / 1e6:>10.1f}"
              f"{r['bw'] / ceiling:>9.3f}{r['bibw'] / 1e6:>11.1f}{r['bibw'] / ceiling:>10.3f}"
              f"{r['bibw'] / r['bw']:>9.3f}  {r['links']}")
    by_label = {r["label"]: r for r in results}
    duplex = {m: by_label[m]["bibw"] / by_label[m]["bw"] for m in ("nodes", "loopback")}
    best = min(duplex, key=lambda m: abs(duplex[m] - 1.0))
    other = "loopback" if best == "nodes" else "nodes"
    print(f"faithful emulation: {best} (bibw/bw {duplex[best]:.2f}; {other} "
          f"{duplex[other]:.2f})")


if __name__ == "__main__":
    main()
