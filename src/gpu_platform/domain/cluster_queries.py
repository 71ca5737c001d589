"""The read-only queries of the cluster state (a mixin of `ClusterState`).

Nodes, jobs, quotas and servers by name; which jobs hold a GPU; the effective state of a GPU;
where new work may land now (`node_views`, `free_gpus`, `free_shares`); what is queued (FIFO,
by submission sequence) and which RESETTING GPUs may be reset. Nothing here changes the state.
Split from `cluster_state` only for size; it reads that module's tables and is not used on
its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_platform.domain.errors import NotFound
from gpu_platform.domain.gpu_shares import ShareBook
from gpu_platform.domain.hardware_facts import HardwareFacts
from gpu_platform.domain.model.gpu import Gpu, GpuState
from gpu_platform.domain.model.job import Job, JobState
from gpu_platform.domain.model.node import Node, NodeState
from gpu_platform.domain.placement.first_fit import NodeView
from gpu_platform.domain.scheduling.model import Quota

if TYPE_CHECKING:
    from gpu_platform.domain.cluster_tables import JobTable

__all__ = ["ClusterQueries"]


class ClusterQueries:
    """The query half of ClusterState; see the module docstring."""

    _nodes: dict[str, Node]
    _jobs: JobTable
    _held: dict[str, str]
    _shares: ShareBook
    _reasons: dict[str, str]
    _hot: dict[str, float]
    _resetting: dict[str, Gpu]
    _quotas: dict[str, Quota]
    _servers: dict[int, tuple[str, str, str]]
    _facts: HardwareFacts | None

    if TYPE_CHECKING:

        def _gpu(self, node_name: str, index: int) -> Gpu: ...

    @property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(self._nodes.values())

    @property
    def quotas(self) -> dict[str, Quota]:
        """Tenant quotas (a copy), by tenant name."""
        return dict(sorted(self._quotas.items()))

    @property
    def servers(self) -> dict[int, tuple[str, str, str]]:
        """Announced servers (a copy): server id -> (http_url, grpc_address, agent_address)."""
        return dict(sorted(self._servers.items()))

    def node(self, name: str) -> Node:
        try:
            return self._nodes[name]
        except KeyError:
            raise NotFound("node", name) from None

    def job(self, job_id: str) -> Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise NotFound("job", job_id) from None

    def jobs(self) -> tuple[Job, ...]:
        """All jobs in submission order."""
        return tuple(self._jobs.values())

    def open_jobs(self) -> list[Job]:
        """Jobs that have not ended, or ended but still hold GPUs (being stopped), in
        submission order; O(such jobs), however many ended jobs the state keeps."""
        jobs = self._jobs
        return [jobs[i] for i in jobs.open]

    def queued(self, now: float | None = None) -> list[Job]:
        """QUEUED jobs in FIFO order (submission sequence), leaving out those whose previous
        attempt is still being stopped and, given `now`, those still in restart backoff."""
        jobs = self._jobs
        ready = (
            j
            for j in (jobs[i] for i in jobs.open)
            if j.state is JobState.QUEUED
            and not j.releasing
            and (now is None or j.not_before <= now)
        )
        return sorted(ready, key=_seq)

    def holder(self, gpu: Gpu) -> str | None:
        """The id of the job holding `gpu`, if any (the first sharer of a shared GPU)."""
        return next(iter(self.holders(gpu.uuid)), None)

    def holders(self, uuid: str) -> tuple[str, ...]:
        """Ids of the jobs holding GPU `uuid`: its whole-GPU job, or every job sharing it."""
        whole = self._held.get(uuid)
        return (whole,) if whole is not None else self._shares.sharers(uuid)

    @property
    def share_book(self) -> ShareBook:
        """Shares per GPU and CPU per node (read only; `domain.gpu_shares`)."""
        return self._shares

    def _gpus_by_uuid(self) -> dict[str, Gpu]:
        return {g.uuid: g for n in self._nodes.values() for g in n.gpus}

    def gpu_state(self, gpu: Gpu) -> GpuState:
        """Effective state: the GPU's own state when it is not AVAILABLE (a fault or an operator
        took it out), else ALLOCATED/IN_USE while a job holds it, else AVAILABLE."""
        gpu = self._gpu(gpu.node, gpu.index)
        holders = self.holders(gpu.uuid)
        if not holders or gpu.state is not GpuState.AVAILABLE:
            return gpu.state
        jobs = [self._jobs[h] for h in holders]
        running = any(j.state is JobState.RUNNING and not j.releasing for j in jobs)
        return GpuState.IN_USE if running else GpuState.ALLOCATED

    def node_views(self) -> list[NodeView]:
        """The placement snapshot: READY nodes, each with the GPUs where new work may land
        now — free, AVAILABLE and not too hot."""
        return [
            NodeView(n.name, tuple(g for g in n.gpus if self._placeable(n, g)))
            for n in self._nodes.values()
            if n.state is NodeState.READY
        ]

    def free_gpus(self, name: str) -> frozenset[int]:
        """Indices of node `name`'s GPUs where new work may land now (as `node_views`)."""
        node = self.node(name)
        return frozenset(g.index for g in node.gpus if self._placeable(node, g))

    def free_shares(self, name: str) -> dict[int, int]:
        """Free milli-GPU per GPU index of node `name` where new work may land now: 1000 for
        a free GPU, what its shares leave for a shared one (GPUs with nothing free left out)."""
        node = self.node(name)
        out = {}
        for g in node.gpus:
            if self._placeable(node, g, shared_ok=True):
                free = self._shares.free_milli(g)
                if free > 0:
                    out[g.index] = free
        return out

    def cpu_used(self, name: str) -> int:
        """CPU milli-cores the jobs bound on node `name` asked for."""
        return self._shares.cpu.get(name, 0)

    def _placeable(self, node: Node, gpu: Gpu, shared_ok: bool = False) -> bool:
        return (
            node.state is NodeState.READY
            and gpu.schedulable
            and gpu.uuid not in self._hot
            and gpu.uuid not in self._held
            and (shared_ok or gpu.uuid not in self._shares.gpus)
        )

    def reason(self, name: str) -> str:
        """Why a GPU (by uuid) or node (by name) is in its current state ('' if never said)."""
        return self._reasons.get(name, "")

    def hot(self, gpu: Gpu) -> bool:
        """True while the thermal policy keeps new work off `gpu`."""
        return gpu.uuid in self._hot

    def resets_due(self) -> list[Gpu]:
        """RESETTING GPUs that no attempt holds any more: the controller may reset them now.
        O(RESETTING GPUs): the index is kept as GPUs change state."""
        return [g for g in self._resetting.values() if not self.holders(g.uuid)]

    def hardware_facts(self) -> HardwareFacts:
        """The hardware summary submits are checked against (`domain.hardware_facts`): built
        from the node table on first use after a node write, then kept."""
        facts = self._facts
        if facts is None:
            facts = self._facts = HardwareFacts.of(self._nodes.values())
        return facts

    def max_gpus_per_node(self) -> int:
        return self.hardware_facts().max_gpus_per_node


def _seq(job: Job) -> int:
    return job.seq
