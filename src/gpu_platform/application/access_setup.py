"""`ReplicatedAccessSetup`: the bootstrap admin token and the import of pre-replication tokens,
on a server of a replicated cluster with authentication on (issue 20).

Theory of operation: every server runs `step()` now and then until it reports `done`. Only the
leader writes: it first imports this server's old `state.db` tenants and tokens (digests, as
they were, revoked ones included; tokens already replicated are skipped), then proposes
`BootstrapAdmin`, which the state machine applies only while no live admin token exists, so a
cluster gets exactly one bootstrap token however many servers start together. The server
whose bootstrap applied gets the secret (`Step.issued`) to show once. A follower is done once
the cluster has a live admin token and it has no old tokens left to import; a follower that has
some imports them when it next leads (`Step.waiting` says how many wait).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_platform.application.access_replica import ReplicatedAccessStore
from gpu_platform.application.auth import AccessControl
from gpu_platform.application.consistency import LeaderElsewhere
from gpu_platform.domain.model.tenancy import Role
from gpu_platform.ports.inbound.access import IssuedToken
from gpu_platform.ports.outbound.access_store import AccessStore

__all__ = ["ReplicatedAccessSetup", "Step"]


@dataclass(frozen=True, slots=True)
class Step:
    """What one `step` did: `imported` old tokens, the bootstrap token `issued` here (its
    secret to show once), `waiting` old tokens not yet imported; `done` ends the steps."""

    done: bool
    issued: IssuedToken | None = None
    imported: int = 0
    waiting: int = 0


class ReplicatedAccessSetup:
    def __init__(
        self, access: AccessControl, store: ReplicatedAccessStore, legacy: AccessStore
    ) -> None:
        self._access = access
        self._store = store
        self._legacy = legacy
        self._imported = False

    def _waiting(self) -> int:
        if self._imported:
            return 0
        have = {t.token_id for t in self._store.tokens()}
        return sum(1 for t in self._legacy.tokens() if t.token_id not in have)

    def step(self) -> Step:
        """One attempt (module docstring); never raises LeaderElsewhere."""
        if not self._store.leading:
            waiting = self._waiting()
            live = any(t.role is Role.ADMIN and t.revoked_at is None for t in self._store.tokens())
            return Step(done=live and waiting == 0, waiting=waiting)
        try:
            imported = 0 if self._imported else self._store.import_legacy(self._legacy)
            self._imported = True
            issued = self._access.bootstrap()
        except LeaderElsewhere:
            return Step(done=False, waiting=self._waiting())
        return Step(done=True, issued=issued, imported=imported)
