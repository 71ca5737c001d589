"""Wire models: validation at the edge (422 names the field), conversion to/from the domain.

One module per resource: `job_schemas` (jobs and arrays), `cluster_schemas` (GPUs, status,
usage, nodes, servers, operators' actions, audit), `access_schemas` (caller, tenants, tokens),
`sharing_schemas` (GPU shares). This module re-exports them, and the problem types CONFLICT
and NOT_FOUND, under their old import path.
"""

from __future__ import annotations

from gpu_platform.adapters.inbound.rest.access_schemas import (
    PrincipalOut,
    TenantIn,
    TenantName,
    TenantOut,
    TokenIn,
    TokenIssuedOut,
    TokenOut,
)
from gpu_platform.adapters.inbound.rest.cluster_schemas import (
    AddServerIn,
    AdminActionIn,
    AuditOut,
    ClusterOut,
    ClusterStatusOut,
    GpuOut,
    InjectIn,
    InjectOut,
    JobUsageOut,
    NodeOut,
    QuotaIn,
    QuotaOut,
    ServerOut,
    ServingUsageOut,
    TransferIn,
    UsageOut,
)
from gpu_platform.adapters.inbound.rest.job_schemas import (
    AllocationOut,
    ArrayOut,
    ArraySubmit,
    ArrayTaskOut,
    HistoryOut,
    JobOut,
    JobSubmit,
    NonEmpty,
    PendingOut,
    TaskSlotOut,
)
from gpu_platform.adapters.inbound.rest.problems import CONFLICT, NOT_FOUND

__all__ = [
    "CONFLICT",
    "NOT_FOUND",
    "AddServerIn",
    "AdminActionIn",
    "AllocationOut",
    "ArrayOut",
    "ArraySubmit",
    "ArrayTaskOut",
    "AuditOut",
    "ClusterOut",
    "ClusterStatusOut",
    "GpuOut",
    "HistoryOut",
    "InjectIn",
    "InjectOut",
    "JobOut",
    "JobSubmit",
    "JobUsageOut",
    "NodeOut",
    "NonEmpty",
    "PendingOut",
    "PrincipalOut",
    "QuotaIn",
    "QuotaOut",
    "ServerOut",
    "ServingUsageOut",
    "TaskSlotOut",
    "TenantIn",
    "TenantName",
    "TenantOut",
    "TokenIn",
    "TokenIssuedOut",
    "TokenOut",
    "TransferIn",
    "UsageOut",
]
