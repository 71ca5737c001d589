"""`ReplicatedAccessStore`: the AccessStore port over the replicated cluster state (issue 20).

Reads (`token_by_digest`, `tokens`, `tenants`) look at this server's own replica under its
lock, without a read barrier: every server, leader or follower, checks tokens itself, and a
revocation reaches a server when it applies the log entry (a follower lags its leader by at
most its replication delay). Writes are access commands (`domain.access_state`) committed
through the log; on a server that does not lead, or when the leader changes before the
command commits (outcome unknown), they raise LeaderElsewhere like any other write, so a
REST client is sent to the leader. Only digests reach the log: the secret never leaves the
server that generated it.

`import_legacy` copies the tenants and tokens of a pre-replication store (the data dir's
`state.db`) into the replicated state; tokens already there (by id) are skipped, so it may run
again after a partial import.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Protocol

from gpu_platform.application.cluster_replica import Applied
from gpu_platform.application.consistency import LeaderElsewhere
from gpu_platform.application.raft_node import NotLeader
from gpu_platform.domain.access_state import (
    BootstrapAdmin,
    CreateTenant,
    IssueToken,
    RevokeToken,
    TokenEntry,
)
from gpu_platform.domain.cluster_state import ClusterState, Command
from gpu_platform.domain.errors import Conflict, DomainError, NotFound
from gpu_platform.ports.outbound.access_store import AccessStore, TokenRecord

__all__ = ["Replicated", "ReplicatedAccessStore"]


class Replicated(Protocol):
    """What the store needs of `RaftReplication` (or `testing.SoloReplication`)."""

    @property
    def lock(self) -> threading.RLock: ...

    @property
    def state(self) -> ClusterState: ...

    def submit(self, command: Command) -> Future[object]: ...

    def is_leader(self) -> bool: ...

    def leader_id(self) -> int | None: ...


def _record(t: TokenEntry) -> TokenRecord:
    return TokenRecord(t.token_id, t.digest, t.name, t.tenant, t.role, t.created_at, t.revoked_at)


class ReplicatedAccessStore:
    """Implements AccessStore; see the module docstring."""

    def __init__(self, replication: Replicated, *, commit_timeout_s: float = 10.0) -> None:
        self._replication = replication
        self._timeout = commit_timeout_s

    @property
    def leading(self) -> bool:
        return self._replication.is_leader()

    def _elsewhere(self) -> LeaderElsewhere:
        """Where the leader's APIs are, as this replica knows (announced servers)."""
        leader = self._replication.leader_id()
        with self._replication.lock:
            where = self._state().servers.get(leader) if leader else None
        return LeaderElsewhere(leader, *(where[:2] if where else ("", "")))

    def commit(self, command: Command) -> None:
        """Propose and wait for the apply; raises the domain's refusal or LeaderElsewhere."""
        try:
            applied = self._replication.submit(command).result(timeout=self._timeout)
        except (NotLeader, FutureTimeout):
            raise self._elsewhere() from None
        assert isinstance(applied, Applied)
        if applied.error is not None:
            raise applied.error

    def _state(self) -> ClusterState:
        return self._replication.state

    # -- AccessStore -------------------------------------------------------------------------

    def add_tenant(self, name: str, created_at: float) -> None:
        self.commit(CreateTenant(name, created_at))

    def tenants(self) -> list[tuple[str, float]]:
        with self._replication.lock:
            return [(t.name, t.created_at) for t in self._state().tenant_entries()]

    def add_token(self, record: TokenRecord) -> None:
        command = IssueToken(
            record.token_id,
            record.digest,
            record.name,
            record.tenant,
            record.role,
            record.created_at,
            record.revoked_at,
        )
        try:
            self.commit(command)
        except Conflict as exc:
            raise ValueError(str(exc)) from None

    def token_by_digest(self, digest: str) -> TokenRecord | None:
        with self._replication.lock:
            found = self._state().token_by_digest(digest)
        return None if found is None else _record(found)

    def tokens(self) -> list[TokenRecord]:
        with self._replication.lock:
            return [_record(t) for t in self._state().token_entries()]

    def revoke_token(self, token_id: str, at: float) -> bool:
        try:
            self.commit(RevokeToken(token_id, at))
        except NotFound:
            return False
        return True

    def add_first_admin(self, record: TokenRecord) -> bool:
        command = BootstrapAdmin(
            record.token_id, record.digest, record.name, record.tenant, record.created_at
        )
        try:
            self.commit(command)
        except Conflict:
            return False
        return True

    # -- migration ---------------------------------------------------------------------------

    def import_legacy(self, legacy: AccessStore) -> int:
        """Copy `legacy`'s tenants and tokens in; returns how many tokens were added. Raises
        LeaderElsewhere when this server does not lead (nothing or part copied)."""
        known = {t.token_id for t in self.tokens()}
        tenants = {name for name, _ in self.tenants()}
        for name, created_at in legacy.tenants():
            if name not in tenants:
                self.add_tenant(name, created_at)
        added = 0
        for record in legacy.tokens():
            if record.token_id in known:
                continue
            try:
                self.add_token(record)
            except (ValueError, DomainError):
                continue  # a digest already present, or a tenant the old store lost
            added += 1
        return added
