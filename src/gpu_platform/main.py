"""Entry point: the `gpu-platform` console script. Wires the CLI to the composition root."""

from __future__ import annotations

__all__ = ["main"]


def main() -> None:
    from gpu_platform.adapters.inbound.cli import CliHooks, build_cli
    from gpu_platform.infrastructure.agent_main import run_agent
    from gpu_platform.infrastructure.server import serve, topology
    from gpu_platform.infrastructure.simulate import simulate_command

    hooks = CliHooks(serve=serve, topology=topology, simulate=simulate_command, agent=run_agent)
    build_cli(hooks)()


if __name__ == "__main__":
    main()
