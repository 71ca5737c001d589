"""The `gpu-platform` command line (typer + rich)."""

from gpu_platform.adapters.inbound.cli.app import CliHooks, ServeOptions, SimulateOptions, build_cli

__all__ = ["CliHooks", "ServeOptions", "SimulateOptions", "build_cli"]
