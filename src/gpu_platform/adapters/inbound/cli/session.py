"""What every client command shares: the token and CA from the root options, `-o`, failing,
how a time is shown."""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass
from typing import Annotated

import typer
from rich.console import Console

from gpu_platform.adapters.inbound.cli.client import ApiClient

__all__ = ["Output", "OutputOpt", "Session", "fail", "when"]


class Output(enum.StrEnum):
    table = "table"
    json = "json"


OutputOpt = Annotated[
    Output,
    typer.Option(
        "--output", "-o", help="table for people, json for scripts.", case_sensitive=False
    ),
]


@dataclass
class Session:
    token: str | None = None
    cacert: str | None = None

    def client(self, server: str, timeout: float | None = 30.0) -> ApiClient:
        return ApiClient(server, timeout=timeout, token=self.token, cacert=self.cacert)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print `error: message` on stderr; the caller raises the returned Exit(code)."""
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def when(ts: float | None) -> str:
    """A Unix time as `YYYY-MM-DD HH:MM:SS UTC`; None as `-`."""
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
