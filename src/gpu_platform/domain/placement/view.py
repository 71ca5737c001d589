"""An indexed cluster view for placement: nodes bucketed by free-capacity signature.

A node's signature is (hardware class, free milli-GPU per GPU, free CPU milli-cores). Nodes
with equal signatures are interchangeable for scoring (GPU choice, fragmentation, best fit and
CPU stranding), so the engine scores a signature once per request shape and caches it.
`bind`/`release` move one node between buckets in O(GPUs); every signature that becomes
non-empty is appended to `log`, which lets per-shape orderings catch up incrementally instead
of rescanning the cluster (the engine compacts the log when it outgrows the live buckets).
Host memory is a hard constraint only, checked per node when a bucket's nodes are tried.

The view is the engine's only mutable structure; `place()` never mutates it (a gang is
tried on a private overlay). `check_invariants()` states what must always hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_platform.domain.model.node import Node, NodeState
from gpu_platform.domain.placement.fragmentation import (
    TaskShape,
    TypicalTasks,
    cpu_per_milli_gpu,
    cpu_thresholds,
)
from gpu_platform.domain.placement.node_choice import HardwareClass
from gpu_platform.domain.placement.request import MILLI, TaskPlacement
from gpu_platform.domain.topology.matrix import TopologyMatrix, build_matrix

__all__ = [
    "DEFAULT_TYPICAL",
    "GANG_LABELS",
    "UNKNOWN_CAPACITY",
    "ClusterView",
    "NodeSlot",
    "Signature",
]

UNKNOWN_CAPACITY = 1 << 62  # a node that reports no CPU count / memory is not limited by it
GANG_LABELS = ("leaf", "rack")  # node labels gangs are kept within, narrowest first
# (hardware class id, free milli per GPU position, free CPU milli-cores)
Signature = tuple[int, tuple[int, ...], int]

DEFAULT_TYPICAL = TypicalTasks(
    (
        (TaskShape(0, 0, 1, 1000), 0.40),
        (TaskShape(0, 0, 1, 500), 0.15),
        (TaskShape(0, 0, 1, 250), 0.10),
        (TaskShape(0, 0, 2, 1000), 0.10),
        (TaskShape(0, 0, 4, 1000), 0.10),
        (TaskShape(0, 0, 8, 1000), 0.15),
    )
)


@dataclass(slots=True)
class NodeSlot:
    """Mutable bookkeeping of one node inside the view."""

    node: Node
    hw: int
    free: list[int]
    cpu_free: int
    memory_free: int
    labels: dict[str, str]
    cpu_cap: int
    memory_cap: int


class ClusterView:
    """Free capacity of a cluster, indexed for placement. `typical` is the task mix the
    fragmentation and CPU-stranding terms expect (FGD's typical tasks); defaults to
    `DEFAULT_TYPICAL`. Fixed for the view's life."""

    def __init__(self, nodes: Iterable[Node], typical: TypicalTasks = DEFAULT_TYPICAL) -> None:
        self.typical = typical
        self.cpu_thresholds = cpu_thresholds(typical)
        self.cpu_per_milli_gpu = cpu_per_milli_gpu(typical)
        self.classes: list[HardwareClass] = []
        self.class_model: list[str] = []  # the class's GPU model when all agree, else ""
        self._class_ids: dict[tuple[object, ...], int] = {}
        self.slots: dict[str, NodeSlot] = {}
        self.buckets: dict[Signature, dict[str, None]] = {}
        self.log: list[Signature] = []
        # caches owned by the engine: per request shape orderings, fragmentation per shares
        self.orders: dict[tuple[object, ...], Any] = {}
        self.frag_cache: dict[tuple[object, ...], float] = {}
        self.gpu_cache: dict[tuple[object, ...], Any] = {}  # engine: GPU sets per shares
        self.max_gpus = 0
        self.max_cpu = 0  # largest known CPU capacity (milli-cores): best fit's normaliser
        self.cpu_cache: dict[tuple[str, tuple[int, ...]], tuple[int, ...]] = {}
        # free milli-GPU per (label, value) for the gang labels, kept in step by bind/release
        self.label_free: dict[tuple[str, str], int] = {}
        self.label_members: dict[tuple[str, str], list[str]] = {}
        for node in nodes:
            self.add_node(node)

    @classmethod
    def from_free(
        cls,
        nodes: Iterable[Node],
        free: Mapping[str, Iterable[int]],
        typical: TypicalTasks = DEFAULT_TYPICAL,
        matrix_of: Callable[[Node], TopologyMatrix | None] | None = None,
    ) -> ClusterView:
        """A view where only the GPU indices in `free[node]` are free (whole); nodes missing
        from `free` are fully used. For callers that hold first_fit's `NodeView`s:
        `ClusterView.from_free(nodes, {v.name: [g.index for g in v.free] for v in views})`.
        `matrix_of` returns a node's topology matrix (a caller's cache; default: built here)."""
        view = cls((), typical)
        for node in nodes:
            matrix = matrix_of(node) if matrix_of is not None else None
            view.add_node(node, free_indices=frozenset(free.get(node.name, ())), matrix=matrix)
        return view

    def add_node(
        self,
        node: Node,
        free_indices: frozenset[int] | None = None,
        matrix: TopologyMatrix | None = None,
        hardware: HardwareClass | None = None,
    ) -> None:
        """Index `node` fully free (its GPUs that are not schedulable count as used), or with
        only `free_indices` free. `matrix`: the node's topology matrix, if the caller has it;
        `hardware`: its hardware class, if the caller keeps them per hardware type."""
        if node.name in self.slots:
            raise ValueError(f"node {node.name} already in the view")
        hw = hardware
        if hw is None:
            if matrix is None and node.topology is not None:
                matrix = build_matrix(node.topology)
            hw = HardwareClass.of(node.gpus, matrix)
        # the engine reads which GPUs are usable from the class's GPUs: nodes share a class
        # only when the same GPUs are schedulable (else a drained GPU would spread)
        key = (hw.key(), tuple(g.schedulable for g in hw.gpus))
        cid = self._class_ids.get(key)
        if cid is None:
            cid = self._class_ids[key] = len(self.classes)
            self.classes.append(hw)
            models = {g.model for g in hw.gpus}
            self.class_model.append(models.pop() if len(models) == 1 else "")
        if len(hw.gpus) > self.max_gpus:
            self.max_gpus = len(hw.gpus)
            self.orders.clear()  # the best-fit normalisation changed: re-rank lazily
        if node.cpus * 1000 > self.max_cpu:
            self.max_cpu = node.cpus * 1000
            self.orders.clear()
        ready = node.state is NodeState.READY
        free = [
            MILLI
            if ready and g.schedulable and (free_indices is None or g.index in free_indices)
            else 0
            for g in hw.gpus
        ]
        cpu_cap = node.cpus * 1000 if node.cpus else UNKNOWN_CAPACITY
        mem_cap = node.memory_bytes or UNKNOWN_CAPACITY
        slot = NodeSlot(node, cid, free, cpu_cap, mem_cap, dict(node.labels), cpu_cap, mem_cap)
        self.slots[node.name] = slot
        self._enter(node.name, slot)
        self._count(slot, sum(free))
        for label in GANG_LABELS:
            if slot.labels.get(label):
                self.label_members.setdefault((label, slot.labels[label]), []).append(node.name)

    def remove_node(self, name: str) -> None:
        """Forget node `name` (it left, or went DOWN/DRAINING: re-add it when it is back,
        then `bind` what still runs there). KeyError for an unknown node."""
        slot = self.slots[name]
        self._leave(name, slot)
        self._count(slot, -sum(slot.free))
        del self.slots[name]
        for label in GANG_LABELS:
            if slot.labels.get(label):
                self.label_members[(label, slot.labels[label])].remove(name)
        self.cpu_cache = {k: v for k, v in self.cpu_cache.items() if k[0] != name}

    def signature(self, name: str) -> Signature:
        slot = self.slots[name]
        return slot.hw, tuple(slot.free), slot.cpu_free

    def _enter(self, name: str, slot: NodeSlot) -> None:
        sig = (slot.hw, tuple(slot.free), slot.cpu_free)
        bucket = self.buckets.get(sig)
        if bucket is None:
            bucket = self.buckets[sig] = {}
            self.log.append(sig)
        bucket[name] = None

    def _leave(self, name: str, slot: NodeSlot) -> None:
        sig = (slot.hw, tuple(slot.free), slot.cpu_free)
        bucket = self.buckets[sig]
        del bucket[name]
        if not bucket:
            del self.buckets[sig]

    def bind(self, task: TaskPlacement, cpu_milli: int = 0, memory_bytes: int = 0) -> None:
        """Take `task`'s GPU shares, CPU and memory on its node. Raises ValueError (and
        changes nothing) if any of them is not free: the view never oversubscribes."""
        self._apply(task, cpu_milli, memory_bytes, -1)

    def release(self, task: TaskPlacement, cpu_milli: int = 0, memory_bytes: int = 0) -> None:
        """Give back what `bind` took."""
        self._apply(task, cpu_milli, memory_bytes, +1)

    def _apply(self, task: TaskPlacement, cpu: int, mem: int, sign: int) -> None:
        slot = self.slots[task.node]
        hw = self.classes[slot.hw]
        positions = {g.index: p for p, g in enumerate(hw.gpus)}
        new = list(slot.free)
        for share in task.gpus:
            p = positions[share.gpu.index]
            new[p] += sign * share.milli
            if not 0 <= new[p] <= MILLI:
                raise ValueError(f"{task.node} GPU {share.gpu.index}: share out of range")
        cpu_free, mem_free = slot.cpu_free + sign * cpu, slot.memory_free + sign * mem
        if cpu_free < 0 or mem_free < 0:
            raise ValueError(f"{task.node}: CPU or memory oversubscribed")
        self._leave(task.node, slot)
        self._count(slot, sum(new) - sum(slot.free))
        slot.free, slot.cpu_free, slot.memory_free = new, cpu_free, mem_free
        self._enter(task.node, slot)

    def _count(self, slot: NodeSlot, delta: int) -> None:
        for label in GANG_LABELS:
            value = slot.labels.get(label)
            if value:
                key = (label, value)
                self.label_free[key] = self.label_free.get(key, 0) + delta

    def check_invariants(self) -> None:
        """Every node in exactly the bucket of its signature; shares within 0..1000; CPU and
        memory never below zero or above the node's."""
        seen = 0
        for sig, bucket in self.buckets.items():
            assert bucket, "empty bucket kept"
            for name in bucket:
                assert self.signature(name) == sig
                seen += 1
        assert seen == len(self.slots)
        sums: dict[tuple[str, str], int] = {}
        for slot in self.slots.values():
            for label in GANG_LABELS:
                if slot.labels.get(label):
                    key = (label, slot.labels[label])
                    sums[key] = sums.get(key, 0) + sum(slot.free)
        assert sums == {k: v for k, v in self.label_free.items() if k in sums}
        assert all(v == 0 for k, v in self.label_free.items() if k not in sums)
        for slot in self.slots.values():
            assert all(0 <= f <= MILLI for f in slot.free)
            assert 0 <= slot.cpu_free <= slot.cpu_cap
            assert 0 <= slot.memory_free <= slot.memory_cap
