"""Authentication, rate limiting and tenant/token management (implements AccessService).

Tokens are random URL-safe secrets; only their SHA-256 digest is stored (AccessStore), so a
stolen database does not yield usable tokens. Each token has a public id (`tok_…`) to list and
revoke it by. Every management action is appended to the audit chain. Rate limiting is one
token bucket per token (`rate_per_s`, `burst`); with authentication off there are no tokens and
no per-token limits. Unknown or revoked tokens are counted per source address
(`FailedAuthLimiter`, `failures_per_minute`): a source past the limit is answered
TooManyRequests. The last live admin token cannot be revoked (the store refuses it).

In a replicated cluster the store is `ReplicatedAccessStore`: every server checks tokens in its
own replica, and management calls commit through the Raft log (LeaderElsewhere elsewhere).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable

from gpu_platform.application.auth_failures import FailedAuthLimiter
from gpu_platform.domain.errors import InvalidRequest, NotFound
from gpu_platform.domain.model.ratelimit import TokenBucket
from gpu_platform.domain.model.tenancy import (
    ANONYMOUS_ADMIN,
    Forbidden,
    Permission,
    Principal,
    Role,
    TooManyRequests,
    Unauthenticated,
    check_tenant_name,
)
from gpu_platform.ports.inbound.access import IssuedToken, TenantInfo, TokenInfo
from gpu_platform.ports.outbound.access_store import AccessStore, TokenRecord
from gpu_platform.ports.outbound.audit_log import AuditLog
from gpu_platform.ports.outbound.clock import Clock

__all__ = ["AccessControl", "OpenAccess", "digest_of"]

BOOTSTRAP_NAME = "bootstrap-admin"


def digest_of(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _info(r: TokenRecord) -> TokenInfo:
    return TokenInfo(r.token_id, r.name, r.tenant, r.role, r.created_at, r.revoked_at)


class AccessControl:
    def __init__(
        self,
        store: AccessStore,
        clock: Clock,
        audit: AuditLog | None = None,
        *,
        enabled: bool = True,
        rate_per_s: float = 50.0,
        burst: float = 100.0,
        failures_per_minute: int = 20,
        new_secret: Callable[[], str] = lambda: secrets.token_urlsafe(32),
    ) -> None:
        self._store = store
        self._clock = clock
        self._audit = audit
        self._enabled = enabled
        self._rate, self._burst = rate_per_s, burst
        self._new_secret = new_secret
        self._buckets: dict[str, TokenBucket] = {}
        self._failures = FailedAuthLimiter(failures_per_minute, 60.0)
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._enabled

    # -- requests ----------------------------------------------------------------------------

    def authenticate(self, secret: str | None, source: str = "") -> Principal:
        """The principal of `secret`; `source` (the client's address) is what failed
        attempts are counted by."""
        if not self._enabled:
            return ANONYMOUS_ADMIN
        if not secret:
            raise Unauthenticated("a bearer token is required (Authorization: Bearer <token>)")
        now = self._clock.now()
        self._failures.check(source, now)
        record = self._store.token_by_digest(digest_of(secret))
        if record is None or record.revoked_at is not None:
            self._failures.failed(source, now)
            raise Unauthenticated("unknown or revoked token")
        return Principal(record.name, record.tenant, record.role, record.token_id)

    def admit(self, principal: Principal) -> None:
        if not principal.token_id or self._rate <= 0:
            return
        now = self._clock.now()
        with self._lock:
            bucket = self._buckets.get(principal.token_id)
            if bucket is None:
                bucket = self._buckets[principal.token_id] = TokenBucket.full(
                    self._rate, self._burst, now
                )
            wait = bucket.take(now)
        if wait > 0:
            raise TooManyRequests(
                f"rate limit of {self._rate:g}/s (burst {self._burst:g}) for token "
                f"{principal.token_id} exceeded",
                wait,
            )

    # -- management --------------------------------------------------------------------------

    def create_tenant(self, actor: Principal, name: str) -> TenantInfo:
        actor.require(Permission.ACCESS_ADMIN)
        check_tenant_name(name)
        now = self._clock.now()
        self._store.add_tenant(name, now)
        self._record(actor, "tenant.create", f"tenant {name}", "ok")
        return next(TenantInfo(n, t) for n, t in self._store.tenants() if n == name)

    def tenants(self, actor: Principal) -> list[TenantInfo]:
        actor.require(Permission.ACCESS_ADMIN)
        return [TenantInfo(n, t) for n, t in self._store.tenants()]

    def create_token(self, actor: Principal, name: str, tenant: str, role: Role) -> IssuedToken:
        actor.require(Permission.ACCESS_ADMIN)
        if not name or len(name) > 64:
            raise InvalidRequest("name", "1-64 characters")
        if tenant not in {n for n, _ in self._store.tenants()}:
            raise NotFound("tenant", tenant)
        issued = self._issue(name, tenant, Role(role))
        self._record(actor, "token.create", f"token {issued.info.token_id}", "ok", role=role)
        return issued

    def tokens(self, actor: Principal) -> list[TokenInfo]:
        actor.require(Permission.ACCESS_ADMIN)
        return [_info(r) for r in self._store.tokens()]

    def revoke_token(self, actor: Principal, token_id: str) -> TokenInfo:
        actor.require(Permission.ACCESS_ADMIN)
        if not self._store.revoke_token(token_id, self._clock.now()):
            raise NotFound("token", token_id)
        with self._lock:
            self._buckets.pop(token_id, None)
        self._record(actor, "token.revoke", f"token {token_id}", "ok")
        return next(_info(r) for r in self._store.tokens() if r.token_id == token_id)

    def bootstrap(self) -> IssuedToken | None:
        """On a server with authentication on and no live admin token: create tenant
        `default` and an admin token; the caller shows its secret once. Else None."""
        if not self._enabled:
            return None
        if any(r.role is Role.ADMIN and r.revoked_at is None for r in self._store.tokens()):
            return None
        secret = self._new_secret()
        record = self._record_of(secret, BOOTSTRAP_NAME, "default", Role.ADMIN)
        if not self._store.add_first_admin(record):
            return None  # another server bootstrapped first
        issued = IssuedToken(_info(record), secret)
        self._record(
            Principal("server", "default", Role.ADMIN),
            "token.create",
            f"token {issued.info.token_id}",
            "ok",
            role=Role.ADMIN,
        )
        return issued

    def _issue(self, name: str, tenant: str, role: Role) -> IssuedToken:
        secret = self._new_secret()
        record = self._record_of(secret, name, tenant, role)
        self._store.add_token(record)
        return IssuedToken(_info(record), secret)

    def _record_of(self, secret: str, name: str, tenant: str, role: Role) -> TokenRecord:
        return TokenRecord(
            token_id=f"tok_{digest_of(secret)[:12]}",
            digest=digest_of(secret),
            name=name,
            tenant=tenant,
            role=role,
            created_at=self._clock.now(),
        )

    def _record(
        self, actor: Principal, action: str, target: str, outcome: str, **extra: str
    ) -> None:
        if self._audit is None:
            return
        self._audit.append(
            {
                "at": self._clock.now(),
                "actor": actor.name,
                "tenant": actor.tenant,
                "role": str(actor.role),
                "action": action,
                "target": target,
                "outcome": outcome,
                **{k: str(v) for k, v in extra.items()},
            }
        )


class OpenAccess:
    """An AccessService with authentication off and nothing to manage (embedding, tests)."""

    enabled = False

    def authenticate(self, secret: str | None, source: str = "") -> Principal:
        return ANONYMOUS_ADMIN

    def admit(self, principal: Principal) -> None:
        return None

    def create_tenant(self, actor: Principal, name: str) -> TenantInfo:
        raise Forbidden("tenant management needs authentication (auth = on)")

    def tenants(self, actor: Principal) -> list[TenantInfo]:
        return []

    def create_token(self, actor: Principal, name: str, tenant: str, role: Role) -> IssuedToken:
        raise Forbidden("token management needs authentication (auth = on)")

    def tokens(self, actor: Principal) -> list[TokenInfo]:
        return []

    def revoke_token(self, actor: Principal, token_id: str) -> TokenInfo:
        raise Forbidden("token management needs authentication (auth = on)")
