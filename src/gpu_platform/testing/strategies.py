"""Hypothesis strategies for inventories and job requests (public: use them on your adapters)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from gpu_platform.domain.model.gpu import Gpu, GpuState, Vendor
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory, Node, NodeState, NumaNode
from gpu_platform.domain.model.topology import (
    FabricKind,
    GpuSite,
    HostTopology,
    Link,
    LinkLevel,
    MeasuredLevel,
    Nic,
    Package,
    PciKind,
    PciNode,
)

__all__ = ["described_nodes", "host_topologies", "inventories", "job_specs", "nodes"]

_OWN_STATES = [s for s in GpuState if s not in (GpuState.ALLOCATED, GpuState.IN_USE)]
_TEXT = st.text(alphabet="abcdefghij-:/. ", max_size=8)

GIB = 1 << 30


@st.composite
def nodes(draw: st.DrawFn, name: str, max_gpus: int = 8, max_numa: int = 2) -> Node:
    """A node called `name` with 0..max_gpus GPUs spread over 1..max_numa NUMA nodes."""
    n_gpus = draw(st.integers(0, max_gpus))
    n_numa = draw(st.integers(1, max_numa))
    model = draw(st.sampled_from(["A100-SXM4-80GB", "H100-SXM5-80GB", "V100-SXM2-32GB"]))
    gpus = tuple(
        Gpu(
            uuid=f"GPU-{name}-{i}",
            index=i,
            node=name,
            vendor=Vendor.NVIDIA,
            model=model,
            memory_bytes=80 * GIB,
            numa_node=draw(st.integers(0, n_numa - 1)),
        )
        for i in range(n_gpus)
    )
    numa = tuple(NumaNode(i, (i,), 64 * GIB) for i in range(n_numa))
    return Node(name=name, gpus=gpus, numa_nodes=numa, cpus=n_numa, memory_bytes=n_numa * 64 * GIB)


@st.composite
def inventories(draw: st.DrawFn, max_nodes: int = 3, max_gpus: int = 8) -> Inventory:
    """An inventory of 1..max_nodes nodes with at least one GPU in total."""
    count = draw(st.integers(1, max_nodes))
    drawn = [draw(nodes(f"n{i}", max_gpus)) for i in range(count)]
    if not any(n.gpus for n in drawn):
        drawn[0] = draw(nodes("n0", max_gpus).filter(lambda n: bool(n.gpus)))
    return Inventory(tuple(drawn), source="hypothesis", simulated=True)


def job_specs(
    max_gpus: int = 8, programs: tuple[str, ...] = ("fake-forever",)
) -> st.SearchStrategy[JobSpec]:
    """Job requests for 0..max_gpus whole GPUs running one of `programs`."""
    return st.builds(
        JobSpec,
        command=st.sampled_from(programs).map(lambda p: (p,)),
        gpus=st.integers(0, max_gpus),
        name=st.text(alphabet="abcdefghij-", max_size=8),
        tenant=st.sampled_from(["default", "team-a", "team-b"]),
        priority=st.integers(-10, 10),
    )


@st.composite
def host_topologies(draw: st.DrawFn, node: str, gpus: int = 2) -> HostTopology:
    """A topology for `node` using every HostTopology field: packages, NUMA distances, a PCIe
    chain with `gpus` GPUs and a NIC, fabric links, measured levels, labels and notes."""
    numa = tuple(NumaNode(i, (i, i + 2), draw(st.integers(0, 1 << 40))) for i in range(2))
    bus = [f"0000:{i + 0x10:02x}:00.0" for i in range(gpus)]
    pci = (
        PciNode("hostbridge:0", PciKind.HOST_BRIDGE, None, 0),
        PciNode("0000:01:00.0", PciKind.SWITCH_UP, "hostbridge:0", 0, 0x10B5, 0x8747, 0x0604),
        *(PciNode(b, PciKind.GPU, "0000:01:00.0", 0, 0x10DE, 0x20B0, 0x0302, "gpu") for b in bus),
        PciNode("0000:02:00.0", PciKind.NIC, "hostbridge:0", 1, name="mlx5_0"),
    )
    return HostTopology(
        node=node,
        source=draw(_TEXT),
        packages=(Package(0, (0,), (0, 2), "cpu"), Package(1, (1,), (1, 3))),
        numa_nodes=numa,
        numa_distances=((10, 21), (21, 10)),
        pci=pci,
        gpus=tuple(
            GpuSite(i, b, Vendor.NVIDIA, "m", f"GPU-{node}-{i}", 0, 1 << 30, (0, 2))
            for i, b in enumerate(bus)
        ),
        nics=(Nic("mlx5_0", "0000:02:00.0", "rdma", 1, "InfiniBand", "ACTIVE", ("ib0",)),),
        links=tuple(
            Link(bus[0], b, draw(st.sampled_from(FabricKind)), draw(st.integers(1, 18)), 25_000)
            for b in bus[1:]
        ),
        measured_levels=tuple(
            MeasuredLevel(bus[0], b, draw(st.sampled_from(LinkLevel))) for b in bus[1:]
        ),
        labels=(("rack", draw(_TEXT)),),
        notes=tuple(draw(st.lists(_TEXT, max_size=2))),
    )


@st.composite
def described_nodes(draw: st.DrawFn, name: str, max_gpus: int = 4) -> Node:
    """`nodes(name)` with everything a node can carry: GPU states and PCI ids, labels, a node
    state and (sometimes) a topology. GPU states are health/admin states only."""
    node = draw(nodes(name, max_gpus))
    gpus = tuple(
        replace(
            g,
            pci_bus_id=f"0000:{g.index + 0x10:02x}:00.0",
            state=draw(st.sampled_from(_OWN_STATES)),
            memory_bytes=draw(st.integers(0, 1 << 40)),
        )
        for g in node.gpus
    )
    topology = draw(st.none() | host_topologies(name, len(gpus)))
    labels = tuple(draw(st.dictionaries(_TEXT, _TEXT, max_size=2)).items())
    return replace(
        node, gpus=gpus, labels=labels, state=draw(st.sampled_from(NodeState)), topology=topology
    )
