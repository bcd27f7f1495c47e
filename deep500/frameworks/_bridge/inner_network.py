"""The networks inside control-flow bodies (Loop, Scan, If, SequenceMap, FlexAttention's
score functions), built by the bridge's own network class without the operator importing
it.

A bridge's network module imports its visitor, which mixes in the operator families;
were a control-flow operator to import that network back, the three would import each
other. Instead each bridge registers a factory when its network module is loaded, and
the operators ask this registry for it by the bridge's name.
"""
from __future__ import annotations

from typing import Callable

from deep500.utils.errors import Deep500Error

_FACTORIES: dict[str, Callable] = {}


def register_inner_network(framework: str, factory: Callable) -> None:
    """Make ``factory`` the builder of ``framework``'s inner networks (called once, where
    the bridge's network class is defined; registering again replaces it)."""
    _FACTORIES[framework] = factory


def inner_network_factory(framework: str) -> Callable:
    """The factory ``framework``'s network module registered."""
    factory = _FACTORIES.get(framework)
    if factory is None:
        raise Deep500Error(
            f"no inner-network factory is registered for framework {framework!r} "
            f"(registered: {', '.join(sorted(_FACTORIES)) or 'none'}): import its network "
            f"module (deep500.frameworks.{framework}.network) before building a model "
            f"with control flow")
    return factory


__all__ = ["inner_network_factory", "register_inner_network"]
