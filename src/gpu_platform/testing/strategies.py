"""Hypothesis strategies for inventories and job requests (public: use them on your adapters)."""

from __future__ import annotations

from hypothesis import strategies as st

from gpu_platform.domain.model.gpu import Gpu, Vendor
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.node import Inventory, Node, NumaNode

__all__ = ["inventories", "job_specs", "nodes"]

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
