"""`gpu-platform`: serve, submit, jobs list|describe|logs|cancel|kill, gpus, status, usage, and
the commands of `cli.admin` (nodes, drain|offline|online, audit, debug inject), `cli.ops`
(health, watch) and `cli.access` (whoami, tokens, tenants). `-o json` on every client command;
exit codes in `cli.client` (docs/cli.md). `--token`/GPU_PLATFORM_TOKEN authenticates.

The CLI is an inbound adapter: client commands talk to a server over HTTP; `serve` (and other
commands that need local adapters) call hooks that the entry point (`gpu_platform.main`) wires
from the composition root, so this module never imports outbound adapters.

This module builds the app and its shared pieces (the root options, `call`, `emit`); the
commands live in `cli.local` (serve, agent, topology, simulate), `cli.submit`, `cli.jobs`,
`cli.overview` (gpus, usage, status) and the other `cli.*` modules registered below.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from gpu_platform.adapters.inbound.cli.access import register_access
from gpu_platform.adapters.inbound.cli.admin import register_admin
from gpu_platform.adapters.inbound.cli.certs import register_certs
from gpu_platform.adapters.inbound.cli.client import ApiError
from gpu_platform.adapters.inbound.cli.cluster import register_cluster
from gpu_platform.adapters.inbound.cli.jobs import register_jobs
from gpu_platform.adapters.inbound.cli.local import (
    AgentOptions,
    CliHooks,
    ServeOptions,
    SimulateOptions,
    register_serve,
    register_tools,
)
from gpu_platform.adapters.inbound.cli.ops import register_ops
from gpu_platform.adapters.inbound.cli.overview import gpu_table, parse_when, register_overview
from gpu_platform.adapters.inbound.cli.run_as import register_run_as
from gpu_platform.adapters.inbound.cli.services import register_services
from gpu_platform.adapters.inbound.cli.session import Output, Session, fail
from gpu_platform.adapters.inbound.cli.submit import parse_duration, parse_size, register_submit

__all__ = [
    "AgentOptions",
    "CliHooks",
    "ServeOptions",
    "SimulateOptions",
    "build_cli",
    "console",
    "parse_duration",
    "parse_size",
    "parse_when",
]


def console() -> Console:
    """Where the commands print. Off a terminal (pipes, CI logs) rich would squeeze tables
    into 80 columns; COLUMNS wins."""
    wide = sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()
    return Console(highlight=False, width=None if wide else 220)


def build_cli(hooks: CliHooks) -> typer.Typer:
    app = typer.Typer(
        name="gpu-platform",
        help="Data-center GPU cluster manager.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=True,
    )
    jobs = typer.Typer(help="List, describe, follow and cancel jobs.", no_args_is_help=True)
    app.add_typer(jobs, name="jobs")
    out = console()

    session = Session()

    @app.callback()
    def root(
        token: Annotated[
            str | None,
            typer.Option(
                "--token",
                envvar="GPU_PLATFORM_TOKEN",
                help="Bearer token (from `gpu-platform tokens create`).",
                show_default=False,
            ),
        ] = None,
        cacert: Annotated[
            str | None,
            typer.Option(
                "--cacert",
                envvar="GPU_PLATFORM_CA_FILE",
                help="CA bundle for an https:// server (default: system roots).",
            ),
        ] = None,
    ) -> None:
        """Data-center GPU cluster manager."""
        session.token, session.cacert = token, cacert

    def call(server: str, method: str, path: str, **kwargs: Any) -> Any:
        try:
            return session.client(server).json(method, path, **kwargs)
        except ApiError as exc:
            raise fail(str(exc), exc.exit_code) from None

    def emit(output: Output, data: Any) -> bool:
        """Print `data` as JSON when asked; True if done (else the caller draws a table)."""
        if output is Output.json:
            sys.stdout.write(json.dumps(data, indent=2) + "\n")
            return True
        return False

    register_serve(app, hooks)
    register_submit(app, out, call, emit, session)
    register_jobs(jobs, out, call, emit, session)
    register_tools(app, hooks)
    register_overview(app, out, call, emit)
    register_admin(app, out, call, emit)
    register_ops(app, out, call, emit, gpu_table)
    register_access(app, out, call, emit)
    register_run_as(app, out, call, emit)
    register_cluster(app, out, call, emit)
    register_services(app, out, call, emit)
    register_certs(app, out)
    return app
