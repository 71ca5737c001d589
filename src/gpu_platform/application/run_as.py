"""Run-as grants: the admin-set mapping of tenants to the accounts their jobs may run as.

`RunAsAccounts` keeps the grants (a RunAsStore: the replicated access state on a cluster,
`application.run_as_replica`; the server's state.db in embedded mode), lets admins list, set
and delete them (each change recorded in the audit chain), and checks a job's `user` at
submit (`check`, which AdmissionControl calls for every submit and array).
Rules: `domain.model.run_as`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from gpu_platform.application.auth_scope import AuditTrail
from gpu_platform.domain.errors import NotFound
from gpu_platform.domain.model.job import JobSpec
from gpu_platform.domain.model.run_as import RunAsGrant, check_cwd, check_run_as, make_grant
from gpu_platform.domain.model.tenancy import Permission, Principal, check_tenant_name
from gpu_platform.ports.outbound.run_as_store import RunAsStore

__all__ = ["RunAsAccounts"]


class RunAsAccounts:
    """Thread-safe. The grants are cached when this server is their only writer (SQLite); a
    `shared` store (replicated: other servers write it too) is read on every use."""

    def __init__(
        self,
        store: RunAsStore,
        trail: AuditTrail | None = None,
        protected: Sequence[str] = (),
        *,
        shared: bool = False,
    ) -> None:
        """`protected`: absolute directories no job may use as its `cwd` (the data dir)."""
        self._store = store
        self._protected = tuple(protected)
        self._trail = trail or AuditTrail()
        self._lock = threading.Lock()
        self._shared = shared
        self._cached = dict(store.load_grants())

    @property
    def _grants(self) -> dict[str, RunAsGrant]:
        return self._store.load_grants() if self._shared else self._cached

    @_grants.setter
    def _grants(self, grants: dict[str, RunAsGrant]) -> None:
        self._cached = grants

    def check(self, spec: JobSpec) -> None:
        """InvalidRequest naming `user` unless `spec.tenant` may run jobs as `spec.user`, or
        naming `cwd` unless it is an absolute path outside the protected directories."""
        with self._lock:
            grants = self._grants
        check_run_as(spec.user, spec.tenant, grants)
        check_cwd(spec.cwd, self._protected)

    def grants(self, actor: Principal) -> list[RunAsGrant]:
        """Every grant, by tenant (admins only)."""
        actor.require(Permission.ACCESS_ADMIN)
        with self._lock:
            return [self._grants[t] for t in sorted(self._grants)]

    def grant(
        self, actor: Principal, tenant: str, accounts: Iterable[str], allow_root: bool = False
    ) -> RunAsGrant:
        """Replace `tenant`'s grant (admins only); InvalidRequest naming `accounts`."""
        accounts = list(accounts)

        def grant() -> RunAsGrant:
            actor.require(Permission.ACCESS_ADMIN)
            made = make_grant(check_tenant_name(tenant), accounts, allow_root)
            with self._lock:
                self._store.save_grant(tenant, made)
                self._grants = {**self._grants, tenant: made}
            return made

        return self._trail.around(actor, "run_as.set", f"tenant {tenant}", grant)

    def revoke(self, actor: Principal, tenant: str) -> None:
        """Remove `tenant`'s grant (admins only): its jobs may then name no account."""

        def revoke() -> None:
            actor.require(Permission.ACCESS_ADMIN)
            with self._lock:
                if tenant not in self._grants:
                    raise NotFound("run-as grant", tenant)
                self._store.save_grant(tenant, None)
                self._grants = {t: g for t, g in self._grants.items() if t != tenant}

        self._trail.around(actor, "run_as.delete", f"tenant {tenant}", revoke)
