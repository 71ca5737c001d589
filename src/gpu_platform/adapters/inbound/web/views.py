"""View models of the dashboard: what each page and fragment shows, built from the read models
the JobService and AdminService ports return. Pure functions; no I/O, no framework types.

GPU tiles are grouped by node in index order; counts cover every state (zeros included) so
the legend is stable. The queue is in scheduling order: priority (higher first), then
submission order (`seq`), as the scheduler takes it; pending, running and finished jobs follow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpu_platform.domain.model.gpu import GpuState
from gpu_platform.domain.model.job import Job, JobState
from gpu_platform.domain.model.telemetry import GpuReading
from gpu_platform.domain.scheduling.model import PendingReason, Quota
from gpu_platform.domain.topology.matrix import TopologyMatrix
from gpu_platform.ports.inbound.admin_service import NodeInfo
from gpu_platform.ports.inbound.job_service import GpuInfo

__all__ = [
    "STATE_ORDER",
    "GpuTile",
    "JobRow",
    "NodeGrid",
    "TenantRow",
    "TopologyTable",
    "gpu_counts",
    "node_grids",
    "queue_rows",
    "tenant_rows",
    "topology_table",
]

STATE_ORDER: tuple[GpuState, ...] = (
    GpuState.AVAILABLE,
    GpuState.ALLOCATED,
    GpuState.IN_USE,
    GpuState.DRAINING,
    GpuState.DEGRADED,
    GpuState.RESETTING,
    GpuState.OFFLINE,
)
GIB = 1 << 30
ACTIVE = (JobState.SCHEDULED, JobState.RUNNING, JobState.PREEMPTED)


@dataclass(frozen=True, slots=True)
class GpuTile:
    """One GPU as the grid shows it. `temperature_c`/`utilization_pct`: None when unknown."""

    node: str
    index: int
    model: str
    memory_gib: float
    state: str
    job_id: str | None
    tenant: str | None
    reason: str
    hot: bool
    numa_node: int
    temperature_c: int | None = None
    utilization_pct: int | None = None

    @property
    def css(self) -> str:
        return "state-" + self.state.lower().replace("_", "-")

    @property
    def label(self) -> str:
        return self.state.replace("_", " ").lower()


@dataclass(frozen=True, slots=True)
class NodeGrid:
    name: str
    state: str
    reason: str
    tiles: tuple[GpuTile, ...]


def gpu_counts(gpus: Iterable[GpuInfo]) -> dict[str, int]:
    """GPUs per state, every state present (zero when none), in STATE_ORDER."""
    counts = {str(s): 0 for s in STATE_ORDER}
    for g in gpus:
        counts[str(g.state)] = counts.get(str(g.state), 0) + 1
    return counts


def node_grids(
    gpus: Sequence[GpuInfo],
    nodes: Sequence[NodeInfo],
    jobs: Mapping[str, Job],
    readings: Mapping[tuple[str, int], GpuReading] | None = None,
) -> list[NodeGrid]:
    """Nodes by name, each with its GPUs in index order. `jobs` maps the holders' ids to jobs
    (a holder missing from it, e.g. another tenant's job, shows without a tenant)."""
    readings = readings or {}
    by_node: dict[str, list[GpuTile]] = {}
    for info in sorted(gpus, key=lambda i: (i.gpu.node, i.gpu.index)):
        g = info.gpu
        holder = jobs.get(info.job_id) if info.job_id else None
        r = readings.get((g.node, g.index))
        by_node.setdefault(g.node, []).append(
            GpuTile(
                node=g.node,
                index=g.index,
                model=g.model,
                memory_gib=round(g.memory_bytes / GIB, 1),
                state=str(info.state),
                job_id=info.job_id,
                tenant=None if holder is None else holder.spec.tenant,
                reason=info.reason,
                hot=info.hot,
                numa_node=g.numa_node,
                temperature_c=None if r is None else r.temperature_c,
                utilization_pct=None if r is None else r.utilization_pct,
            )
        )
    known = {n.name: n for n in nodes}
    names = sorted(set(by_node) | set(known))
    return [
        NodeGrid(
            name=name,
            state=str(known[name].state) if name in known else "UNKNOWN",
            reason=known[name].reason if name in known else "",
            tiles=tuple(by_node.get(name, ())),
        )
        for name in names
    ]


@dataclass(frozen=True, slots=True)
class JobRow:
    id: str
    name: str
    tenant: str
    state: str
    gpus: int
    tasks: int
    priority: int
    placement: str
    why: str
    submitted_at: float


def _placement(job: Job) -> str:
    a = job.allocation
    if a is None:
        return ""
    first = f"{a.node}:{','.join(map(str, a.gpu_indices))}"
    rest = [f"{p.node}:{','.join(map(str, p.gpu_indices))}" for p in a.peers]
    return " ".join([first, *rest])


def queue_rows(
    jobs: Iterable[Job],
    why: Mapping[str, PendingReason | None],
    state: str | None = None,
    tenant: str | None = None,
    finished_limit: int = 50,
) -> list[JobRow]:
    """Queued jobs in scheduling order with their reason, then pending (not yet admitted),
    then scheduled, running and preempted jobs, then the `finished_limit` most recently
    finished; filtered by `state` and `tenant`."""
    chosen = [
        j
        for j in jobs
        if (state is None or str(j.state) == state) and (tenant is None or j.spec.tenant == tenant)
    ]
    queued = sorted(
        (j for j in chosen if j.state is JobState.QUEUED), key=lambda j: (-j.spec.priority, j.seq)
    )
    pending = sorted((j for j in chosen if j.state is JobState.PENDING), key=lambda j: j.seq)
    active = sorted((j for j in chosen if j.state in ACTIVE), key=lambda j: j.seq)
    done = sorted(
        (j for j in chosen if j.terminal), key=lambda j: (j.finished_at or 0.0, j.seq), reverse=True
    )[:finished_limit]
    rows = []
    for j in [*queued, *pending, *active, *done]:
        reason = why.get(j.id)
        rows.append(
            JobRow(
                id=j.id,
                name=j.spec.name,
                tenant=j.spec.tenant,
                state=str(j.state),
                gpus=j.spec.gpus,
                tasks=j.spec.tasks,
                priority=j.spec.priority,
                placement=_placement(j),
                why=reason.message if reason is not None else j.reason,
                submitted_at=j.submitted_at,
            )
        )
    return rows


@dataclass(frozen=True, slots=True)
class TenantRow:
    """A tenant's quota and use: `in_use` GPUs held now, `borrowed` of them on borrowed quota."""

    tenant: str
    quota: Quota | None
    in_use: int
    borrowed: int
    queued: int
    gpu_hours: float

    @property
    def quota_gpus(self) -> int | None:
        return None if self.quota is None else self.quota.gpus

    @property
    def over_quota(self) -> bool:
        return self.quota is not None and self.in_use > self.quota.gpus


def _held(job: Job) -> int:
    return job.spec.gpus * job.spec.tasks


def tenant_rows(
    quotas: Mapping[str, Quota], jobs: Iterable[Job], gpu_hours: Mapping[str, float]
) -> list[TenantRow]:
    """One row per tenant that has a quota, a job or recorded usage, by name."""
    in_use: dict[str, int] = {}
    borrowed: dict[str, int] = {}
    queued: dict[str, int] = {}
    for j in jobs:
        t = j.spec.tenant
        if j.holds_gpus:
            in_use[t] = in_use.get(t, 0) + _held(j)
            if j.borrowing:
                borrowed[t] = borrowed.get(t, 0) + _held(j)
        elif j.state is JobState.QUEUED:
            queued[t] = queued.get(t, 0) + 1
    names = sorted(set(quotas) | set(in_use) | set(queued) | set(gpu_hours))
    return [
        TenantRow(
            tenant=t,
            quota=quotas.get(t),
            in_use=in_use.get(t, 0),
            borrowed=borrowed.get(t, 0),
            queued=queued.get(t, 0),
            gpu_hours=gpu_hours.get(t, 0.0),
        )
        for t in names
    ]


@dataclass(frozen=True, slots=True)
class TopologyTable:
    """`nvidia-smi topo -m` as rows: a header, then one row per GPU (and NIC)."""

    node: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def topology_table(m: TopologyMatrix) -> TopologyTable:
    names = [f"GPU{i}" for i in m.gpus]
    nics = [f"NIC{k}" for k in range(len(m.nics))]
    header = (*names, *nics, "NUMA")
    rows: list[tuple[str, ...]] = []
    for a, name in enumerate(names):
        cells = ["X" if a == b else c.label for b, c in enumerate(m.gpu_gpu[a])]
        cells += [c.label for c in m.gpu_nic[a]] if m.nics else []
        rows.append((name, *cells, str(m.gpu_numa[a])))
    for k, nic in enumerate(nics):
        cells = [m.gpu_nic[a][k].label for a in range(len(names))]
        cells += ["X" if k == b else c.label for b, c in enumerate(m.nic_nic[k])]
        rows.append((nic, *cells, ""))
    return TopologyTable(node=m.node, header=header, rows=tuple(rows))
