"""Run-as grants: which node accounts a tenant's jobs may name as `--user` (admins only).

    gpu-platform run-as list
    gpu-platform run-as set TENANT ACCOUNT... [--allow-root]
    gpu-platform run-as delete TENANT

A job naming no account runs as the node's default job account (setting `job_user`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpu_platform.adapters.inbound.cli.admin import DEFAULT_SERVER, ServerOpt
from gpu_platform.adapters.inbound.cli.session import Output, OutputOpt

__all__ = ["register_run_as"]


def register_run_as(
    app: typer.Typer, out: Console, call: Callable[..., Any], emit: Callable[[Output, Any], bool]
) -> None:
    run_as = typer.Typer(
        help="Which accounts each tenant's jobs may run as (admins).", no_args_is_help=True
    )
    app.add_typer(run_as, name="run-as")

    @run_as.command("list")
    def run_as_list(server: ServerOpt = DEFAULT_SERVER, output: OutputOpt = Output.table) -> None:
        """Every tenant's grant (a tenant without one may name no account)."""
        rows = call(server, "GET", "/v1/run-as")
        if emit(output, rows):
            return
        table = Table("TENANT", "ACCOUNTS", "ROOT")
        for g in rows:
            table.add_row(g["tenant"], " ".join(g["accounts"]), "yes" if g["allow_root"] else "no")
        out.print(table)

    @run_as.command("set")
    def run_as_set(
        tenant: Annotated[str, typer.Argument(help="The tenant.")],
        accounts: Annotated[list[str], typer.Argument(help="Accounts its jobs may name.")],
        allow_root: Annotated[
            bool, typer.Option("--allow-root", help="Needed to grant root (never implied).")
        ] = False,
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Set a tenant's grant (replaces the previous one)."""
        body = {"accounts": accounts, "allow_root": allow_root}
        g = call(server, "PUT", f"/v1/run-as/{tenant}", json=body)
        if not emit(output, g):
            out.print(f"run-as {g['tenant']}: {' '.join(g['accounts'])}")

    @run_as.command("delete")
    def run_as_delete(
        tenant: Annotated[str, typer.Argument(help="The tenant.")],
        server: ServerOpt = DEFAULT_SERVER,
    ) -> None:
        """Remove a tenant's grant (its jobs then run as the default job account only)."""
        call(server, "DELETE", f"/v1/run-as/{tenant}")
        out.print(f"run-as {tenant} removed")
