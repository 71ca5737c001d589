"""RunAsStore: the admin-set run-as grants (which accounts each tenant's jobs may run as)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpu_platform.domain.model.run_as import RunAsGrant

__all__ = ["RunAsStore"]


@runtime_checkable
class RunAsStore(Protocol):
    """`save_grant(tenant, None)` removes the tenant's grant; `load_grants` returns every
    stored one by tenant. Durable once `save_grant` returns. Thread-safe."""

    def load_grants(self) -> dict[str, RunAsGrant]: ...

    def save_grant(self, tenant: str, grant: RunAsGrant | None) -> None: ...
