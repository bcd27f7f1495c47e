"""Choosing a micro-batch size per convolution under a memory budget (Oyama et al.,
"Accelerating Deep Learning Frameworks with Micro-batches", IEEE CLUSTER 2018, the
µ-cuDNN policies the Deep500 paper's micro-batching study follows).

Each convolution ``k`` has options ``c`` (a micro-batch size) with a measured time
``t[k, c]`` and workspace ``w[k, c]`` (what the convolution allocates beyond its output).
Two policies, as in µ-cuDNN:

- ``"division"`` (µ-cuDNN's workspace division, WD): every convolution keeps a workspace
  of its own, so the workspaces add up: minimise ``Σ_k t[k, c_k]`` subject to
  ``Σ_k w[k, c_k] ≤ budget``. A multiple-choice knapsack, solved exactly as µ-cuDNN
  does, as a 0-1 integer linear program (``scipy.optimize.milp``, HiGHS' branch and
  bound): binary ``x[k, c]``, ``Σ_c x[k, c] = 1`` for each ``k``.
- ``"reuse"`` (workspace reuse, WR): convolutions run one after another and reuse one
  workspace, so each must fit alone: ``max_k w[k, c_k] ≤ budget``. The problem then
  separates: each convolution takes its fastest option that fits.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from deep500.utils.byte_sizes import format_bytes
from deep500.utils.errors import Deep500Error

POLICIES = ("division", "reuse")


@dataclass(frozen=True)
class MicrobatchOption:
    """One convolution at one micro-batch size: median seconds, workspace bytes."""
    size: int
    seconds: float
    workspace_bytes: int


@dataclass(frozen=True)
class MicrobatchChoice:
    """The chosen option per convolution, and what the policy constrains."""
    policy: str
    budget_bytes: int
    chosen: dict   # convolution -> MicrobatchOption

    @property
    def sizes(self) -> dict:
        return {name: option.size for name, option in self.chosen.items()}

    @property
    def seconds(self) -> float:
        """Σ of the chosen options' times (the objective)."""
        return float(sum(option.seconds for option in self.chosen.values()))

    @property
    def workspace_bytes(self) -> int:
        """What the policy holds under the budget: the sum of the chosen workspaces
        (division) or the largest of them (reuse)."""
        return workspace_of(self.policy, [o.workspace_bytes for o in self.chosen.values()])

    def to_dict(self) -> dict:
        return {"policy": self.policy, "budget_bytes": self.budget_bytes,
                "sizes": self.sizes, "seconds": self.seconds,
                "workspace_bytes": self.workspace_bytes}


def workspace_of(policy: str, workspaces) -> int:
    workspaces = [int(w) for w in workspaces]
    if not workspaces:
        return 0
    return sum(workspaces) if policy == "division" else max(workspaces)


def choose_microbatches(options: dict, budget_bytes: int,
                        policy: str = "division") -> MicrobatchChoice:
    """The options (one per convolution) of least total time whose workspace, summed
    (``division``) or largest (``reuse``), is at most ``budget_bytes``.

    Args:
        options: convolution name -> list of :class:`MicrobatchOption`.
    Raises:
        Deep500Error: an unknown policy, a convolution without options, or a budget no
            choice meets (the message gives the smallest budget that has one).
    """
    if policy not in POLICIES:
        raise Deep500Error(f"memory policy must be one of {list(POLICIES)}, got "
                           f"{policy!r}")
    empty = [name for name, opts in options.items() if not opts]
    if empty:
        raise Deep500Error(f"convolutions {empty} have no micro-batch options to choose "
                           f"from")
    smallest = {name: min(opts, key=lambda o: o.workspace_bytes)
                for name, opts in options.items()}
    least = workspace_of(policy, [o.workspace_bytes for o in smallest.values()])
    if least > budget_bytes:
        hungriest = max(smallest, key=lambda n: smallest[n].workspace_bytes)
        raise Deep500Error(
            f"no micro-batch sizes fit a memory budget of {format_bytes(budget_bytes)} "
            f"({budget_bytes} bytes) under policy '{policy}': the smallest workspace "
            f"{'sum' if policy == 'division' else 'of the hungriest convolution'} is "
            f"{format_bytes(least)} ({least} bytes; '{hungriest}' needs "
            f"{format_bytes(smallest[hungriest].workspace_bytes)} even at micro-batch "
            f"{smallest[hungriest].size}); raise memory_budget to at least {least} bytes")
    if policy == "reuse":
        chosen = {name: min((o for o in opts if o.workspace_bytes <= budget_bytes),
                            key=lambda o: (o.seconds, -o.size))
                  for name, opts in options.items()}
    else:
        chosen = _knapsack(options, budget_bytes)
    return MicrobatchChoice(policy, int(budget_bytes), chosen)


def _knapsack(options: dict, budget_bytes: int) -> dict:
    """The multiple-choice knapsack of ``division`` as a 0-1 ILP (exact)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    names = list(options)
    flat = [(k, option) for k, name in enumerate(names) for option in options[name]]
    times = np.array([option.seconds for _, option in flat])
    # in units of the budget, so that HiGHS' tolerances are relative to it
    memory = np.array([option.workspace_bytes for _, option in flat]) / budget_bytes
    one_each = np.zeros((len(names), len(flat)))
    for column, (k, _) in enumerate(flat):
        one_each[k, column] = 1.0
    limit = 1.0
    for _ in range(3):
        result = milp(times, integrality=np.ones(len(flat)), bounds=Bounds(0, 1),
                      constraints=[LinearConstraint(one_each, 1, 1),
                                   LinearConstraint(memory[None, :], -np.inf, limit)])
        if result.x is None:
            raise Deep500Error(f"the micro-batch ILP found no solution ({result.message})")
        picked = np.round(result.x).astype(bool)
        chosen = {names[k]: option for (k, option), take in zip(flat, picked) if take}
        used = sum(o.workspace_bytes for o in chosen.values())
        if len(chosen) == len(names) and used <= budget_bytes:
            return chosen
        # HiGHS met the budget within its tolerance only; tighten by the excess
        limit -= max(used - budget_bytes, 1) / budget_bytes
    raise Deep500Error("the micro-batch ILP's solution exceeds the budget after "
                       "rounding, three times; report this with the recipe")
