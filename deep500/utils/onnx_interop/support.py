"""One error for every unsupported operator of a model.

When an executor meets an operator it cannot build, the user needs the whole list at
once, not one operator per attempt: every unsupported node (name, operator, domain,
opset version) grouped by operator, and for each operator the registered executors that
do support it (from :mod:`deep500.frameworks.registry`), so that the choice is "use
another executor" or "re-export the model" in one step.
"""
from __future__ import annotations

from typing import Callable, Iterable

from deep500.utils.errors import UnsupportedError

_DEFAULT_DOMAINS = ("", "ai.onnx")


def _domain(op) -> str:
    return "ai.onnx" if op.domain in _DEFAULT_DOMAINS else op.domain


def group_by_operator(ops: Iterable) -> dict:
    """``{(domain, op_type, opset version): [node names]}`` in first-use order."""
    groups: dict = {}
    for op in ops:
        key = (_domain(op), op.op_type, getattr(op, "original_version", op.since_version))
        groups.setdefault(key, []).append(op.name)
    return groups


def registry_supporters(op_type: str, domain: str, exclude: str = "") -> str:
    """Which registered executors build ``op_type``, in words (the registry is asked at
    call time: building the error is the only moment it is needed)."""
    from deep500.frameworks import registry   # the runner-side registry, looked up lazily
    among = [n for n in registry.FRAMEWORKS if n != exclude]
    supported, unchecked = registry.supporters(op_type, domain, among)
    text = ("supported by " + ", ".join(supported)) if supported else \
        "supported by no other registered executor"
    if unchecked:
        text += " (not checked: " + ", ".join(f"{n}, {why}" for n, why in
                                               unchecked.items()) + ")"
    return text


def unsupported_operators_error(framework: str, ops: list, model=None, exclude: str = "",
                                supporters: Callable[[str, str, str], str] | None =
                                registry_supporters) -> UnsupportedError:
    """One :class:`UnsupportedError` naming every node of ``ops``, grouped by operator,
    with the executors that support each operator (``supporters(op_type, domain,
    exclude)``; None leaves that out). ``framework`` is the executor's name in words,
    ``exclude`` its registry name."""
    where = ""
    if model is not None:
        source = getattr(model, "source", "") or ""
        where = f" of model '{model.name}'" + (
            f" ({source})" if source and not source.startswith("<") else "")
    groups = group_by_operator(ops)

    def also(op_type, domain):
        if supporters is None:
            return ""
        return "; " + supporters(op_type, "" if domain == "ai.onnx" else domain, exclude)

    if len(groups) == 1:
        ((domain, op_type, version), nodes), = groups.items()
        used = (f"used by node '{nodes[0]}'" if len(nodes) == 1 else
                f"used by {len(nodes)} nodes: " + ", ".join(f"'{n}'" for n in nodes))
        domain_text = "" if domain == "ai.onnx" else f"domain {domain}, "
        return UnsupportedError(
            f"{framework} does not support operator {op_type} ({domain_text}opset version "
            f"{version}), {used}{where}{also(op_type, domain)}. Run the model on an executor "
            f"that supports it, or re-export it without this operator")
    lines = [f"{framework} does not support {len(groups)} operators{where} "
             f"({len(ops)} nodes):"]
    for (domain, op_type, version), nodes in groups.items():
        lines.append(f"  - {op_type} (domain {domain}, opset version {version}): "
                     f"node{'s' if len(nodes) > 1 else ''} "
                     + ", ".join(f"'{n}'" for n in nodes) + also(op_type, domain))
    lines.append("Run the model on an executor that supports them, or re-export it "
                 "without these operators.")
    return UnsupportedError("\n".join(lines))


__all__ = ["group_by_operator", "registry_supporters", "unsupported_operators_error"]
