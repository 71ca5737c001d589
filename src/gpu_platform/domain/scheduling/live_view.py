"""One placement view kept in step with the cluster state, instead of one built per cycle.

Theory of operation: the leader's scheduling cycle needs a `ClusterView` of the GPUs where new
work may land (READY nodes whose agent can launch, free, AVAILABLE and cool GPUs). Building it
from scratch costs O(GPUs) per cycle and throws away the engine's caches (orderings per request
shape, GPU sets per free-share signature). `LiveView.sync` instead asks the state which nodes
changed since the last sync (`ClusterState.changed_nodes_since`) and re-indexes only those:

* a node whose `Node` value is unchanged has only had GPUs taken or given back: the view binds
  or releases the difference (O(GPUs of the node));
* a node whose value changed (its state, a GPU's state, a re-registration) is removed and
  added again; its hardware class (GPU-pair scores from the topology matrix) comes from a cache
  keyed by the node's hardware signature (topology and GPU models, names and uuids aside), so a
  cluster of a few hardware types computes a few classes, not one per node;
* a node that left the usable set (not READY, agent gone) is removed.

A state object other than the one last synced (a snapshot installed, a new replica) is
re-indexed whole. `sync` returns the view; `decide` leaves its free capacity as it was, so the
view is only ever changed here. Its contents always equal `rebuild(state, usable)` (the oracle
the property tests compare against), up to the order among interchangeable nodes and the
best-fit normalisers (largest GPU and CPU count seen), which only grow: a large node that
left the view still counts until the state object changes.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from gpu_platform.domain.cluster_state import ClusterState
from gpu_platform.domain.errors import NotFound
from gpu_platform.domain.model.node import Node, NodeState
from gpu_platform.domain.model.topology import HostTopology
from gpu_platform.domain.placement.fragmentation import TypicalTasks
from gpu_platform.domain.placement.node_choice import HardwareClass
from gpu_platform.domain.placement.request import MILLI, GpuShare, Score, TaskPlacement
from gpu_platform.domain.placement.view import DEFAULT_TYPICAL, ClusterView
from gpu_platform.domain.topology.matrix import TopologyMatrix, build_matrix

__all__ = ["HardwareCache", "LiveView", "rebuild", "view_contents"]

_NO_SCORE = Score(0, 0, 0, 0.0, 0, False)


def _topology_signature(topo: HostTopology) -> HostTopology:
    """`topo` with what differs between identical hosts blanked (names, uuids, notes)."""
    gpus = tuple(replace(g, uuid="") for g in topo.gpus)
    return replace(topo, node="", source="", notes=(), gpus=gpus)


class HardwareCache:
    """Topology matrices and hardware classes by hardware signature (pure memoisation)."""

    def __init__(self) -> None:
        self._matrices: dict[HostTopology, TopologyMatrix] = {}
        self._rdma: dict[HostTopology, TopologyMatrix] = {}
        self._classes: dict[tuple[object, ...], HardwareClass] = {}

    def matrix(self, node: Node) -> TopologyMatrix | None:
        if node.topology is None:
            return None
        sig = _topology_signature(node.topology)
        matrix = self._matrices.get(sig)
        if matrix is None:
            matrix = self._matrices[sig] = build_matrix(node.topology)
        return matrix

    def rdma_matrix(self, topo: HostTopology) -> TopologyMatrix:
        """The matrix of `topo` with its RDMA NICs as the only NIC columns (NCCL's choice)."""
        sig = _topology_signature(topo)
        matrix = self._rdma.get(sig)
        if matrix is None:
            rdma = [n.name for n in topo.nics if n.kind == "rdma"]
            matrix = self._rdma[sig] = build_matrix(topo, rdma)
        return matrix

    def hardware(self, node: Node) -> HardwareClass:
        gpus = tuple(
            (g.index, g.model, g.vendor, g.memory_bytes, g.numa_node, g.schedulable)
            for g in node.gpus
        )
        topo = _topology_signature(node.topology) if node.topology is not None else None
        key = (gpus, topo)
        hw = self._classes.get(key)
        if hw is None:
            hw = self._classes[key] = HardwareClass.of(node.gpus, self.matrix(node))
        return hw


def _usable(state: ClusterState, name: str, usable: Collection[str] | None) -> Node | None:
    """The node if new work may land on it now, else None."""
    try:
        node = state.node(name)
    except NotFound:  # the node is gone
        return None
    if node.state is not NodeState.READY or (usable is not None and name not in usable):
        return None
    return node


def rebuild(
    state: ClusterState,
    usable: Collection[str] | None = None,
    typical: TypicalTasks = DEFAULT_TYPICAL,
) -> ClusterView:
    """The view built from scratch (what each cycle used to do; the oracle of `LiveView`)."""
    view = ClusterView((), typical)
    for node in state.nodes:
        if _usable(state, node.name, usable) is not None:
            _add(view, node, _free_of(state, node.name))
    return view


# free milli-GPU per GPU index (GPUs with nothing free left out), CPU milli-cores asked for
_Free = tuple[tuple[tuple[int, int], ...], int]


def _free_of(state: ClusterState, name: str) -> _Free:
    return tuple(sorted(state.free_shares(name).items())), state.cpu_used(name)


def _add(
    view: ClusterView,
    node: Node,
    free: _Free,
    matrix: TopologyMatrix | None = None,
    hw: HardwareClass | None = None,
) -> None:
    """Index `node` with its free GPUs, then take what shares and CPU requests use."""
    shares, cpu = free
    indices = frozenset(i for i, _ in shares)
    view.add_node(node, free_indices=indices, matrix=matrix, hardware=hw)
    used = tuple(GpuShare(node.gpu(i), MILLI - m) for i, m in shares if m < MILLI)
    if used or cpu:
        view.bind(TaskPlacement(node.name, used, (), (), _NO_SCORE), cpu_milli=cpu)


def view_contents(view: ClusterView) -> dict[str, tuple[object, ...]]:
    """What placement sees of each node: its hardware class (key and which of its GPUs are
    schedulable), free shares, CPU and memory (class ids and bucket order aside). Two views
    place alike when these are equal."""
    return {
        name: (
            view.classes[slot.hw].key(),
            tuple(g.schedulable for g in view.classes[slot.hw].gpus),
            tuple(slot.free),
            slot.cpu_free,
            slot.memory_free,
            tuple(sorted(slot.labels.items())),
        )
        for name, slot in view.slots.items()
    }


class LiveView:
    """A `ClusterView` kept in step with a `ClusterState` (see the module docstring)."""

    def __init__(self, typical: TypicalTasks = DEFAULT_TYPICAL) -> None:
        self.typical = typical
        self.hardware = HardwareCache()
        self.view = ClusterView((), typical)
        self._state: ClusterState | None = None
        self._stamp = 0
        self._usable: frozenset[str] | None = None
        self._indexed: dict[str, tuple[Node, _Free]] = {}  # as last put in the view

    def sync(self, state: ClusterState, usable: Collection[str] | None = None) -> ClusterView:
        """Bring the view up to `state`, counting only nodes in `usable` (None: all); O(nodes
        changed since the last sync, plus nodes entering or leaving `usable`)."""
        now_usable = frozenset(usable) if usable is not None else None
        if state is not self._state:
            self.view = ClusterView((), self.typical)
            self._indexed.clear()
            dirty: set[str] = {n.name for n in state.nodes}
        else:
            dirty = set(state.changed_nodes_since(self._stamp))
            if now_usable != self._usable:
                everyone = {n.name for n in state.nodes}
                before = self._usable if self._usable is not None else everyone
                after = now_usable if now_usable is not None else everyone
                dirty |= before ^ after
        self._state, self._stamp, self._usable = state, state.change_stamp, now_usable
        for name in dirty:
            self._refresh(state, name, now_usable)
        return self.view

    def _refresh(self, state: ClusterState, name: str, usable: frozenset[str] | None) -> None:
        node = _usable(state, name, usable)
        current = self._indexed.get(name)
        if node is None:
            if current is not None:
                self.view.remove_node(name)
                del self._indexed[name]
            return
        free = _free_of(state, name)
        if current is not None and current[0] is node:
            if current[1] != free:
                self._adjust(node, current[1], free)
        else:
            if current is not None:
                self.view.remove_node(name)
            matrix = self.hardware.matrix(node)
            hw = self.hardware.hardware(node)
            _add(self.view, node, free, matrix, hw)
        self._indexed[name] = (node, free)

    def _adjust(self, node: Node, before: _Free, after: _Free) -> None:
        """Bind what was taken and release what was given back since `before` (O(GPUs))."""
        was, now = dict(before[0]), dict(after[0])
        deltas = {i: was.get(i, 0) - now.get(i, 0) for i in was.keys() | now.keys()}
        cpu = after[1] - before[1]
        taken = tuple(GpuShare(node.gpu(i), d) for i, d in sorted(deltas.items()) if d > 0)
        if taken or cpu > 0:
            task = TaskPlacement(node.name, taken, (), (), _NO_SCORE)
            self.view.bind(task, cpu_milli=max(cpu, 0))
        given = tuple(GpuShare(node.gpu(i), -d) for i, d in sorted(deltas.items()) if d < 0)
        if given or cpu < 0:
            task = TaskPlacement(node.name, given, (), (), _NO_SCORE)
            self.view.release(task, cpu_milli=max(-cpu, 0))
