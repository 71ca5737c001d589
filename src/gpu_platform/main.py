"""Entry point: the `gpu-platform` console script. Wires the CLI to the composition root.

The hooks import the composition root only when a command that needs it runs (`serve`,
`agent`, `topology`, `simulate`): a client command such as `jobs list` or `--help` loads
the CLI and its HTTP client alone, and a plain `submit` not even typer, pydantic or rich
(`cli.fast`; tests/unit/adapters/test_cli_startup.py checks the import graph).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpu_platform.adapters.inbound.cli import AgentOptions, ServeOptions, SimulateOptions

__all__ = ["main"]


def _serve(options: ServeOptions) -> None:
    from gpu_platform.infrastructure.server import serve

    serve(options)


def _topology(node: str | None, xml: str | None, as_json: bool) -> str:
    from gpu_platform.infrastructure.server import topology

    return topology(node, xml, as_json)


def _simulate(options: SimulateOptions) -> str:
    from gpu_platform.infrastructure.simulate import simulate_command

    return simulate_command(options)


def _agent(options: AgentOptions) -> None:
    from gpu_platform.infrastructure.agent_main import run_agent

    run_agent(options)


def main() -> None:
    import os
    import sys

    from gpu_platform.adapters.inbound.cli.fast import fast_submit

    code = fast_submit(sys.argv[1:], os.environ)  # a plain submit, without typer
    if code is not None:
        raise SystemExit(code)
    from gpu_platform.adapters.inbound.cli import CliHooks, build_cli

    hooks = CliHooks(serve=_serve, topology=_topology, simulate=_simulate, agent=_agent)
    build_cli(hooks)()


if __name__ == "__main__":
    main()
