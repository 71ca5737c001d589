"""Control-plane membership commands (docs/replication.md):

gpu-platform cluster status                      this server's view: role, term, leader, agents
gpu-platform cluster add-server ID HOST:PORT     add a Raft voter (admins)
gpu-platform cluster remove-server ID            remove a voter (admins)
gpu-platform cluster transfer-leader ID          hand the lead to a voter (admins)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpu_platform.adapters.inbound.cli.admin import DEFAULT_SERVER, ServerOpt
from gpu_platform.adapters.inbound.cli.session import Output, OutputOpt

__all__ = ["register_cluster"]

Call = Callable[..., Any]


def register_cluster(
    app: typer.Typer, out: Console, call: Call, emit: Callable[[Output, Any], bool]
) -> None:
    cluster = typer.Typer(
        help="The replicated control plane: status and membership.", no_args_is_help=True
    )
    app.add_typer(cluster, name="cluster")

    def show(info: dict[str, Any], output: Output) -> None:
        if emit(output, info):
            return
        leader = info["leader_id"] if info["leader_id"] is not None else "-"
        out.print(
            f"mode {info['mode']}  server {info['server_id']}  role {info['role']}  "
            f"term {info['term']}  leader {leader}  commit {info['commit']}  "
            f"applied {info['applied']}"
        )
        table = Table("SERVER", "VOTER", "REST", "GRPC", "AGENTS")
        for s in info["servers"]:
            table.add_row(
                str(s["id"]),
                "yes" if s["voter"] else "no",
                s["http_url"] or "-",
                s["grpc_address"] or "-",
                s["agent_address"] or "-",
            )
        out.print(table)
        if info["agents"]:
            agents = Table("NODE", "LAST HEARD")
            for node, age in sorted(info["agents"].items()):
                agents.add_row(node, f"{age:.1f}s ago")
            out.print(agents)

    @cluster.command("status")
    def status(server: ServerOpt = DEFAULT_SERVER, output: OutputOpt = Output.table) -> None:
        """This server's view of the control plane (any server answers)."""
        show(call(server, "GET", "/v1/cluster"), output)

    @cluster.command("add-server")
    def add_server(
        server_id: Annotated[int, typer.Argument(metavar="ID", help="The new voter's Raft id.")],
        address: Annotated[str, typer.Argument(metavar="HOST:PORT", help="Its Raft address.")],
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Add a voter; start it first with `serve --id ID --peers ... --join`."""
        show(
            call(server, "POST", "/v1/cluster/servers", json={"id": server_id, "address": address}),
            output,
        )

    @cluster.command("remove-server")
    def remove_server(
        server_id: Annotated[int, typer.Argument(metavar="ID", help="The voter to remove.")],
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Remove a voter (removing the leader makes it step down)."""
        show(call(server, "DELETE", f"/v1/cluster/servers/{server_id}"), output)

    @cluster.command("transfer-leader")
    def transfer_leader(
        server_id: Annotated[int, typer.Argument(metavar="ID", help="The voter to lead.")],
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Hand the lead to a voter; returns once it leads."""
        show(call(server, "POST", "/v1/cluster/leader", json={"id": server_id}), output)
