"""Access commands of the cluster state machine: tenants, bearer tokens and revocations.

Theory of operation: authentication must give the same answer on every server, leader or
follower, and survive a failover, so tenants and tokens are replicated cluster state like jobs
and nodes (issue 20). A token is stored as the SHA-256 hex `digest` of its secret, never the
secret itself: the secret is generated on the proposing server, shown to its caller once, and
only the digest enters the log, the snapshots and every replica. Split from `cluster_state`
only for size (a mixin of `ClusterState`).

CreateTenant: a new valid name is added; an existing one is a no-op (idempotent, no event).
IssueToken: the tenant must exist (NotFound); a token id or digest already present is a
Conflict. `revoked_at` lets a migration import an already-revoked token as it was.
RevokeToken: an unknown id is NotFound; revoking twice keeps the first time (no event);
revoking the last live admin token is refused (InvalidRequest naming `token_id`): a cluster
must never lock every administrator out. Decided in the log's order, so two concurrent
revocations of the last two admin tokens cannot both succeed.
BootstrapAdmin: when no live admin token exists, creates tenant `tenant` if missing and issues
an admin token; otherwise a Conflict. Servers racing to bootstrap a fresh cluster therefore
end with exactly one bootstrap token, and only the server whose command applied shows it.

SetRunAsGrant: replaces `tenant`'s run-as grant (`domain.model.run_as`; InvalidRequest naming
`accounts` or `tenant` when invalid). DeleteRunAsGrant: removes it; removing none is a no-op.
Grants are admin-set and replicated like tokens, so every server checks a job's `user` alike.

A tenant is a record (`TenantEntry`) so that more per-tenant settings can join it later.
Invariants (`check_access_invariants`): the digest index equals the tokens' digests; every
token names an existing tenant.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpu_platform.domain.errors import Conflict, InvalidRequest, NotFound
from gpu_platform.domain.model.run_as import RunAsGrant, make_grant
from gpu_platform.domain.model.tenancy import Role, check_tenant_name

__all__ = [
    "AccessCommand",
    "AccessEvent",
    "AccessHandlers",
    "AccessParts",
    "BootstrapAdmin",
    "CreateTenant",
    "DeleteRunAsGrant",
    "IssueToken",
    "RevokeToken",
    "RunAsGrantDeleted",
    "RunAsGrantSet",
    "SetRunAsGrant",
    "TenantCreated",
    "TenantEntry",
    "TokenEntry",
    "TokenIssued",
    "TokenRevoked",
    "last_admin",
]


@dataclass(frozen=True, slots=True)
class TenantEntry:
    """A tenant; `created_at` in Unix seconds."""

    name: str
    created_at: float


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """A token as replicated: `token_id` is public; `digest` is the SHA-256 hex of the secret;
    times are Unix seconds."""

    token_id: str
    digest: str
    name: str
    tenant: str
    role: Role
    created_at: float
    revoked_at: float | None = None

    @property
    def live(self) -> bool:
        return self.revoked_at is None


@dataclass(frozen=True, slots=True)
class AccessParts:
    """The access half of a snapshot: tenants by name, tokens oldest first, run-as grants."""

    tenants: tuple[TenantEntry, ...] = ()
    tokens: tuple[TokenEntry, ...] = ()
    grants: tuple[RunAsGrant, ...] = ()


# -- commands ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateTenant:
    """Create tenant `name` at `now` (idempotent)."""

    name: str
    now: float


@dataclass(frozen=True, slots=True)
class IssueToken:
    """Add a token of `role` in `tenant`; only the secret's digest travels."""

    token_id: str
    digest: str
    name: str
    tenant: str
    role: Role
    now: float
    revoked_at: float | None = None


@dataclass(frozen=True, slots=True)
class RevokeToken:
    """Revoke token `token_id` at `now`."""

    token_id: str
    now: float


@dataclass(frozen=True, slots=True)
class BootstrapAdmin:
    """Issue the first admin token of a cluster (see the module docstring)."""

    token_id: str
    digest: str
    name: str
    tenant: str
    now: float


@dataclass(frozen=True, slots=True)
class SetRunAsGrant:
    """Replace `tenant`'s run-as grant by `accounts` (validated when applied)."""

    tenant: str
    accounts: tuple[str, ...]
    allow_root: bool = False


@dataclass(frozen=True, slots=True)
class DeleteRunAsGrant:
    """Remove `tenant`'s run-as grant (if any)."""

    tenant: str


AccessCommand = (
    CreateTenant | IssueToken | RevokeToken | BootstrapAdmin | SetRunAsGrant | DeleteRunAsGrant
)


# -- events -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TenantCreated:
    name: str


@dataclass(frozen=True, slots=True)
class TokenIssued:
    """Never carries the digest: events go to logs."""

    token_id: str
    tenant: str
    role: Role


@dataclass(frozen=True, slots=True)
class TokenRevoked:
    token_id: str


@dataclass(frozen=True, slots=True)
class RunAsGrantSet:
    tenant: str


@dataclass(frozen=True, slots=True)
class RunAsGrantDeleted:
    tenant: str


AccessEvent = TenantCreated | TokenIssued | TokenRevoked | RunAsGrantSet | RunAsGrantDeleted


def last_admin(token_id: str) -> InvalidRequest:
    """The refusal to revoke `token_id`, the last live admin token (every store says this)."""
    return InvalidRequest(
        "token_id",
        f"{token_id} is the last live admin token; create another admin token before revoking it",
    )


class AccessHandlers:
    """The access half of ClusterState; see the module docstring."""

    _tenants: dict[str, TenantEntry]
    _tokens: dict[str, TokenEntry]  # token id -> token, oldest first
    _by_digest: dict[str, str]  # digest -> token id
    _grants: dict[str, RunAsGrant]  # tenant -> its run-as grant

    def _init_access(self, parts: AccessParts = AccessParts()) -> None:
        self._tenants = {t.name: t for t in parts.tenants}
        self._tokens = {t.token_id: t for t in parts.tokens}
        self._by_digest = {t.digest: t.token_id for t in parts.tokens}
        if len(self._tokens) != len(parts.tokens) or len(self._by_digest) != len(parts.tokens):
            raise ValueError("access state holds a token id or digest twice")
        if any(t.tenant not in self._tenants for t in parts.tokens):
            raise ValueError("access state holds a token of an unknown tenant")
        self._grants = {g.tenant: g for g in parts.grants}
        if len(self._grants) != len(parts.grants):
            raise ValueError("access state holds a tenant's run-as grant twice")

    def access_parts(self) -> AccessParts:
        """A copy of the access state as plain values."""
        grants = tuple(self._grants[t] for t in sorted(self._grants))
        return AccessParts(tuple(self._tenants.values()), tuple(self._tokens.values()), grants)

    # -- queries ---------------------------------------------------------------------------

    def tenant_entries(self) -> list[TenantEntry]:
        """Every tenant, by name."""
        return sorted(self._tenants.values(), key=lambda t: t.name)

    def token_entries(self) -> list[TokenEntry]:
        """Every token, revoked ones included, oldest first."""
        return list(self._tokens.values())

    def token_by_digest(self, digest: str) -> TokenEntry | None:
        token_id = self._by_digest.get(digest)
        return None if token_id is None else self._tokens[token_id]

    def run_as_grants(self) -> dict[str, RunAsGrant]:
        """Every run-as grant, by tenant (a copy). The grants are replaced whole on a change,
        never changed in place, so a reader may call this without the state's lock."""
        return dict(self._grants)

    def _live_admins(self) -> list[str]:
        return [t.token_id for t in self._tokens.values() if t.live and t.role is Role.ADMIN]

    # -- commands --------------------------------------------------------------------------

    def _apply_access(self, cmd: AccessCommand) -> list[AccessEvent]:
        match cmd:
            case CreateTenant():
                return self._create_tenant(cmd.name, cmd.now)
            case IssueToken():
                entry = TokenEntry(
                    cmd.token_id,
                    cmd.digest,
                    cmd.name,
                    cmd.tenant,
                    Role(cmd.role),
                    cmd.now,
                    cmd.revoked_at,
                )
                return self._issue(entry)
            case RevokeToken():
                return self._revoke(cmd)
            case BootstrapAdmin():
                live = self._live_admins()
                if live:
                    raise Conflict(f"a live admin token ({live[0]}) exists: no bootstrap")
                events: list[AccessEvent] = self._create_tenant(cmd.tenant, cmd.now)
                admin = TokenEntry(
                    cmd.token_id, cmd.digest, cmd.name, cmd.tenant, Role.ADMIN, cmd.now
                )
                return events + self._issue(admin)
            case SetRunAsGrant():
                grant = make_grant(check_tenant_name(cmd.tenant), cmd.accounts, cmd.allow_root)
                self._grants = {**self._grants, cmd.tenant: grant}  # replaced, see run_as_grants
                return [RunAsGrantSet(cmd.tenant)]
            case DeleteRunAsGrant():
                if cmd.tenant not in self._grants:
                    return []
                self._grants = {t: g for t, g in self._grants.items() if t != cmd.tenant}
                return [RunAsGrantDeleted(cmd.tenant)]
        raise TypeError(f"unknown access command {cmd!r}")  # pragma: no cover

    def _create_tenant(self, name: str, now: float) -> list[AccessEvent]:
        check_tenant_name(name)
        if name in self._tenants:
            return []
        self._tenants[name] = TenantEntry(name, now)
        return [TenantCreated(name)]

    def _issue(self, entry: TokenEntry) -> list[AccessEvent]:
        if not entry.token_id or not entry.digest:
            raise InvalidRequest("token_id", "token id and digest must be non-empty")
        if entry.tenant not in self._tenants:
            raise NotFound("tenant", entry.tenant)
        if entry.token_id in self._tokens or entry.digest in self._by_digest:
            raise Conflict(f"token {entry.token_id} already exists")
        self._tokens[entry.token_id] = entry
        self._by_digest[entry.digest] = entry.token_id
        return [TokenIssued(entry.token_id, entry.tenant, entry.role)]

    def _revoke(self, cmd: RevokeToken) -> list[AccessEvent]:
        token = self._tokens.get(cmd.token_id)
        if token is None:
            raise NotFound("token", cmd.token_id)
        if not token.live:
            return []
        if token.role is Role.ADMIN and self._live_admins() == [token.token_id]:
            raise last_admin(token.token_id)
        self._tokens[cmd.token_id] = replace(token, revoked_at=cmd.now)
        return [TokenRevoked(cmd.token_id)]

    def check_access_invariants(self) -> None:
        """Raise AssertionError if an invariant of the module docstring is broken."""
        assert self._by_digest == {t.digest: i for i, t in self._tokens.items()}, "digest index"
        for token in self._tokens.values():
            assert token.tenant in self._tenants, f"{token.token_id}: unknown tenant"
