"""Run by tests/recipe/test_distributed_recipe.py under ``mpirun -np 2``: the ``deep500``
command with one more reference scheme, ``FailsOnRank1``, which raises on rank 1 in its
fifth step while rank 0 waits in the allreduce."""
import sys

from deep500.frameworks.reference.distributed import SCHEMES, ConsistentDecentralized


class FailsOnRank1(ConsistentDecentralized):
    def step(self, inputs):
        if self.rank == 1 and self.step_count == 4:
            raise RuntimeError("FailsOnRank1: rank 1 fails on purpose")
        return super().step(inputs)


SCHEMES["FailsOnRank1"] = FailsOnRank1

if __name__ == "__main__":
    from deep500.cli import main
    sys.exit(main())
