"""Run by tests/lv3_distributed/test_timeline.py under ``mpirun -np N``.

Trains the small MLP of ``check_schemes.py`` on the digits with
``ConsistentDecentralized`` (options as JSON) through ``d5.test_training`` with the
``Timeline`` metric writing ``<out>/timeline.json``, inside a telemetry sampler (10 ms
ticks), and writes ``<out>/rank<R>.json``: the Timeline summary, the sampler's summary
and series, and the scheme's bytes sent and received over the training.
"""
import argparse
import json
import os

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.lv3_distributed import CommunicationNetwork, guarded_main
from deep500.lv3_distributed.timeline_metric import Timeline
from deep500.utils.telemetry import TelemetrySampler, registered_probes

from check_schemes import small_model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--options", default="{}", help="JSON keyword arguments")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--first-steps", type=int, default=3)
    parser.add_argument("--every", type=int, default=10)
    args = parser.parse_args()
    comm = CommunicationNetwork()
    train, test = d5.load_dataset("digits")
    executor = d5ref.from_onnx(small_model())
    base = d5ref.MomentumOptimizer(executor, learning_rate=0.05, momentum=0.9)
    sampler = TelemetrySampler(interval_s=0.01, threads=1, mpi_job=True).start()
    scheme = d5ref.ConsistentDecentralized(base, comm, **json.loads(args.options))
    metric = Timeline(os.path.join(args.out, "timeline.json"), first_steps=args.first_steps,
                      every=args.every)
    result = d5.test_training(executor, train, test, scheme, epochs=args.epochs,
                              batch_size=args.batch, metrics=[metric],
                              sampler=d5.DistributedSampler(train, args.batch, comm, seed=1))
    probes_after = sorted(registered_probes())
    summary = sampler.stop()
    volume = scheme.comm.volume.total()
    steps = [e.steps for e in result.outputs.epochs]
    with open(os.path.join(args.out, f"rank{comm.rank}.json"), "w") as handle:
        json.dump({"rank": comm.rank, "timeline": result["Timeline"].summary,
                   "telemetry": summary, "series": sampler.series(),
                   "bytes_sent": volume["bytes_sent"],
                   "bytes_received": volume["bytes_received"], "steps": steps,
                   "probes_after_training": probes_after}, handle, default=float)
    scheme.close()
    comm.close()


if __name__ == "__main__":
    with guarded_main():
        main()
