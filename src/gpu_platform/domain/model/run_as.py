"""Run-as accounts: which node accounts a tenant's jobs may run as.

A job that names no `user` runs as the node's default job account (setting `job_user`,
`nobody` unless an operator picks another; never root by default). A job that names a `user`
must name an account its tenant has been granted by an admin (`RunAsGrant`); a tenant with no
grant may name none. `root` (or any account an admin spells as root) is granted only with an
explicit `allow_root`: a grant that lists root without it is refused. Refusals are
InvalidRequest naming the field (`user` at submit, `accounts` when granting), which the APIs
answer with 422 / INVALID_ARGUMENT.

Pure functions over a `{tenant: accounts}` mapping: the grants themselves are replicated
access state on a cluster (`domain.access_state`), the server's state.db in embedded mode.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpu_platform.domain.errors import InvalidRequest

__all__ = [
    "ACCOUNT_NAME",
    "MAX_ACCOUNTS",
    "ROOT",
    "RunAsGrant",
    "check_account_name",
    "check_cwd",
    "check_run_as",
    "make_grant",
]

ROOT = "root"
MAX_ACCOUNTS = 64
#: POSIX portable user names (useradd's default rule), at most 32 characters.
ACCOUNT_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,30}[$]?$")


@dataclass(frozen=True, slots=True)
class RunAsGrant:
    """The accounts `tenant`'s jobs may name as `user`: sorted, unique, never empty;
    contains ROOT only if `allow_root`."""

    tenant: str
    accounts: tuple[str, ...]
    allow_root: bool = False

    def __post_init__(self) -> None:
        if not self.accounts or list(self.accounts) != sorted(set(self.accounts)):
            raise ValueError("accounts must be sorted, unique and not empty")
        if ROOT in self.accounts and not self.allow_root:
            raise ValueError("root needs allow_root")


def check_account_name(name: str, field: str = "user") -> str:
    """Return `name` if it is a portable account name (a-z 0-9 _ -, 1-32, starting with a
    letter or _); else InvalidRequest naming `field`. Numeric ids are refused: a uid would
    bypass the name-based grant (uid 0 is root under any name)."""
    if not ACCOUNT_NAME.match(name):
        raise InvalidRequest(
            field, f"{name!r} is not an account name (1-32 of a-z 0-9 _ -, not a number)"
        )
    return name


def make_grant(tenant: str, accounts: Iterable[str], allow_root: bool = False) -> RunAsGrant:
    """A validated grant; InvalidRequest naming `accounts` when empty, too many, badly named,
    or listing root without `allow_root`."""
    names = sorted({check_account_name(a, "accounts") for a in accounts})
    if not names:
        raise InvalidRequest("accounts", "at least one account (delete the grant to allow none)")
    if len(names) > MAX_ACCOUNTS:
        raise InvalidRequest("accounts", f"{len(names)} accounts, at most {MAX_ACCOUNTS}")
    if ROOT in names and not allow_root:
        raise InvalidRequest(
            "accounts", "root may run jobs only when allowed explicitly (allow_root)"
        )
    return RunAsGrant(tenant, tuple(names), allow_root and ROOT in names)


def check_run_as(user: str | None, tenant: str, grants: Mapping[str, RunAsGrant]) -> None:
    """Raise InvalidRequest naming `user` unless the job may run as `user`: None (the node's
    default job account) always may; a named account only if `tenant`'s grant lists it."""
    if user is None:
        return
    check_account_name(user)
    grant = grants.get(tenant)
    if grant is not None and user in grant.accounts:
        return
    allowed = ", ".join(grant.accounts) if grant is not None else "none"
    why = "root is never allowed unless an admin allows it" if user == ROOT else "not granted"
    raise InvalidRequest(
        "user",
        f"tenant {tenant!r} may not run jobs as {user!r} ({why}; accounts granted: {allowed}); "
        "leave user out to run as the node's default job account",
    )


def check_cwd(cwd: str | None, protected: Iterable[str] = ()) -> None:
    """InvalidRequest naming `cwd` unless it is None (the job's own log directory) or an
    absolute, normalized path (no `.`/`..` parts) outside every `protected` directory (the
    server's data directory). Nodes check again at launch, with symbolic links resolved."""
    if cwd is None:
        return
    plain = cwd.startswith("/") and "//" not in cwd
    if not plain or posixpath.normpath(cwd) != (cwd.rstrip("/") or "/"):
        raise InvalidRequest("cwd", f"{cwd!r} must be an absolute path without . or ..")
    for top in protected:
        if cwd == top or cwd.startswith(top.rstrip("/") + "/"):
            raise InvalidRequest("cwd", f"{cwd!r}: permission denied (the server's data)")
