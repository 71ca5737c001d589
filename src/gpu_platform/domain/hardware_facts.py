"""What a submit is checked against: a summary of the cluster's hardware, kept between changes.

Theory of operation. Applying a submit refuses a spec no node could ever host (a GPU model,
vendor or memory size the cluster has none of, more GPUs than its largest node, a gang larger
than the whole cluster). Those checks used to walk every GPU of every node for each submit:
O(GPUs) on every server for every job (54 µs at 256 GPUs, 125 µs at 1,024 and 908 µs at 8,192
per applied submit, measured before this module). They only read facts that change when a node
is written — registered, re-registered, a GPU's state changed, removed — so `ClusterState`
keeps one `HardwareFacts` built from its node table and drops it on every node write
(`cluster_tables.NodeTable`); the next check rebuilds it once. Submits between node writes read
it in O(1) (O(distinct node sizes) for a gang).

`HardwareFacts.of(nodes)` is a pure function of the nodes: the checks give exactly the answers
(and messages) the full walk gave; tests/property/test_hardware_facts.py holds it to that walk.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from gpu_platform.domain.model.gpu import Gpu, Vendor
from gpu_platform.domain.model.node import Node

__all__ = ["HardwareFacts"]


@dataclass(frozen=True, slots=True)
class HardwareFacts:
    """The hardware facts submits are checked against (module docstring).

    `models`: every GPU model present. `largest_per_vendor`: for each vendor present, one of its
    GPUs with the most device memory (bytes) — the only GPUs a share request's vendor and memory
    check needs (`gpu_shares.check_share_request` reads vendor and memory alone).
    `max_gpus_per_node`: GPUs on the largest node (0 without nodes). `node_sizes`: (GPUs on a
    node, how many nodes have that many), ascending by size."""

    models: frozenset[str]
    largest_per_vendor: tuple[Gpu, ...]
    max_gpus_per_node: int
    node_sizes: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, nodes: Iterable[Node]) -> HardwareFacts:
        """The facts of `nodes` (one pass over their GPUs)."""
        models: set[str] = set()
        largest: dict[Vendor, Gpu] = {}
        sizes: Counter[int] = Counter()
        for node in nodes:
            sizes[len(node.gpus)] += 1
            for gpu in node.gpus:
                models.add(gpu.model)
                best = largest.get(gpu.vendor)
                if best is None or gpu.memory_bytes > best.memory_bytes:
                    largest[gpu.vendor] = gpu
        return cls(
            models=frozenset(models),
            largest_per_vendor=tuple(largest.values()),
            max_gpus_per_node=max(sizes, default=0),
            node_sizes=tuple(sorted(sizes.items())),
        )

    def slots(self, gpus_per_task: int) -> int:
        """How many tasks of `gpus_per_task` GPUs the whole cluster could hold at once, each
        on one node (a task of 0 GPUs: one per node)."""
        if not gpus_per_task:
            return sum(count for _, count in self.node_sizes)
        return sum((size // gpus_per_task) * count for size, count in self.node_sizes)
