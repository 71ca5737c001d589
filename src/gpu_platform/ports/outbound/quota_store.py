"""QuotaStore: per-tenant quotas that outlive a restart (set by operators at run time)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpu_platform.domain.scheduling.model import Quota

__all__ = ["QuotaStore"]


@runtime_checkable
class QuotaStore(Protocol):
    """`save_quota(tenant, None)` removes the tenant's quota; `load_quotas` returns every
    stored one. Durable once `save_quota` returns. Thread-safe."""

    def load_quotas(self) -> dict[str, Quota]: ...

    def save_quota(self, tenant: str, quota: Quota | None) -> None: ...
