"""PCIe levels against a brute-force path oracle on random trees; besteffort's invariants."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_platform.domain.model.gpu import Vendor
from gpu_platform.domain.model.node import NumaNode
from gpu_platform.domain.model.topology import GpuSite, HostTopology, LinkLevel, PciKind, PciNode
from gpu_platform.domain.topology import PciIndex, best_effort, build_matrix, classify_bridges
from gpu_platform.testing.topology_builders import pairwise_topology


@st.composite
def trees(draw: st.DrawFn) -> HostTopology:
    """1-3 host bridges on 1-2 NUMA nodes; random bridge chains; 2-6 devices at the leaves."""
    nodes: list[PciNode] = []
    attach: list[str] = []
    hosts = draw(st.integers(1, 3))
    for h in range(hosts):
        hid = f"hostbridge:{h}"
        nodes.append(PciNode(hid, PciKind.HOST_BRIDGE, None, draw(st.integers(0, 1))))
        attach.append(hid)
    for k in range(draw(st.integers(0, 8))):
        parent = draw(st.sampled_from(attach))
        bid = f"0000:{k + 0x10:02x}:00.0"
        nodes.append(PciNode(bid, PciKind.BRIDGE, parent))
        attach.append(bid)
    gpus = []
    for g in range(draw(st.integers(2, 6))):
        parent = draw(st.sampled_from(attach))
        gid = f"0000:{g + 0x80:02x}:00.0"
        nodes.append(PciNode(gid, PciKind.GPU, parent))
        gpus.append(GpuSite(g, gid, Vendor.NVIDIA))
    return HostTopology(
        node="t",
        numa_nodes=(NumaNode(0), NumaNode(1)),
        pci=classify_bridges(tuple(nodes)),
        gpus=tuple(gpus),
    )


def oracle(topo: HostTopology, a: str, b: str) -> LinkLevel:
    """Walk the full path a -> lowest common ancestor -> b and look at what it crosses."""
    by_id = {p.id: p for p in topo.pci}

    def up(x: str) -> list[str]:
        out, cur = [], by_id[x].parent
        while cur is not None:
            out.append(cur)
            cur = by_id[cur].parent
        return out

    ua, ub = up(a), up(b)
    common = [x for x in ua if x in ub]
    if not common:
        na, nb = by_id[ua[-1]].numa_node, by_id[ub[-1]].numa_node
        return LinkLevel.NODE if na == nb else LinkLevel.SYS
    lca = common[0]
    if by_id[lca].kind is PciKind.HOST_BRIDGE:
        return LinkLevel.PHB
    path = ua[: ua.index(lca) + 1] + ub[: ub.index(lca)]

    def switch(x: str) -> str:
        node = by_id[x]
        return node.parent if node.kind is PciKind.SWITCH_DOWN and node.parent else x

    return LinkLevel.PIX if len({switch(x) for x in path}) == 1 else LinkLevel.PXB


@settings(max_examples=200, deadline=None)
@given(trees())
def test_path_levels_match_the_brute_force_oracle_and_are_symmetric(topo: HostTopology) -> None:
    index = PciIndex(topo)
    for ga, gb in combinations(topo.gpus, 2):
        level = index.level(ga.pci_bus_id, gb.pci_bus_id)
        assert level is oracle(topo, ga.pci_bus_id, gb.pci_bus_id)
        assert level is index.level(gb.pci_bus_id, ga.pci_bus_id)


LEVELS = ["PIX", "PXB", "PHB", "NODE", "SYS"]


@st.composite
def machines(draw: st.DrawFn) -> HostTopology:
    n = draw(st.integers(2, 7))
    pairs = list(combinations(range(n), 2))
    levels = {p: draw(st.sampled_from(LEVELS)) for p in pairs}
    links = {p: c for p in pairs if (c := draw(st.integers(0, 3)))}
    return pairwise_topology("m", n, levels, nvlinks=links)


@settings(max_examples=150, deadline=None)
@given(machines(), st.data())
def test_best_effort_returns_a_whole_valid_set_or_nothing(
    topo: HostTopology, data: st.DataObject
) -> None:
    m = build_matrix(topo)
    available = data.draw(st.lists(st.sampled_from(m.gpus), unique=True, min_size=1))
    size = data.draw(st.integers(1, len(m.gpus)))
    required = data.draw(st.lists(st.sampled_from(available), unique=True, max_size=size))
    chosen = best_effort(m, available, size, required)
    feasible = size <= len(available) and len(required) <= size
    assert (chosen != ()) == feasible
    if chosen:
        assert len(chosen) == size
        assert set(required) <= set(chosen) <= set(available)
