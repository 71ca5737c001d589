"""Wiring of the server's stores (its own tables in state.db, the hash-chained audit log)
and the services over them: access control and run-as accounts, replicated when Raft is on.
`_`-named factories are container.py's providers.
"""

from __future__ import annotations

from collections.abc import Iterator

import structlog

from gpu_platform.adapters.audit_seal import load_key as load_audit_key
from gpu_platform.adapters.outbound.storage import (
    JsonlAuditLog,
    SqliteAccessStore,
    SqliteHardwareStore,
    SqliteJobStore,
    SqliteQuotaStore,
    SqliteRunAsStore,
)
from gpu_platform.adapters.outbound.system import SystemClock
from gpu_platform.application.access_replica import ReplicatedAccessStore
from gpu_platform.application.auth import AccessControl
from gpu_platform.application.auth_scope import AuditTrail
from gpu_platform.application.replication import RaftReplication
from gpu_platform.application.run_as import RunAsAccounts
from gpu_platform.application.run_as_replica import ReplicatedRunAsStore
from gpu_platform.infrastructure.config import ConfigError, Settings
from gpu_platform.ports.outbound.access_store import AccessStore
from gpu_platform.ports.outbound.audit_log import AuditLog
from gpu_platform.ports.outbound.hardware_store import HardwareStore
from gpu_platform.ports.outbound.job_store import JobStore
from gpu_platform.ports.outbound.quota_store import QuotaStore
from gpu_platform.ports.outbound.run_as_store import RunAsStore

__all__: list[str] = []


def _sqlite_store(settings: Settings) -> Iterator[JobStore]:
    store = SqliteJobStore(settings.data_dir / "state.db")
    yield store
    store.close()


def _sqlite_hardware(settings: Settings) -> Iterator[HardwareStore]:
    store = SqliteHardwareStore(settings.data_dir / "state.db")  # beside the jobs, own tables
    yield store
    store.close()


def _sqlite_access(settings: Settings) -> Iterator[AccessStore]:
    store = SqliteAccessStore(settings.data_dir / "state.db")  # own tables
    yield store
    store.close()


def _sqlite_run_as(settings: Settings) -> Iterator[RunAsStore]:
    store = SqliteRunAsStore(settings.data_dir / "state.db")  # own table
    yield store
    store.close()


def _run_as(
    settings: Settings, store: RunAsStore, trail: AuditTrail, replication: RaftReplication | None
) -> RunAsAccounts:
    protected = (str(settings.data_dir.resolve()),)
    if replication is None:  # embedded: this server's state.db
        return RunAsAccounts(store, trail, protected)
    return RunAsAccounts(ReplicatedRunAsStore(replication), trail, protected, shared=True)


def _sqlite_quotas(settings: Settings) -> Iterator[QuotaStore]:
    store = SqliteQuotaStore(settings.data_dir / "state.db")  # own table
    yield store
    store.close()


def _audit_log(settings: Settings) -> Iterator[AuditLog]:
    path = settings.audit_file or settings.data_dir / "audit.jsonl"
    key, new_key = None, False
    if settings.audit_key_file is not None:  # seals the chain's head (audit_seal)
        new_key = not settings.audit_key_file.exists()
        try:
            key = load_audit_key(settings.audit_key_file, create=True)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"configuration: audit_key_file: {exc}") from None
        if settings.audit_key_file.resolve().is_relative_to(settings.data_dir.resolve()):
            structlog.get_logger(__name__).warning(
                "audit_key_file is inside the data directory: whoever can rewrite the log "
                "can read the key too",
                audit_key_file=str(settings.audit_key_file),
            )
    log = JsonlAuditLog(path, key, adopt=new_key)
    yield log
    log.close()


def _access_store(legacy: AccessStore, replication: RaftReplication | None) -> AccessStore:
    return legacy if replication is None else ReplicatedAccessStore(replication)


def _access(
    settings: Settings, store: AccessStore, clock: SystemClock, audit: AuditLog
) -> AccessControl:
    return AccessControl(
        store,
        clock,
        audit,
        enabled=settings.auth == "on",
        rate_per_s=settings.rate_limit_per_second,
        burst=settings.rate_limit_burst,
        failures_per_minute=settings.auth_failures_per_minute,
    )
