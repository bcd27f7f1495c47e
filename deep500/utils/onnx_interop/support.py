"""One error for every unsupported operator of a model.

When an executor meets an operator it cannot build, the user needs the whole list at
once, not one operator per attempt: every unsupported node (name, operator, domain,
opset version) grouped by operator, and for each operator the registered executors that
do support it, so that the choice is "use another executor" or "re-export the model" in
one step.

Which executor supports what is a table handed to this module
(:func:`register_support_table`) by the framework registry when it is imported
(``deep500/frameworks/registry.py``): this level knows no framework.
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


#: ``table(op_type, domain, exclude) -> ([executors that build it], {executor: why it
#: was not checked})``, over the registered executors other than ``exclude``.
SupportTable = Callable[[str, str, str], "tuple[list[str], dict[str, str]]"]
_support_table: SupportTable | None = None


def register_support_table(table: SupportTable | None) -> None:
    """Make ``table`` the one :func:`registered_supporters` asks (the framework registry
    registers its own when imported); None forgets it."""
    global _support_table
    _support_table = table


def registered_supporters(op_type: str, domain: str, exclude: str = "") -> str:
    """Which registered executors other than ``exclude`` build ``op_type``, in words;
    empty when no support table is registered. The table is asked at call time:
    building the error is the only moment it is needed."""
    if _support_table is None:
        return ""
    supported, unchecked = _support_table(op_type, domain, exclude)
    text = ("supported by " + ", ".join(supported)) if supported else \
        "supported by no other registered executor"
    if unchecked:
        text += " (not checked: " + ", ".join(f"{n}, {why}" for n, why in
                                               unchecked.items()) + ")"
    return text


def unsupported_operators_error(framework: str, ops: list, model=None, exclude: str = "",
                                supporters: Callable[[str, str, str], str] | None =
                                registered_supporters) -> UnsupportedError:
    """One :class:`UnsupportedError` naming every node of ``ops``, grouped by operator,
    with the executors that support each operator (``supporters(op_type, domain,
    exclude)`` in words; None or an empty text leaves that out). ``framework`` is the
    executor's name in words, ``exclude`` its registry name."""
    where = ""
    if model is not None:
        source = getattr(model, "source", "") or ""
        where = f" of model '{model.name}'" + (
            f" ({source})" if source and not source.startswith("<") else "")
    groups = group_by_operator(ops)

    def also(op_type, domain):
        text = "" if supporters is None else supporters(
            op_type, "" if domain == "ai.onnx" else domain, exclude)
        return "; " + text if text else ""

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


__all__ = ["SupportTable", "group_by_operator", "register_support_table",
           "registered_supporters", "unsupported_operators_error"]
