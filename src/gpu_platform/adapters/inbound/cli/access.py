"""Identity, tenants and tokens:

    gpu-platform whoami
    gpu-platform tenants list | create NAME                          (admins)
    gpu-platform tokens list | create --name N --tenant T --role R | revoke TOKEN_ID  (admins)
    gpu-platform quotas list | set TENANT --gpus N [--cohort C ...] | delete TENANT   (admins)

`tokens create` prints the secret once; the server keeps only its SHA-256.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpu_platform.adapters.inbound.cli.admin import DEFAULT_SERVER, ServerOpt
from gpu_platform.adapters.inbound.cli.session import Output, OutputOpt

__all__ = ["register_access"]

Call = Callable[..., Any]


class RoleName(StrEnum):
    admin = "admin"
    operator = "operator"
    user = "user"
    viewer = "viewer"


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def register_access(
    app: typer.Typer, out: Console, call: Call, emit: Callable[[Output, Any], bool]
) -> None:
    @app.command()
    def whoami(server: ServerOpt = DEFAULT_SERVER, output: OutputOpt = Output.table) -> None:
        """Who the server takes you for: name, tenant, role (and whether auth is on)."""
        me = call(server, "GET", "/v1/whoami")
        if emit(output, me):
            return
        auth = "on" if me["auth"] else "OFF (every caller is an admin)"
        out.print(f"{me['name']} tenant={me['tenant']} role={me['role']} auth={auth}")

    tenants = typer.Typer(help="List and create tenants (admins).", no_args_is_help=True)
    app.add_typer(tenants, name="tenants")

    @tenants.command("list")
    def tenants_list(server: ServerOpt = DEFAULT_SERVER, output: OutputOpt = Output.table) -> None:
        """Every tenant."""
        rows = call(server, "GET", "/v1/tenants")
        if emit(output, rows):
            return
        table = Table("TENANT", "CREATED")
        for t in rows:
            table.add_row(t["name"], _when(t["created_at"]))
        out.print(table)

    @tenants.command("create")
    def tenants_create(
        name: Annotated[str, typer.Argument(help="1-64 of A-Z a-z 0-9 _ . -")],
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Create a tenant (idempotent)."""
        t = call(server, "POST", "/v1/tenants", json={"name": name})
        if not emit(output, t):
            out.print(f"tenant {t['name']}")

    tokens = typer.Typer(
        help="Create, list and revoke bearer tokens (admins).", no_args_is_help=True
    )
    app.add_typer(tokens, name="tokens")

    @tokens.command("create")
    def tokens_create(
        name: Annotated[str, typer.Option(help="Who will hold it (the audit log's actor).")],
        tenant: Annotated[str, typer.Option(help="The tenant it acts for.")],
        role: Annotated[
            RoleName, typer.Option(help="admin, operator, user or viewer (read-only).")
        ] = RoleName.user,
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Create a token; its secret is printed once (only its hash is kept)."""
        body = {"name": name, "tenant": tenant, "role": str(role)}
        t = call(server, "POST", "/v1/tokens", json=body)
        if emit(output, t):
            return
        out.print(f"token {t['token_id']} for {t['name']} (tenant {t['tenant']}, {t['role']})")
        out.print(t["token"], soft_wrap=True)

    @tokens.command("list")
    def tokens_list(server: ServerOpt = DEFAULT_SERVER, output: OutputOpt = Output.table) -> None:
        """Every token (never the secrets), revoked ones included."""
        rows = call(server, "GET", "/v1/tokens")
        if emit(output, rows):
            return
        table = Table("TOKEN", "NAME", "TENANT", "ROLE", "CREATED", "REVOKED")
        for t in rows:
            table.add_row(
                t["token_id"],
                t["name"],
                t["tenant"],
                t["role"],
                _when(t["created_at"]),
                _when(t["revoked_at"]),
            )
        out.print(table)

    @tokens.command("revoke")
    def tokens_revoke(
        token_id: Annotated[str, typer.Argument(metavar="TOKEN_ID")],
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Revoke a token at once (later calls with it are 401)."""
        t = call(server, "DELETE", f"/v1/tokens/{token_id}")
        if not emit(output, t):
            out.print(f"token {t['token_id']} revoked")

    quotas = typer.Typer(
        help="Per-tenant quotas: guaranteed GPUs, cohort borrowing and lending (admins set).",
        no_args_is_help=True,
    )
    app.add_typer(quotas, name="quotas")

    def limit(value: int | None) -> str:
        return "-" if value is None else str(value)

    @quotas.command("list")
    def quotas_list(server: ServerOpt = DEFAULT_SERVER, output: OutputOpt = Output.table) -> None:
        """Every tenant's quota."""
        rows = call(server, "GET", "/v1/quotas")
        if emit(output, rows):
            return
        table = Table("TENANT", "GPUS", "COHORT", "BORROW LIMIT", "LEND LIMIT")
        for q in rows:
            table.add_row(
                q["tenant"],
                str(q["gpus"]),
                q["cohort"] or "-",
                limit(q["borrowing_limit"]),
                limit(q["lending_limit"]),
            )
        out.print(table)

    @quotas.command("set")
    def quotas_set(
        tenant: Annotated[str, typer.Argument(help="The tenant.")],
        gpus: Annotated[int, typer.Option(help="Guaranteed (nominal) GPUs.")],
        cohort: Annotated[
            str | None, typer.Option(help="Tenants that lend each other idle quota.")
        ] = None,
        borrowing_limit: Annotated[
            int | None, typer.Option(help="GPUs it may borrow beyond --gpus (default: any).")
        ] = None,
        lending_limit: Annotated[
            int | None,
            typer.Option(help="GPUs of its idle quota others may borrow (default: all)."),
        ] = None,
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Set a tenant's quota (replaces the previous one; effective next cycle)."""
        body = {
            "gpus": gpus,
            "cohort": cohort,
            "borrowing_limit": borrowing_limit,
            "lending_limit": lending_limit,
        }
        q = call(server, "PUT", f"/v1/quotas/{tenant}", json=body)
        if not emit(output, q):
            out.print(f"quota {q['tenant']}: {q['gpus']} GPUs, cohort {q['cohort'] or '-'}")

    @quotas.command("delete")
    def quotas_delete(
        tenant: Annotated[str, typer.Argument(help="The tenant.")],
        server: ServerOpt = DEFAULT_SERVER,
    ) -> None:
        """Remove a tenant's quota (it then has no guarantee and no cap)."""
        call(server, "DELETE", f"/v1/quotas/{tenant}")
        out.print(f"quota {tenant} removed")
