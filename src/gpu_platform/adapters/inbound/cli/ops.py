"""Health and watch commands (seed §9):

gpu-platform health --gpu-id UUID|NODE:INDEX     one GPU's health, its node's state
gpu-platform watch --interval 1s [--count N]     status and GPUs, redrawn every interval
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from gpu_platform.adapters.inbound.cli.admin import DEFAULT_SERVER, ServerOpt, resolve_gpu
from gpu_platform.adapters.inbound.cli.client import EXIT
from gpu_platform.adapters.inbound.cli.session import Output, OutputOpt, fail

__all__ = ["parse_interval", "register_ops"]

Call = Callable[..., Any]


def parse_interval(text: str) -> float:
    """'1s' -> 1.0, '500ms' -> 0.5, '2m' -> 120.0, '3' -> 3.0 (seconds; must be > 0)."""
    raw = text.strip().lower()
    scale = 1.0
    for suffix, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if raw.endswith(suffix):
            raw, scale = raw[: -len(suffix)], factor
            break
    try:
        value = float(raw) * scale
    except ValueError:
        raise ValueError(f"--interval {text!r}: expected e.g. 1s, 500ms, 2m") from None
    if value <= 0:
        raise ValueError(f"--interval {text!r}: must be positive")
    return value


def register_ops(
    app: typer.Typer,
    out: Console,
    call: Call,
    emit: Callable[[Output, Any], bool],
    gpu_table: Callable[[list[dict[str, Any]]], Table],
) -> None:
    @app.command()
    def health(
        gpu_id: Annotated[str, typer.Option("--gpu-id", help="The GPU: its UUID, or NODE:INDEX.")],
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Detailed health of one GPU: state, why, thermal flag, the job on it, its node."""
        rows = call(server, "GET", "/v1/gpus")
        try:
            node, index = resolve_gpu(gpu_id, lambda: rows)
        except ValueError as exc:
            raise fail(str(exc), EXIT["usage"]) from None
        except LookupError as exc:
            raise fail(str(exc), EXIT["not_found"]) from None
        found = [g for g in rows if g["node"] == node and g["index"] == index]
        if not found:
            raise fail(f"--gpu-id {gpu_id!r}: no such GPU", EXIT["not_found"])
        g = found[0]
        nodes = call(server, "GET", "/v1/nodes")
        n = next((x for x in nodes if x["name"] == node), None)
        if emit(output, {"gpu": g, "node": n}):
            return
        fields = [
            ("GPU", f"{g['node']}:{g['index']}"),
            ("UUID", g["uuid"]),
            ("Model", f"{g['vendor']} {g['model']}"),
            ("Memory", f"{g['memory_bytes'] / (1 << 30):.0f} GiB"),
            ("PCI", g["pci_bus_id"]),
            ("NUMA node", str(g["numa_node"])),
            ("State", g["state"]),
            ("Reason", g["reason"] or "-"),
            ("Thermal", "HOT: no new work" if g["hot"] else "ok"),
            ("Job", g["job_id"] or "-"),
            ("Node state", "-" if n is None else f"{n['state']} {n['reason']}".strip()),
        ]
        width = max(len(k) for k, _ in fields)
        for key, value in fields:
            out.print(f"{key + ':':<{width + 1}} {value}", soft_wrap=True)

    @app.command()
    def watch(
        interval: Annotated[str, typer.Option(help="Refresh period: 1s, 500ms, 2m.")] = "2s",
        count: Annotated[
            int, typer.Option(help="Stop after this many refreshes (0 = until Ctrl-C).")
        ] = 0,
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """Cluster status and every GPU, refreshed every --interval (JSON: one line each)."""
        try:
            period = parse_interval(interval)
        except ValueError as exc:
            raise fail(str(exc), EXIT["usage"]) from None

        def frame() -> tuple[dict[str, Any], list[dict[str, Any]]]:
            return call(server, "GET", "/v1/status"), call(server, "GET", "/v1/gpus")

        def render(s: dict[str, Any], gpus: list[dict[str, Any]]) -> Group:
            jobs = ", ".join(f"{k}={v}" for k, v in sorted(s["jobs_by_state"].items())) or "none"
            head = Text(
                f"{time.strftime('%H:%M:%S')}  GPUs {s['gpus_free']} free / {s['gpus_total']}"
                f"  nodes {s['nodes']}  jobs: {jobs}  (every {period:g}s, Ctrl-C to stop)"
            )
            return Group(head, gpu_table(gpus))

        shown = 0
        try:
            if output is Output.json:
                import json

                while count == 0 or shown < count:
                    s, gpus = frame()
                    out.print(json.dumps({**s, "gpus": gpus}), soft_wrap=True)
                    shown += 1
                    if count == 0 or shown < count:
                        time.sleep(period)
                return
            with Live(console=out, auto_refresh=False, transient=False) as live:
                while count == 0 or shown < count:
                    live.update(render(*frame()), refresh=True)
                    shown += 1
                    if count == 0 or shown < count:
                        time.sleep(period)
        except KeyboardInterrupt:
            return
