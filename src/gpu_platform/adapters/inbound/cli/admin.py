"""Operator commands: nodes, drain | offline | online, audit, debug inject.

    gpu-platform drain   --gpu NODE:INDEX | --node NODE --reason WHY [--actor WHO]
    gpu-platform offline --gpu NODE:INDEX | --node NODE --reason WHY [--force] [--actor WHO]
    gpu-platform online  --gpu NODE:INDEX | --node NODE --reason WHY [--actor WHO]
    gpu-platform nodes
    gpu-platform audit [--limit N]
    gpu-platform debug inject 'xid 79 on gpu 3' [--actor WHO]

The actor defaults to the OS user and travels as the `X-Actor` header (docs/faults.md).
"""

from __future__ import annotations

import datetime as dt
import getpass
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

__all__ = ["parse_gpu_ref", "register_admin"]

Call = Callable[..., Any]


def parse_gpu_ref(text: str) -> tuple[str, int]:
    """'node-0:3' -> ('node-0', 3)."""
    node, sep, index = text.rpartition(":")
    if not sep or not node or not index.isdigit():
        raise ValueError(f"--gpu {text!r}: expected NODE:INDEX, e.g. node-0:3")
    return node, int(index)


def _default_actor() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers): say so rather than guess
        return "unknown-user"


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


DEFAULT_SERVER = "http://127.0.0.1:8080"
ServerOpt = Annotated[
    str,
    typer.Option("--server", envvar="GPU_PLATFORM_SERVER", help="REST API base URL."),
]
GpuOpt = Annotated[str | None, typer.Option("--gpu", help="NODE:INDEX of one GPU.")]
NodeOpt = Annotated[str | None, typer.Option("--node", help="A whole node.")]
ReasonOpt = Annotated[str, typer.Option("--reason", help="Why (recorded in the audit log).")]
ActorOpt = Annotated[str | None, typer.Option("--actor", help="Who acts (default: the OS user).")]


def register_admin(
    app: typer.Typer, out: Console, call: Call, fail: Callable[[str], typer.Exit]
) -> None:
    """Add the operator commands to `app`; `call(server, method, path, **kw)` does HTTP."""

    def act(
        action: str,
        gpu: str | None,
        node: str | None,
        reason: str,
        actor: str | None,
        force: bool,
        server: str,
    ) -> None:
        if (gpu is None) == (node is None):
            raise fail("give exactly one of --gpu NODE:INDEX or --node NODE")
        headers = {"X-Actor": actor or _default_actor()}
        body = {"reason": reason, "force": force}
        if gpu is not None:
            try:
                name, index = parse_gpu_ref(gpu)
            except ValueError as exc:
                raise fail(str(exc)) from None
            g = call(
                server, "POST", f"/v1/gpus/{name}/{index}/{action}", json=body, headers=headers
            )
            out.print(f"gpu {g['node']}:{g['index']} {g['state']}", soft_wrap=True)
        else:
            n = call(server, "POST", f"/v1/nodes/{node}/{action}", json=body, headers=headers)
            out.print(f"node {n['name']} {n['state']}", soft_wrap=True)

    @app.command()
    def drain(
        gpu: GpuOpt = None,
        node: NodeOpt = None,
        reason: ReasonOpt = "",
        actor: ActorOpt = None,
        server: ServerOpt = DEFAULT_SERVER,
    ) -> None:
        """Let running work finish on a GPU or node and place nothing new there."""
        act("drain", gpu, node, reason, actor, False, server)

    @app.command()
    def offline(
        gpu: GpuOpt = None,
        node: NodeOpt = None,
        reason: ReasonOpt = "",
        force: Annotated[
            bool, typer.Option("--force", help="Stop running jobs and re-queue them.")
        ] = False,
        actor: ActorOpt = None,
        server: ServerOpt = DEFAULT_SERVER,
    ) -> None:
        """Take a GPU or node out of service (refused while jobs run there, unless --force)."""
        act("offline", gpu, node, reason, actor, force, server)

    @app.command()
    def online(
        gpu: GpuOpt = None,
        node: NodeOpt = None,
        reason: ReasonOpt = "",
        actor: ActorOpt = None,
        server: ServerOpt = DEFAULT_SERVER,
    ) -> None:
        """Return a drained, degraded or offline GPU (or a node) to service."""
        act("online", gpu, node, reason, actor, False, server)

    @app.command()
    def nodes(server: ServerOpt = DEFAULT_SERVER) -> None:
        """Every node with its state, why, and how many jobs hold GPUs there."""
        table = Table("NODE", "STATE", "GPUS", "JOBS", "REASON")
        for n in call(server, "GET", "/v1/nodes"):
            table.add_row(n["name"], n["state"], str(n["gpus"]), str(n["jobs"]), n["reason"])
        out.print(table)

    @app.command()
    def audit(
        limit: Annotated[int, typer.Option(help="Newest N records.")] = 50,
        server: ServerOpt = DEFAULT_SERVER,
    ) -> None:
        """Operator actions and injections: who, when, what, why, outcome."""
        table = Table("WHEN", "ACTOR", "ACTION", "TARGET", "REASON", "OUTCOME")
        for a in call(server, "GET", "/v1/audit", params={"limit": limit}):
            table.add_row(
                _when(a["at"]), a["actor"], a["action"], a["target"], a["reason"], a["outcome"]
            )
        out.print(table)

    debug = typer.Typer(help="Debugging aids (fault injection).", no_args_is_help=True)
    app.add_typer(debug, name="debug")

    @debug.command("inject")
    def inject(
        script: Annotated[
            list[str], typer.Argument(help="Fault script, e.g. 'xid 79 on gpu 3' (docs/faults.md).")
        ],
        actor: ActorOpt = None,
        server: ServerOpt = DEFAULT_SERVER,
    ) -> None:
        """Inject simulated faults: xid N on gpu I | ecc ... | temp C on gpu I | lost gpu I ..."""
        headers = {"X-Actor": actor or _default_actor()}
        body = {"script": " ".join(script)}
        r = call(server, "POST", "/v1/debug/inject", json=body, headers=headers)
        for line in r["scheduled"]:
            out.print(f"injected: {line}", soft_wrap=True)
