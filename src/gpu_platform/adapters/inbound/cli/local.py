"""Commands that run on this host through hooks the entry point provides (so the CLI never
imports outbound adapters): serve, agent, topology, simulate; their options and `CliHooks`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gpu_platform.adapters.inbound.cli.session import fail

__all__ = [
    "AgentOptions",
    "CliHooks",
    "ServeOptions",
    "SimulateOptions",
    "register_serve",
    "register_tools",
]


@dataclass(frozen=True)
class ServeOptions:
    host: str | None
    port: int | None
    data_dir: Path | None
    config: Path | None
    server_id: int | None = None
    peers: str | None = None
    grpc_port: int | None = None
    agent_port: int | None = None
    local_agent: bool | None = None
    join: bool | None = None
    raft_port: int | None = None
    api_workers: int | None = None


@dataclass(frozen=True)
class AgentOptions:
    """`gpu-platform agent`: the servers' agent addresses, this node's name and inventory
    (a simulated profile, else this host's discovery), its address for gang rendezvous, and
    where job logs live."""

    servers: tuple[str, ...]
    node: str | None
    sim_profile: str | None
    address: str | None
    data_dir: Path | None
    config: Path | None
    metrics_port: int | None = None
    fault_injection: bool | None = None  # None: the configuration's `fault_injection`


@dataclass(frozen=True)
class SimulateOptions:
    """`gpu-platform simulate`: protocol, openb node list, pod list, policies, seeds, output
    directory, demand inflation (1.3 = 130 %), worker processes, published means CSV (or the
    expected-results folder), PNG plots, no progress bar; arrivals protocol: GPU failures per
    GPU-hour and repair time in seconds, node failures per node-hour and node repair time in
    seconds, preemption exempt time in seconds (production's default 300)."""

    protocol: str
    cluster: Path
    trace: Path
    policies: tuple[str, ...]
    seeds: tuple[int, ...]
    out: Path
    tune: float = 1.3
    workers: int = 1
    expected: Path | None = None
    plots: bool = False
    quiet: bool = False
    fail_rate: float = 0.0
    repair_s: float = 3600.0
    node_fail_rate: float = 0.0
    node_repair_s: float = 3600.0
    preempt_exempt_s: float = 300.0


@dataclass(frozen=True)
class CliHooks:
    """What the entry point provides: `serve` runs the server until a signal stops it;
    `topology(node, xml, as_json)` renders this host's (or an XML's) topology, raising
    ValueError-like errors whose message is the one line to print; `simulate(options)` runs
    a trace-driven placement simulation, writes its files and returns the table to print
    (same error contract)."""

    serve: Callable[[ServeOptions], None]
    topology: Callable[[str | None, str | None, bool], str]
    simulate: Callable[[SimulateOptions], str] | None = None
    agent: Callable[[AgentOptions], None] | None = None


def register_serve(app: typer.Typer, hooks: CliHooks) -> None:
    """Add `serve` and `agent` to `app`."""

    @app.command()
    def serve(
        host: Annotated[
            str | None, typer.Option(help="Listen address [env GPU_PLATFORM_HOST].")
        ] = None,
        port: Annotated[
            int | None,
            typer.Option(
                help="REST port, 0 = any free (<data_dir>/ports.json) [env GPU_PLATFORM_PORT]."
            ),
        ] = None,
        data_dir: Annotated[
            Path | None, typer.Option(help="State directory [env GPU_PLATFORM_DATA_DIR].")
        ] = None,
        config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
        server_id: Annotated[
            int | None,
            typer.Option(
                "--id", help="Raft id of this server in --peers [env GPU_PLATFORM_SERVER_ID]."
            ),
        ] = None,
        peers: Annotated[
            str | None,
            typer.Option(
                help="Raft voters id=host:port,... (replicated mode) [env GPU_PLATFORM_PEERS]."
            ),
        ] = None,
        grpc_port: Annotated[int | None, typer.Option(help="gRPC API port.")] = None,
        agent_port: Annotated[int | None, typer.Option(help="Agents' stream port.")] = None,
        local_agent: Annotated[
            bool | None,
            typer.Option("--local-agent/--no-local-agent", help="Also run an agent for this host."),
        ] = None,
        join: Annotated[
            bool | None,
            typer.Option("--join", help="Join a running cluster (then `cluster add-server`)."),
        ] = None,
        raft_port: Annotated[
            int | None,
            typer.Option(help="Raft port of a one-voter cluster (no --peers); 0 = any free."),
        ] = None,
        api_workers: Annotated[
            int | None,
            typer.Option(
                help="Processes that serve the gRPC port beside the server (docs/operations.md) "
                "[env GPU_PLATFORM_API_WORKERS]."
            ),
        ] = None,
    ) -> None:
        """Run the control plane: alone, a one-voter Raft cluster whose agent runs in this
        process; with --id/--peers, one server of a replicated cluster (jobs run on agents)."""
        hooks.serve(
            ServeOptions(
                host,
                port,
                data_dir,
                config,
                server_id,
                peers,
                grpc_port,
                agent_port,
                local_agent,
                join,
                raft_port,
                api_workers,
            )
        )

    @app.command()
    def agent(
        servers: Annotated[
            str, typer.Option(help="Servers' agent addresses host:port[,host:port...].")
        ],
        node: Annotated[
            str | None,
            typer.Option(help="Node name (a simulated profile's node; default: host name)."),
        ] = None,
        sim_profile: Annotated[
            str | None, typer.Option(help="Register a simulated node of this profile.")
        ] = None,
        address: Annotated[
            str | None, typer.Option(help="This node's address for gang rendezvous (MASTER_ADDR).")
        ] = None,
        data_dir: Annotated[
            Path | None, typer.Option(help="Where job logs live [env GPU_PLATFORM_DATA_DIR].")
        ] = None,
        config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
        metrics_port: Annotated[
            int | None,
            typer.Option(
                help="Serve /metrics (dcgm-exporter names, agent series) on this port "
                "(0: any free one, written to <data_dir>/ports.json)."
            ),
        ] = None,
        fault_injection: Annotated[
            bool | None,
            typer.Option(
                "--fault-injection/--no-fault-injection",
                help="Take `debug inject` scripts from the leader into this node's simulated "
                "hardware [default: the configuration's fault_injection].",
            ),
        ] = None,
    ) -> None:
        """Run a node agent: register this node with the cluster's leader and run its jobs."""
        if hooks.agent is None:
            raise fail("agent: not available in this build")
        names = tuple(s.strip() for s in servers.split(",") if s.strip())
        if not names:
            raise fail("--servers: give at least one host:port", 2)
        hooks.agent(
            AgentOptions(
                names, node, sim_profile, address, data_dir, config, metrics_port, fault_injection
            )
        )


def register_tools(app: typer.Typer, hooks: CliHooks) -> None:
    """Add `topology` and `simulate` to `app`."""

    @app.command()
    def topology(
        node: Annotated[str | None, typer.Option(help="Only this node.")] = None,
        xml: Annotated[str | None, typer.Option(help="Read an hwloc XML file instead.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    ) -> None:
        """This host's topology (or an hwloc XML's): tree, GPU x GPU matrix, GPU-NIC affinity."""
        try:
            text = hooks.topology(node, xml, as_json)
        except Exception as exc:  # the hook's errors are one-line reasons by contract
            raise fail(str(exc)) from None
        sys.stdout.write(text if text.endswith("\n") else text + "\n")

    @app.command()
    def simulate(
        cluster: Annotated[
            Path,
            typer.Option(help="Node list CSV (openb format); arrivals also: a profile like 32x8."),
        ],
        trace: Annotated[
            Path,
            typer.Option(
                help="Pod list CSV (openb format); arrivals also: generate[:n=2000,load=1.1]."
            ),
        ],
        out: Annotated[Path, typer.Option(help="Output directory (summary.json, curves).")],
        protocol: Annotated[str, typer.Option(help="Evaluation protocol: fgd, arrivals.")] = "fgd",
        policy: Annotated[
            str,
            typer.Option(
                help="Comma-separated policies: default (ours: the placement engine's "
                "place(): fragmentation + best fit + CPU-stranding), sim-default (the same "
                "rule restated in the simulator), "
                "fgd, bestfit, packing, dotprod, random. Arrivals: fifo, priority, drf, "
                "backfill, preempt (default = all five)."
            ),
        ] = "default",
        seeds: Annotated[str, typer.Option(help="Comma-separated seeds.")] = "42",
        tune: Annotated[float, typer.Option(help="Inflate demand to this x capacity.")] = 1.3,
        workers: Annotated[int, typer.Option(help="Worker processes.")] = 1,
        expected: Annotated[
            Path | None,
            typer.Option(
                help="Published means CSV to print beside ours, or the expected-results "
                "folder (its per-seed curves are drawn under --plots)."
            ),
        ] = None,
        plots: Annotated[
            bool,
            typer.Option(
                "--plots",
                help="Also write PNG plots to OUT (needs matplotlib: "
                "pip install 'gpu-platform[sim]').",
            ),
        ] = False,
        quiet: Annotated[
            bool, typer.Option("--quiet", help="No progress bar (it shows only on a terminal).")
        ] = False,
        fail_rate: Annotated[
            float, typer.Option(help="Arrivals: GPU failures per GPU-hour (Poisson, seeded).")
        ] = 0.0,
        repair_s: Annotated[
            float, typer.Option(help="Arrivals: seconds until a failed GPU is back.")
        ] = 3600.0,
        node_fail_rate: Annotated[
            float,
            typer.Option(help="Arrivals: node failures per node-hour (all its GPUs; seeded)."),
        ] = 0.0,
        node_repair_s: Annotated[
            float, typer.Option(help="Arrivals: seconds until a failed node is back.")
        ] = 3600.0,
        preempt_exempt_s: Annotated[
            float,
            typer.Option(
                help="Arrivals: a job is never a preemption victim before it has run this "
                "long (production's scheduler_preempt_exempt_seconds)."
            ),
        ] = 300.0,
    ) -> None:
        """Trace-driven simulation: the FGD placement protocol (USENIX ATC '23) or arrivals and
        departures through the scheduler; means over seeds, written to OUT/summary.json."""
        if hooks.simulate is None:
            raise fail("simulate is not available in this build")
        try:
            options = SimulateOptions(
                protocol=protocol,
                cluster=cluster,
                trace=trace,
                policies=tuple(p.strip() for p in policy.split(",") if p.strip()),
                seeds=tuple(int(s) for s in seeds.split(",") if s.strip()),
                out=out,
                tune=tune,
                workers=max(1, workers),
                expected=expected,
                plots=plots,
                quiet=quiet,
                fail_rate=fail_rate,
                repair_s=repair_s,
                node_fail_rate=node_fail_rate,
                node_repair_s=node_repair_s,
                preempt_exempt_s=preempt_exempt_s,
            )
            text = hooks.simulate(options)
        except Exception as exc:  # the hook's errors are one-line reasons by contract
            raise fail(escape(str(exc))) from None  # escape: "[sim]" is not rich markup
        sys.stdout.write(text)
