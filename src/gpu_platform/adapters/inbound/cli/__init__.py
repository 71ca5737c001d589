"""The `gpu-platform` command line (typer + rich)."""

from gpu_platform.adapters.inbound.cli.app import (
    AgentOptions,
    CliHooks,
    ServeOptions,
    SimulateOptions,
    build_cli,
)

__all__ = ["AgentOptions", "CliHooks", "ServeOptions", "SimulateOptions", "build_cli"]
