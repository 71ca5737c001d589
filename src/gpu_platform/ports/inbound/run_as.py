"""RunAsAdmin: admins list, set and delete run-as grants (which accounts a tenant's jobs may
run as). Errors: Forbidden (not an admin), InvalidRequest naming `accounts` or `tenant`,
NotFound (deleting a grant that does not exist). Thread-safe."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from gpu_platform.domain.model.run_as import RunAsGrant
from gpu_platform.domain.model.tenancy import Principal

__all__ = ["RunAsAdmin"]


class RunAsAdmin(Protocol):
    def grants(self, actor: Principal) -> list[RunAsGrant]: ...

    def grant(
        self, actor: Principal, tenant: str, accounts: Iterable[str], allow_root: bool = False
    ) -> RunAsGrant: ...

    def revoke(self, actor: Principal, tenant: str) -> None: ...
