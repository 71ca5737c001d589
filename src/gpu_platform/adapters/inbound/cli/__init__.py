"""The `gpu-platform` command line (typer + rich)."""

from gpu_platform.adapters.inbound.cli.app import CliHooks, ServeOptions, build_cli

__all__ = ["CliHooks", "ServeOptions", "build_cli"]
