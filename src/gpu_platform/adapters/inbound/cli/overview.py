"""Cluster views: `gpus`, `status` (with `--all` its GPUs), `usage` (GPU-hours and gateway
tokens per tenant over a window given as a span or an ISO date-time).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpu_platform.adapters.inbound.cli.admin import DEFAULT_SERVER, ServerOpt
from gpu_platform.adapters.inbound.cli.session import Output, OutputOpt, fail, when
from gpu_platform.adapters.inbound.cli.sharing_opts import share_cell, shared_text

__all__ = ["gpu_table", "parse_when", "register_overview"]

Call = Callable[..., Any]
Emit = Callable[[Output, Any], bool]


_SPANS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_when(text: str, now: float) -> float:
    """'24h' / '-24h' / '7d' -> that long before `now`; an ISO date-time -> its Unix time."""
    raw = text.strip()
    span = raw.lstrip("-")
    if span[-1:] in _SPANS:
        try:
            return now - float(span[:-1]) * _SPANS[span[-1]]
        except ValueError:
            pass
    try:
        moment = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(f"{text!r}: expected a span like 24h or 7d, or an ISO date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def gpu_table(rows: list[dict[str, Any]]) -> Table:
    table = Table("NODE", "IDX", "MODEL", "MEMORY", "NUMA", "STATE", "JOB", "UUID", "REASON")
    for g in rows:
        table.add_row(
            g["node"],
            str(g["index"]),
            g["model"],
            f"{g['memory_bytes'] / (1 << 30):.0f} GiB",
            str(g["numa_node"]),
            g["state"] + (" (hot)" if g["hot"] else ""),
            share_cell(g),
            g["uuid"],
            g["reason"] or "-",
        )
    return table


def register_overview(app: typer.Typer, out: Console, call: Call, emit: Emit) -> None:
    """Add `gpus`, `usage` and `status` to `app`."""

    @app.command()
    def gpus(server: ServerOpt = DEFAULT_SERVER, output: OutputOpt = Output.table) -> None:
        """Every GPU with its state and the job holding it."""
        rows = call(server, "GET", "/v1/gpus")
        if emit(output, rows):
            return
        out.print(gpu_table(rows))

    @app.command()
    def usage(
        tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
        since: Annotated[
            str | None, typer.Option(help="Window start: 24h, 7d, or an ISO date-time.")
        ] = None,
        until: Annotated[str | None, typer.Option(help="Window end (default: now).")] = None,
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """GPU-hours per tenant and per job (time spent RUNNING x GPUs held), and gateway
        requests and tokens per tenant since the server started."""
        now = dt.datetime.now(dt.UTC).timestamp()
        params: dict[str, Any] = {}
        try:
            if since is not None:
                params["since"] = parse_when(since, now)
            if until is not None:
                params["until"] = parse_when(until, now)
        except ValueError as exc:
            raise fail(f"--since/--until {exc}", 2) from None
        if tenant is not None:
            params["tenant"] = tenant
        report = call(server, "GET", "/v1/usage", params=params)
        if emit(output, report):
            return
        out.print(f"Window: {when(report['since'])} .. {when(report['until'])}")
        tenants = Table("TENANT", "GPU-HOURS")
        for name, hours in sorted(report["gpu_hours_by_tenant"].items()):
            tenants.add_row(name, f"{hours:.3f}")
        tenants.add_row("total", f"{report['gpu_hours']:.3f}")
        out.print(tenants)
        jobs_table = Table("JOB", "TENANT", "GPUS", "RUNNING", "GPU-HOURS")
        for j in report["jobs"]:
            jobs_table.add_row(
                j["job_id"],
                j["tenant"],
                str(j["gpus"]),
                f"{j['running_s']:.0f}s",
                f"{j['gpu_hours']:.3f}",
            )
        out.print(jobs_table)
        serving = report.get("serving_by_tenant") or {}
        if serving:  # the OpenAI-compatible gateway, since the server started
            tokens = Table("TENANT", "REQUESTS", "PROMPT TOKENS", "COMPLETION TOKENS")
            for name, u in sorted(serving.items()):
                tokens.add_row(
                    name,
                    str(u["requests"]),
                    str(u["prompt_tokens"]),
                    str(u["completion_tokens"]),
                )
            out.print(tokens)

    @app.command()
    def status(
        server: ServerOpt = DEFAULT_SERVER,
        all_gpus: Annotated[
            bool, typer.Option("--all", help="Also every GPU with its health state.")
        ] = False,
        output: OutputOpt = Output.table,
    ) -> None:
        """Cluster summary: inventory source, GPUs free/total, jobs by state (--all: GPUs)."""
        s = call(server, "GET", "/v1/status")
        rows = call(server, "GET", "/v1/gpus") if all_gpus else None
        if emit(output, s if rows is None else {**s, "gpus": rows}):
            return
        kind = "SIMULATED" if s["simulated"] else "real hardware"
        out.print(f"Server:    {server}")
        out.print(f"Inventory: {s['inventory_source']} ({kind})")
        out.print(f"Nodes:     {s['nodes']}")
        out.print(f"GPUs:      {s['gpus_free']} free / {s['gpus_total']} total{shared_text(s)}")
        jobs_line = ", ".join(f"{k}={v}" for k, v in sorted(s["jobs_by_state"].items())) or "none"
        out.print(f"Jobs:      {jobs_line}")
        for note in s["notes"]:
            out.print(f"Note:      {note}", soft_wrap=True)
        if rows is not None:
            out.print(gpu_table(rows))
