"""Run by tests/lv3_distributed/test_async_schemes.py under ``mpirun -np N``.

Constructs the asynchronous schemes with settings a user can get wrong and writes each
error message to ``<out>/rank<R>.json`` (``null`` if none was raised).
"""
import json
import os
import sys

from deep500.frameworks import reference as d5ref
from deep500.frameworks.reference.distributed import (InconsistentParameterServer,
                                                      StaleSynchronous)
from deep500.lv3_distributed import CommunicationNetwork, guarded_main
from deep500.networks import create_model
from deep500.utils.errors import Deep500Error

CASES = {"root_out_of_range": (InconsistentParameterServer, {"root": 7}),
         "root_negative": (InconsistentParameterServer, {"root": -1}),
         "staleness_negative": (StaleSynchronous, {"staleness": -1}),
         "staleness_fraction": (StaleSynchronous, {"staleness": 1.5})}


def main(out):
    comm = CommunicationNetwork()
    model = create_model("mlp", input_shape=(1, 8, 8), hidden=(16,), classes=10,
                         loss="softmax_cross_entropy", seed=3)
    base = d5ref.GradientDescent(d5ref.from_onnx(model), learning_rate=0.1)
    errors = {}
    for name, (scheme, options) in CASES.items():
        try:
            scheme(base, comm, **options)
            errors[name] = None
        except Deep500Error as error:
            errors[name] = str(error)
    with open(os.path.join(out, f"rank{comm.rank}.json"), "w") as handle:
        json.dump(errors, handle)


if __name__ == "__main__":
    with guarded_main():
        main(sys.argv[1])
