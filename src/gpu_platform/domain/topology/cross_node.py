"""Distance between nodes from their placement labels: same node < same leaf switch < same
rack < elsewhere in the cluster. Labels are `leaf` and `rack` (NodeFabric / Node.labels)."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

__all__ = ["NodeLevel", "gang_spread", "node_level"]


class NodeLevel(enum.IntEnum):
    SAME_NODE = 0
    SAME_LEAF = 1
    SAME_RACK = 2
    CLUSTER = 3


def node_level(
    a: str, labels_a: Iterable[tuple[str, str]], b: str, labels_b: Iterable[tuple[str, str]]
) -> NodeLevel:
    """How far apart nodes `a` and `b` are. A missing label never counts as shared."""
    if a == b:
        return NodeLevel.SAME_NODE
    la, lb = dict(labels_a), dict(labels_b)
    if la.get("leaf") and la.get("leaf") == lb.get("leaf"):
        return NodeLevel.SAME_LEAF
    if la.get("rack") and la.get("rack") == lb.get("rack"):
        return NodeLevel.SAME_RACK
    return NodeLevel.CLUSTER


def gang_spread(nodes: Sequence[tuple[str, Iterable[tuple[str, str]]]]) -> NodeLevel:
    """The widest level any two nodes of a multi-node gang span (SAME_NODE for one node)."""
    items = [(n, tuple(labels)) for n, labels in nodes]
    worst = NodeLevel.SAME_NODE
    for i, (a, la) in enumerate(items):
        for b, lb in items[i + 1 :]:
            worst = max(worst, node_level(a, la, b, lb))
    return worst
