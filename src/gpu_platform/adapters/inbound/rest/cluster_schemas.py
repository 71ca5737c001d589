"""Wire models of the cluster: GPUs, status, usage, nodes and Raft servers as read models, and
operators' bodies (drain/offline/online, quotas, membership changes, fault injection) and
the audit records they leave.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from gpu_platform.adapters.inbound.job_fields import gpu_values, status_values
from gpu_platform.adapters.inbound.rest.job_schemas import NonEmpty
from gpu_platform.adapters.inbound.rest.sharing_schemas import ShareOut
from gpu_platform.domain.model.audit import AuditRecord
from gpu_platform.domain.scheduling.model import Quota
from gpu_platform.ports.inbound.admin_service import ClusterInfo, NodeInfo
from gpu_platform.ports.inbound.job_service import ClusterStatus, GpuInfo
from gpu_platform.ports.inbound.usage import UsageReport

__all__ = [
    "AddServerIn",
    "AdminActionIn",
    "AuditOut",
    "ClusterOut",
    "ClusterStatusOut",
    "GpuOut",
    "InjectIn",
    "InjectOut",
    "JobUsageOut",
    "NodeOut",
    "QuotaIn",
    "QuotaOut",
    "ServerOut",
    "ServingUsageOut",
    "TransferIn",
    "UsageOut",
]


class QuotaIn(BaseModel):
    """PUT /v1/quotas/{tenant} body: Kueue-style nominal quota, borrowing and lending."""

    model_config = ConfigDict(extra="forbid")

    gpus: int = Field(ge=0, le=1 << 20, description="guaranteed (nominal) GPUs")
    cohort: str | None = Field(
        None, min_length=1, max_length=64, description="tenants that lend idle quota"
    )
    borrowing_limit: int | None = Field(
        None, ge=0, description="GPUs it may borrow beyond `gpus` (none = no limit)"
    )
    lending_limit: int | None = Field(
        None, ge=0, description="GPUs of its idle quota others may borrow (none = all)"
    )
    gpu_memory_bytes: int | None = Field(None, ge=0, description="hard cap on GPU memory")
    cpu_milli: int | None = Field(None, ge=0, description="hard cap on CPU milli-cores")

    def to_quota(self) -> Quota:
        return Quota(**self.model_dump(include=set(QuotaIn.model_fields)))


class QuotaOut(QuotaIn):
    tenant: str

    @classmethod
    def of(cls, tenant: str, q: Quota) -> QuotaOut:
        return cls(tenant=tenant, **asdict(q))


class GpuOut(BaseModel):
    node: str
    index: int
    uuid: str
    vendor: str
    model: str
    memory_bytes: int
    numa_node: int
    pci_bus_id: str
    state: str
    job_id: str | None
    reason: str
    hot: bool
    shares: list[ShareOut] = Field(default_factory=list, description="jobs sharing this GPU")

    @classmethod
    def of(cls, info: GpuInfo) -> GpuOut:
        return cls.model_validate(gpu_values(info))


class ClusterStatusOut(BaseModel):
    inventory_source: str
    simulated: bool
    nodes: int
    gpus_total: int
    gpus_free: int
    jobs_by_state: dict[str, int]
    notes: list[str]
    gpus_shared: int = Field(0, description="GPUs shared by jobs (shares of one GPU)")
    shares: int = Field(0, description="shares on the shared GPUs, in all")

    @classmethod
    def of(cls, s: ClusterStatus) -> ClusterStatusOut:
        return cls.model_validate(status_values(s))


class JobUsageOut(BaseModel):
    job_id: str
    tenant: str
    gpus: int
    running_s: float
    gpu_hours: float


class ServingUsageOut(BaseModel):
    """Gateway requests and tokens of one tenant since the server started (not windowed)."""

    requests: int
    prompt_tokens: int
    completion_tokens: int


class UsageOut(BaseModel):
    since: float
    until: float
    gpu_hours: float
    gpu_hours_by_tenant: dict[str, float]
    jobs: list[JobUsageOut]
    serving_by_tenant: dict[str, ServingUsageOut] = {}

    @classmethod
    def of(cls, r: UsageReport) -> UsageOut:
        return cls(
            since=r.since,
            until=r.until,
            gpu_hours=r.gpu_hours,
            gpu_hours_by_tenant=r.gpu_hours_by_tenant,
            jobs=[
                JobUsageOut(
                    job_id=j.job_id,
                    tenant=j.tenant,
                    gpus=j.gpus,
                    running_s=j.running_s,
                    gpu_hours=j.gpu_seconds / 3600,
                )
                for j in r.jobs
            ],
            serving_by_tenant={
                name: ServingUsageOut(
                    requests=u.requests,
                    prompt_tokens=u.prompt_tokens,
                    completion_tokens=u.completion_tokens,
                )
                for name, u in r.serving_by_tenant.items()
            },
        )


class AdminActionIn(BaseModel):
    """POST /v1/gpus/{node}/{index}/{action} and /v1/nodes/{node}/{action} body."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field("", max_length=512, description="why; recorded in the audit log")
    force: StrictBool = Field(False, description="offline only: stop and re-queue running jobs")


class NodeOut(BaseModel):
    name: str
    state: str
    reason: str
    gpus: int
    jobs: int

    @classmethod
    def of(cls, n: NodeInfo) -> NodeOut:
        return cls(name=n.name, state=str(n.state), reason=n.reason, gpus=n.gpus, jobs=n.jobs)


class ServerOut(BaseModel):
    id: int
    voter: bool
    http_url: str
    grpc_address: str
    agent_address: str


class ClusterOut(BaseModel):
    """GET /v1/cluster: the control plane as the answering server sees it."""

    mode: str
    server_id: int
    role: str
    term: int
    leader_id: int | None
    commit: int
    applied: int
    servers: list[ServerOut]
    agents: dict[str, float]

    @classmethod
    def of(cls, c: ClusterInfo) -> ClusterOut:
        return cls(
            mode=c.mode,
            server_id=c.server_id,
            role=c.role,
            term=c.term,
            leader_id=c.leader_id,
            commit=c.commit,
            applied=c.applied,
            servers=[
                ServerOut(**{k: getattr(s, k) for k in ServerOut.model_fields}) for s in c.servers
            ],
            agents=dict(c.agents),
        )


class AddServerIn(BaseModel):
    """POST /v1/cluster/servers body: a new voter's Raft id and address."""

    model_config = ConfigDict(extra="forbid")
    id: int = Field(ge=1)
    address: str = Field(min_length=3, max_length=255, pattern=r"^[^\s:]+:[0-9]{1,5}$")


class TransferIn(BaseModel):
    """POST /v1/cluster/leader body: the server to hand the lead to."""

    model_config = ConfigDict(extra="forbid")
    id: int = Field(ge=1)


class InjectIn(BaseModel):
    """POST /v1/debug/inject body: a fault script (docs/faults.md)."""

    model_config = ConfigDict(extra="forbid")

    script: NonEmpty = Field(max_length=8192)


class InjectOut(BaseModel):
    scheduled: list[str]


class AuditOut(BaseModel):
    at: float
    actor: str
    action: str
    target: str
    reason: str
    outcome: str

    @classmethod
    def of(cls, a: AuditRecord) -> AuditOut:
        return cls(**dataclasses.asdict(a))  # the same six fields
