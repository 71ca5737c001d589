"""Services in the CLI (docs/services.md), over the REST API:

gpu-platform services create NAME --replicas N --gpus G [--port-env PORT] [--health /health]
                         [--engine vllm|sglang|llama.cpp|transformers|custom --model M] -- CMD...
gpu-platform services list
gpu-platform services describe NAME                each replica: node, GPUs, state, address
gpu-platform services scale NAME N
gpu-platform services update NAME [options] [-- CMD...]   rolling update to the changed spec
gpu-platform services delete NAME
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpu_platform.adapters.inbound.cli.admin import DEFAULT_SERVER, ServerOpt
from gpu_platform.adapters.inbound.cli.session import Output, OutputOpt, fail

__all__ = ["register_services"]

Call = Callable[..., Any]
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="The service's name.")]

# Options shared by create and update; None = not given (update keeps the current value).
Replicas = Annotated[int | None, typer.Option("--replicas", "-r", help="Replicas wanted.")]
Gpus = Annotated[
    str | None,
    typer.Option("--gpus", help="GPUs per replica: whole GPUs (2) or a share of one GPU (0.5)."),
]
GpuMemory = Annotated[
    str | None,
    typer.Option("--gpu-memory", help="A share's pinned device memory (10G; MPS limit)."),
]
PortEnv = Annotated[
    str | None, typer.Option("--port-env", help="Env var with the replica's port [PORT].")
]
Health = Annotated[str | None, typer.Option("--health", help="Health-check path [/health].")]
Engine = Annotated[
    str | None,
    typer.Option("--engine", help="vllm, sglang, llama.cpp, transformers or custom [custom]."),
]
Model = Annotated[str | None, typer.Option("--model", help="Model to serve (engines: to load).")]
Tenant = Annotated[str | None, typer.Option("--tenant", help="Owning tenant [yours].")]
Priority = Annotated[int | None, typer.Option("--priority", help="Scheduling priority [0].")]
Preemptible = Annotated[
    bool | None,
    typer.Option("--preemptible/--no-preemptible", help="May be preempted like a job [yes]."),
]
Env = Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE, repeatable.")]
Startup = Annotated[
    float | None, typer.Option("--startup-timeout", help="Seconds to become ready [600].")
]
Backoff = Annotated[
    float | None, typer.Option("--backoff", help="First restart delay in seconds [1].")
]
Command = Annotated[
    list[str] | None, typer.Argument(help="After --: the replica's command (or engine args).")
]


def _spec(
    base: dict[str, Any],
    *,
    name: str,
    command: list[str] | None,
    env: list[str] | None,
    **given: Any,
) -> dict[str, Any]:
    # imported here: `--help` and the other commands load no domain package
    from gpu_platform.adapters.inbound.service_fields import SPEC_FIELDS

    spec = {k: base[k] for k in SPEC_FIELDS if k in base}
    spec["name"] = name
    gpus, memory = given.pop("gpus", None), given.pop("gpu_memory", None)
    for key, value in given.items():
        if value is not None:
            spec[key] = value
    spec.update(_gpu_fields(gpus, memory))
    if command:
        spec["command"] = command
    if env is not None:
        pairs = {}
        for item in env:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise fail(f"--env: expected KEY=VALUE, got {item!r}", 2)
            pairs[key] = value
        spec["env"] = pairs
    return spec


def _gpu_fields(gpus: str | None, memory: str | None) -> dict[str, Any]:
    """--gpus (2, or 0.5: a share of one GPU) and --gpu-memory (10G) as spec fields."""
    from gpu_platform.domain.errors import InvalidRequest
    from gpu_platform.domain.model.sharing import parse_bytes, parse_gpus

    fields: dict[str, Any] = {}
    try:
        if gpus is not None:
            fields["gpus"], fields["gpu_milli"] = parse_gpus(gpus)
        if memory is not None:
            fields["gpu_memory_bytes"] = parse_bytes(memory, "gpu_memory")
    except InvalidRequest as exc:
        raise fail(f"--{exc.field.replace('_', '-')}: {exc.reason}", 2) from None
    return fields


def _gpus(s: dict[str, Any]) -> str:
    """2, or 0.5 for a share of one GPU."""
    milli = int(s.get("gpu_milli") or 1000)
    return f"{milli / 1000:g}" if milli < 1000 else str(s["gpus"])


def _ago(at: float | None) -> str:
    if not at:
        return ""
    left = at - time.time()
    return f" (restarts in {left:.1f}s)" if left > 0 else ""


def register_services(
    app: typer.Typer, out: Console, call: Call, emit: Callable[[Output, Any], bool]
) -> None:
    services = typer.Typer(
        help="Long-running services with replicas (model servers).", no_args_is_help=True
    )
    app.add_typer(services, name="services")

    def brief(s: dict[str, Any]) -> str:
        what = f"{s['engine']} {s['model']}" if s["engine"] != "custom" else s["model"]
        return f"service {s['name']}: {s['ready']}/{s['replicas']} ready ({what})"

    def describe_out(s: dict[str, Any], output: Output) -> None:
        if emit(output, s):
            return
        out.print(brief(s))
        out.print(
            f"Tenant {s['tenant']}  priority {s['priority']}  GPUs/replica {_gpus(s)}  "
            f"generation {s['generation']}  health {s['health_path']}  port env {s['port_env']}"
            + ("  DELETING" if s["deleting"] else "")
        )
        out.print("Command: " + " ".join(s["command"]), soft_wrap=True)
        table = Table("REPLICA", "GEN", "STATE", "NODE", "GPUS", "RESTARTS", "ADDRESS", "WHY")
        for r in s["replica_set"]:
            why = (r["detail"] or "") + _ago(r["restart_at"])
            table.add_row(
                r["replica_id"],
                str(r["generation"]),
                r["state"],
                r["node"] or "-",
                ",".join(map(str, r["gpus"])) or "-",
                str(r["restarts"]),
                r["address"] or "-",
                why or "-",
            )
        out.print(table)

    @services.command("create")
    def create(
        name: NameArg,
        command: Command = None,
        replicas: Replicas = 1,
        gpus: Gpus = None,
        gpu_memory: GpuMemory = None,
        port_env: PortEnv = None,
        health: Health = None,
        engine: Engine = None,
        model: Model = None,
        tenant: Tenant = None,
        priority: Priority = None,
        preemptible: Preemptible = None,
        env: Env = None,
        startup_timeout: Startup = None,
        backoff: Backoff = None,
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Create a service: NAME, options, then `--` and the command of one replica."""
        spec = _spec(
            {},
            name=name,
            command=command,
            env=env,
            replicas=replicas,
            gpus=gpus,
            gpu_memory=gpu_memory,
            port_env=port_env,
            health_path=health,
            engine=engine,
            model=model,
            tenant=tenant,
            priority=priority,
            preemptible=preemptible,
            startup_timeout_s=startup_timeout,
            backoff_s=backoff,
        )
        describe_out(call(server, "POST", "/v1/services", json=spec), output)

    @services.command("list")
    def list_(server: ServerOpt = DEFAULT_SERVER, output: OutputOpt = Output.table) -> None:
        """Every service you may see, with how many replicas are ready."""
        rows = call(server, "GET", "/v1/services")
        if emit(output, rows):
            return
        table = Table("NAME", "TENANT", "MODEL", "ENGINE", "READY", "GPUS", "GEN")
        for s in rows:
            table.add_row(
                s["name"],
                s["tenant"],
                s["model"],
                s["engine"],
                f"{s['ready']}/{s['replicas']}" + (" deleting" if s["deleting"] else ""),
                _gpus(s),
                str(s["generation"]),
            )
        out.print(table)

    @services.command("describe")
    def describe(
        name: NameArg, server: ServerOpt = DEFAULT_SERVER, output: OutputOpt = Output.table
    ) -> None:
        """A service and each replica: node, GPUs, state, restarts, address, why not ready."""
        describe_out(call(server, "GET", f"/v1/services/{name}"), output)

    @services.command("scale")
    def scale(
        name: NameArg,
        replicas: Annotated[int, typer.Argument(metavar="N", help="Replicas wanted.")],
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Set how many replicas run (no rolling update: same generation)."""
        body = {"replicas": replicas}
        describe_out(call(server, "POST", f"/v1/services/{name}/scale", json=body), output)

    @services.command("update")
    def update(
        name: NameArg,
        command: Command = None,
        replicas: Replicas = None,
        gpus: Gpus = None,
        gpu_memory: GpuMemory = None,
        port_env: PortEnv = None,
        health: Health = None,
        engine: Engine = None,
        model: Model = None,
        priority: Priority = None,
        preemptible: Preemptible = None,
        env: Env = None,
        startup_timeout: Startup = None,
        backoff: Backoff = None,
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Change a service: options given replace the current ones; a change other than
        --replicas rolls out replica by replica (new ones ready before old ones stop)."""
        current = call(server, "GET", f"/v1/services/{name}")["spec"]
        spec = _spec(
            current,
            name=name,
            command=command,
            env=env,
            replicas=replicas,
            gpus=gpus,
            gpu_memory=gpu_memory,
            port_env=port_env,
            health_path=health,
            engine=engine,
            model=model,
            priority=priority,
            preemptible=preemptible,
            startup_timeout_s=startup_timeout,
            backoff_s=backoff,
        )
        describe_out(call(server, "PUT", f"/v1/services/{name}", json=spec), output)

    @services.command("delete")
    def delete(
        name: NameArg, server: ServerOpt = DEFAULT_SERVER, output: OutputOpt = Output.table
    ) -> None:
        """Delete a service: its replicas are drained and stopped, then it is gone."""
        describe_out(call(server, "DELETE", f"/v1/services/{name}"), output)
