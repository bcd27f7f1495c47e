"""Nodes added to a built network (``Network.add_node``), brought to the form the nodes
of a parsed model have: normalised to the newest opset (``normalize.py``), and their
graph attributes (the bodies of Loop, Scan, If, ...) parsed into ``op.subgraphs`` as
``parser.py`` parses a file's.

Its own module because it needs both: the parser normalises every graph it reads, so
normalisation cannot ask the parser back.
"""
from __future__ import annotations

from onnx import GraphProto

from deep500.utils.onnx_interop.normalize import normalize_nodes
from deep500.utils.onnx_interop.parser import parse_bodies


def normalize_operations(operations, network: str = "") -> tuple[list, dict]:
    """(normalised nodes, constants they read) for nodes outside a parsed model, e.g.
    one added to a built network named ``network``; a node's graph attributes are
    parsed into its ``subgraphs``."""
    nodes, constants = normalize_nodes(operations, network)
    for node in nodes:
        if not node.subgraphs and any(isinstance(v, GraphProto)
                                      for v in node.attributes.values()):
            parse_bodies(node, max(node.since_version, node.original_version),
                         source=f"network '{network}'" if network else "<in memory>")
    return nodes, constants


__all__ = ["normalize_operations"]
