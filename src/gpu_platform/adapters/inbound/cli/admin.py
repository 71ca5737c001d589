"""Operator commands: nodes, drain | offline | online, audit, debug inject.

    gpu-platform drain   --gpu-id UUID|NODE:INDEX | --node NODE --reason WHY [--actor WHO]
    gpu-platform offline --gpu-id UUID|NODE:INDEX | --node NODE --reason WHY [--force]
    gpu-platform online  --gpu-id UUID|NODE:INDEX | --node NODE --reason WHY
    gpu-platform nodes
    gpu-platform audit [--limit N]          (the server's operator audit records)
    gpu-platform audit verify [--file F]    (checks the hash chain of the audit log file)
    gpu-platform debug inject 'xid 79 on gpu 3' [--actor WHO]

With authentication on the actor is the token's name; with it off, `--actor` (default: the OS
user) travels as the `X-Actor` header (docs/faults.md).
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import typer
from rich.console import Console
from rich.table import Table

from gpu_platform.adapters.inbound.cli.client import EXIT
from gpu_platform.adapters.inbound.cli.session import Output, OutputOpt, fail

if TYPE_CHECKING:
    from gpu_platform.domain.model.audit_chain import ChainBreak

__all__ = ["parse_gpu_ref", "register_admin", "resolve_gpu", "verify_audit_file"]

Call = Callable[..., Any]


def parse_gpu_ref(text: str) -> tuple[str, int]:
    """'node-0:3' -> ('node-0', 3)."""
    node, sep, index = text.rpartition(":")
    if not sep or not node or not index.isdigit():
        raise ValueError(f"--gpu {text!r}: expected NODE:INDEX, e.g. node-0:3")
    return node, int(index)


def resolve_gpu(text: str, gpus: Callable[[], list[dict[str, Any]]]) -> tuple[str, int]:
    """NODE:INDEX as is (ValueError if malformed); anything without a colon is a GPU UUID
    looked up in `gpus()` (LookupError if no GPU has it)."""
    if ":" in text:
        return parse_gpu_ref(text)
    for g in gpus():
        if g["uuid"] == text:
            return g["node"], int(g["index"])
    raise LookupError(f"--gpu-id {text!r}: no GPU has this UUID (or give NODE:INDEX)")


def verify_audit_file(path: Path, key_file: Path | None = None) -> ChainBreak | int:
    """Verify the audit log at `path` against its head file `<path>.head` when present; with
    `key_file` (the server's `audit_key_file`) the head must carry a matching seal."""
    from gpu_platform.adapters.audit_seal import load_key, verify_file

    key = None if key_file is None else load_key(key_file)
    return verify_file(path, key)


def _default_audit_file() -> Path:
    explicit = os.environ.get("GPU_PLATFORM_AUDIT_FILE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("GPU_PLATFORM_DATA_DIR", ".gpu-platform")) / "audit.jsonl"


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
GpuOpt = Annotated[
    str | None, typer.Option("--gpu-id", "--gpu", help="One GPU: its UUID, or NODE:INDEX.")
]
NodeOpt = Annotated[str | None, typer.Option("--node", help="A whole node.")]
ReasonOpt = Annotated[str, typer.Option("--reason", help="Why (recorded in the audit log).")]
ActorOpt = Annotated[str | None, typer.Option("--actor", help="Who acts (default: the OS user).")]


def register_admin(
    app: typer.Typer, out: Console, call: Call, emit: Callable[[Output, Any], bool]
) -> None:
    """Add the operator commands to `app`; `call(server, method, path, **kw)` does HTTP;
    `emit(output, data)` prints JSON when asked."""

    def act(
        action: str,
        gpu: str | None,
        node: str | None,
        reason: str,
        actor: str | None,
        force: bool,
        server: str,
        output: Output,
    ) -> None:
        if (gpu is None) == (node is None):
            raise fail("give exactly one of --gpu-id UUID|NODE:INDEX or --node NODE", 2)
        headers = {"X-Actor": actor or _default_actor()}
        body = {"reason": reason, "force": force}
        if gpu is not None:
            try:
                name, index = resolve_gpu(gpu, lambda: call(server, "GET", "/v1/gpus"))
            except ValueError as exc:
                raise fail(str(exc), EXIT["usage"]) from None
            except LookupError as exc:
                raise fail(str(exc), EXIT["not_found"]) from None
            g = call(
                server, "POST", f"/v1/gpus/{name}/{index}/{action}", json=body, headers=headers
            )
            if not emit(output, g):
                out.print(f"gpu {g['node']}:{g['index']} {g['state']}", soft_wrap=True)
        else:
            n = call(server, "POST", f"/v1/nodes/{node}/{action}", json=body, headers=headers)
            if not emit(output, n):
                out.print(f"node {n['name']} {n['state']}", soft_wrap=True)

    @app.command()
    def drain(
        gpu: GpuOpt = None,
        node: NodeOpt = None,
        reason: ReasonOpt = "",
        actor: ActorOpt = None,
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Let running work finish on a GPU or node and place nothing new there."""
        act("drain", gpu, node, reason, actor, False, server, output)

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
        output: OutputOpt = Output.table,
    ) -> None:
        """Take a GPU or node out of service (refused while jobs run there, unless --force)."""
        act("offline", gpu, node, reason, actor, force, server, output)

    @app.command()
    def online(
        gpu: GpuOpt = None,
        node: NodeOpt = None,
        reason: ReasonOpt = "",
        actor: ActorOpt = None,
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Return a drained, degraded or offline GPU (or a node) to service."""
        act("online", gpu, node, reason, actor, False, server, output)

    nodes_app = typer.Typer(
        help="Every node with its state, why, and how many jobs hold GPUs there; "
        "`nodes remove NODE` removes one.",
        invoke_without_command=True,
    )
    app.add_typer(nodes_app, name="nodes")

    @nodes_app.command("remove")
    def nodes_remove(
        node: Annotated[str, typer.Argument(help="The node to remove.")],
        reason: ReasonOpt = "",
        actor: ActorOpt = None,
        server: ServerOpt = DEFAULT_SERVER,
    ) -> None:
        """Remove a node for good (refused while it holds work or its agent is connected)."""
        headers = {"X-Actor": actor or _default_actor()}
        path = f"/v1/nodes/{quote(node, safe='')}?reason={quote(reason, safe='')}"
        call(server, "DELETE", path, headers=headers)
        out.print(f"node {node} removed", soft_wrap=True)

    @nodes_app.callback()
    def nodes(
        ctx: typer.Context, server: ServerOpt = DEFAULT_SERVER, output: OutputOpt = Output.table
    ) -> None:
        """Every node with its state, why, and how many jobs hold GPUs there."""
        if ctx.invoked_subcommand is not None:
            return
        rows = call(server, "GET", "/v1/nodes")
        if emit(output, rows):
            return
        table = Table("NODE", "STATE", "GPUS", "JOBS", "REASON")
        for n in rows:
            table.add_row(n["name"], n["state"], str(n["gpus"]), str(n["jobs"]), n["reason"])
        out.print(table)

    audit_app = typer.Typer(
        help="Operator actions (who, when, what, why, outcome); `audit verify` checks the "
        "hash chain of the audit log file.",
        invoke_without_command=True,
    )
    app.add_typer(audit_app, name="audit")

    @audit_app.command("verify")
    def audit_verify(
        file: Annotated[
            Path | None,
            typer.Option(
                "--file",
                help="The audit log (default: $GPU_PLATFORM_AUDIT_FILE, else "
                "$GPU_PLATFORM_DATA_DIR/audit.jsonl, else .gpu-platform/audit.jsonl).",
            ),
        ] = None,
        key_file: Annotated[
            Path | None,
            typer.Option(
                "--key-file",
                envvar="GPU_PLATFORM_AUDIT_KEY_FILE",
                help="The server's audit_key_file: the head must carry its seal (detects a "
                "cut tail with a rewritten head, and a re-hashed chain).",
            ),
        ] = None,
        output: OutputOpt = Output.table,
    ) -> None:
        """Exit 0 when every line chains; else exit 8 naming the first bad line."""
        from gpu_platform.domain.model.audit_chain import ChainBreak

        path = file or _default_audit_file()
        try:
            result = verify_audit_file(path, key_file)
        except OSError as exc:
            raise fail(f"{exc.filename or path}: {exc.strerror}", EXIT["error"]) from None
        except ValueError as exc:
            raise fail(str(exc), EXIT["error"]) from None
        ok = not isinstance(result, ChainBreak)
        if output is Output.json:
            data: dict[str, Any] = {"file": str(path), "ok": ok}
            if isinstance(result, ChainBreak):
                data |= {"line": result.line, "reason": result.reason}
            else:
                data["entries"] = result
            out.print(json.dumps(data), soft_wrap=True)
            if not ok:
                raise typer.Exit(EXIT["audit_broken"])
            return
        if isinstance(result, ChainBreak):
            raise fail(f"{path}: line {result.line}: {result.reason}", EXIT["audit_broken"])
        out.print(f"{path}: ok, {result} entries chained", soft_wrap=True)

    @audit_app.callback()
    def audit(
        ctx: typer.Context,
        limit: Annotated[int, typer.Option(help="Newest N records.")] = 50,
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Operator actions and injections: who, when, what, why, outcome."""
        if ctx.invoked_subcommand is not None:
            return
        rows = call(server, "GET", "/v1/audit", params={"limit": limit})
        if emit(output, rows):
            return
        table = Table("WHEN", "ACTOR", "ACTION", "TARGET", "REASON", "OUTCOME")
        for a in rows:
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
        output: OutputOpt = Output.table,
    ) -> None:
        """Inject simulated faults: xid N on gpu I | ecc ... | temp C on gpu I | lost gpu I ..."""
        headers = {"X-Actor": actor or _default_actor()}
        body = {"script": " ".join(script)}
        r = call(server, "POST", "/v1/debug/inject", json=body, headers=headers)
        if emit(output, r):
            return
        for line in r["scheduled"]:
            out.print(f"injected: {line}", soft_wrap=True)
