"""Cross-node distance from rack and leaf-switch labels."""

from __future__ import annotations

from gpu_platform.domain.topology import NodeLevel, gang_spread, node_level

R1L1 = (("leaf", "l1"), ("rack", "r1"))
R1L2 = (("leaf", "l2"), ("rack", "r1"))
R2L3 = (("leaf", "l3"), ("rack", "r2"))


def test_levels_order_node_leaf_rack_cluster() -> None:
    assert node_level("a", R1L1, "a", R1L1) is NodeLevel.SAME_NODE
    assert node_level("a", R1L1, "b", R1L1) is NodeLevel.SAME_LEAF
    assert node_level("a", R1L1, "b", R1L2) is NodeLevel.SAME_RACK
    assert node_level("a", R1L1, "b", R2L3) is NodeLevel.CLUSTER


def test_missing_labels_are_never_shared() -> None:
    assert node_level("a", (), "b", ()) is NodeLevel.CLUSTER
    assert node_level("a", (("rack", ""),), "b", (("rack", ""),)) is NodeLevel.CLUSTER


def test_a_gang_spans_its_widest_pair() -> None:
    assert gang_spread([("a", R1L1)]) is NodeLevel.SAME_NODE
    assert gang_spread([("a", R1L1), ("b", R1L1)]) is NodeLevel.SAME_LEAF
    assert gang_spread([("a", R1L1), ("b", R1L1), ("c", R1L2)]) is NodeLevel.SAME_RACK
    assert gang_spread([("a", R1L1), ("c", R2L3)]) is NodeLevel.CLUSTER
