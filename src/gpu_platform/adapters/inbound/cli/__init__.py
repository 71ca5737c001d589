"""The `gpu-platform` command line (typer + rich).

The names below load `cli.app` (and with it typer, pydantic and rich) on first use, not when
the package is imported: `cli.fast` runs a plain `submit` without them (docs/performance.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpu_platform.adapters.inbound.cli.app import (
        AgentOptions,
        CliHooks,
        ServeOptions,
        SimulateOptions,
        build_cli,
    )

__all__ = ["AgentOptions", "CliHooks", "ServeOptions", "SimulateOptions", "build_cli"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gpu_platform.adapters.inbound.cli import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
