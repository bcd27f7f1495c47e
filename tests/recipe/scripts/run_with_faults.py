"""Run by tests/recipe/test_run_failures_mpi.py and test_run_lifecycle.py: the
``deep500`` command with faults that only these tests use, on the rank named by the
environment variable ``FAULT_RANK`` (default 1; ranks as ``mpirun`` numbers them, a
single process is rank 0):

- operators: a ``Softmax`` measurement raises ``ZeroDivisionError`` (none of the error
  types a measurement was once limited to); an ``Exp`` measurement sleeps an hour; a
  ``Tanh`` measurement sleeps an hour inside a C call that holds Python's GIL (so no
  Python thread of that process runs: ``ctypes.PyDLL`` keeps the GIL across the call);
- operators, endings that say nothing: ``Abs`` calls ``os._exit(3)``, ``Neg`` kills its
  own process (SIGKILL), ``Floor`` dereferences a null pointer (SIGSEGV), ``Ceil``
  stops its own process (SIGSTOP), ``Reciprocal`` sends itself SIGTERM; with
  ``FAULT_AFTER_RECORDS`` set to the run folder, these wait (up to a minute) until rank
  0 has written the first configuration's records, which ranks otherwise need not have
  done (a rank's gathered record is sent eagerly, so it can reach the fault while a
  loaded rank 0 still measures);
- reference schemes: ``FailsAtFirstStep`` raises ``KeyError`` in its first step (the
  other ranks wait in the allreduce); ``HangsAtFirstStep`` sleeps an hour there.
"""
import ctypes
import os
import resource
import signal
import sys
import time

import deep500.recipe.experiments.operators as operators_experiment
from deep500.recipe import launcher
from deep500.frameworks.reference.distributed import SCHEMES, ConsistentDecentralized

FAULT_RANK = int(os.environ.get("FAULT_RANK", "1"))
RANK = int(os.environ.get("PMI_RANK", "0"))
HOUR = 3600
_SILENT = ("Abs", "Neg", "Floor", "Ceil", "Reciprocal")

real_test_op_forward = operators_experiment.test_op_forward


def _after_the_first_records():
    folder = os.environ.get("FAULT_AFTER_RECORDS")
    if not folder:
        return
    from deep500.results.files import read_results
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.isdir(folder) and any(r.get("index") == 0 for r in read_results(folder)):
            return
        time.sleep(0.05)


def faulty_test_op_forward(op, *args, **kwargs):
    if RANK == FAULT_RANK:
        if any(op.name.endswith(name) for name in _SILENT):
            _after_the_first_records()
        if op.name.endswith("Softmax"):
            raise ZeroDivisionError("Softmax fails on purpose")
        if op.name.endswith("Exp"):
            time.sleep(HOUR)
        if op.name.endswith("Tanh"):
            ctypes.PyDLL(None).sleep(HOUR)
        if op.name.endswith("Abs"):
            os._exit(3)
        if op.name.endswith("Neg"):
            os.kill(os.getpid(), signal.SIGKILL)
        if op.name.endswith("Floor"):
            ctypes.string_at(0)
        if op.name.endswith("Ceil"):
            os.kill(os.getpid(), signal.SIGSTOP)
        if op.name.endswith("Reciprocal"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs at the next bytecode; this one waits
    return real_test_op_forward(op, *args, **kwargs)


operators_experiment.test_op_forward = faulty_test_op_forward


class FailsAtFirstStep(ConsistentDecentralized):
    def step(self, inputs):
        if self.rank == FAULT_RANK:
            raise KeyError("FailsAtFirstStep fails on purpose")
        return super().step(inputs)


class HangsAtFirstStep(ConsistentDecentralized):
    def step(self, inputs):
        if self.rank == FAULT_RANK:
            time.sleep(HOUR)
        return super().step(inputs)


SCHEMES["FailsAtFirstStep"] = FailsAtFirstStep
SCHEMES["HangsAtFirstStep"] = HangsAtFirstStep

# deep500 run --np N: the ranks it launches run this script too, with its faults
launcher.RANK_PROGRAM = [os.path.abspath(__file__)]
# a segmentation fault on purpose leaves no core file behind
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

if __name__ == "__main__":
    from deep500.cli import main
    sys.exit(main())
