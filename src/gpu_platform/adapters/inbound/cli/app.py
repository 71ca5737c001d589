"""`gpu-platform`: serve, submit, jobs list|describe|logs|cancel|kill, gpus, status, usage, and
the commands of `cli.admin` (nodes, drain|offline|online, audit, debug inject), `cli.ops`
(health, watch) and `cli.access` (whoami, tokens, tenants). `-o json` on every client command;
exit codes in `cli.client` (docs/cli.md). `--token`/GPU_PLATFORM_TOKEN authenticates.

The CLI is an inbound adapter: client commands talk to a server over HTTP; `serve` (and other
commands that need local adapters) call hooks that the entry point (`gpu_platform.main`) wires
from the composition root, so this module never imports outbound adapters.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpu_platform.adapters.inbound.cli.access import register_access
from gpu_platform.adapters.inbound.cli.admin import DEFAULT_SERVER, ServerOpt, register_admin
from gpu_platform.adapters.inbound.cli.arrays import array_fields, group_pending_tasks
from gpu_platform.adapters.inbound.cli.certs import register_certs
from gpu_platform.adapters.inbound.cli.client import EXIT, ApiError
from gpu_platform.adapters.inbound.cli.cluster import register_cluster
from gpu_platform.adapters.inbound.cli.jobs_view import jobs_table
from gpu_platform.adapters.inbound.cli.ops import register_ops
from gpu_platform.adapters.inbound.cli.run_as import register_run_as
from gpu_platform.adapters.inbound.cli.services import register_services
from gpu_platform.adapters.inbound.cli.session import Output, OutputOpt, Session, fail
from gpu_platform.adapters.inbound.cli.sharing_opts import (
    gpus_text,
    share_body,
    share_cell,
    shared_text,
)

__all__ = [
    "AgentOptions",
    "CliHooks",
    "ServeOptions",
    "SimulateOptions",
    "build_cli",
    "parse_duration",
    "parse_size",
    "parse_when",
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


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """'4G' -> 4 GiB in bytes; plain numbers are bytes."""
    raw = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = raw[-1:] if raw[-1:] in _UNITS else ""
    number = raw[: len(raw) - len(unit)]
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise ValueError(f"--memory {text!r}: expected a size like 512M or 4G") from None
    if value <= 0:
        raise ValueError(f"--memory {text!r}: must be positive")
    return int(value)


def parse_duration(text: str) -> float:
    """'90' -> 90 s; '01:30' -> 90 s; '1:00:00' -> 3600 s."""
    parts = text.strip().split(":")
    try:
        if len(parts) > 3:
            raise ValueError
        seconds = 0.0
        for part in parts:
            seconds = seconds * 60 + float(part)
    except ValueError:
        raise ValueError(f"--time-limit {text!r}: expected SECONDS or [HH:]MM:SS") from None
    fields = [float(p) for p in parts]
    if not all(math.isfinite(f) and f >= 0 for f in fields):
        raise ValueError(f"--time-limit {text!r}: each field must be a finite number >= 0")
    if len(fields) > 1 and any(f >= 60 for f in fields[1:]):
        raise ValueError(f"--time-limit {text!r}: minutes and seconds must be below 60")
    if seconds <= 0:
        raise ValueError(f"--time-limit {text!r}: must be positive")
    return seconds


_SPANS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_when(text: str, now: float) -> float:
    """'24h' / '-24h' / '7d' -> that long before `now`; an ISO date-time -> its Unix time."""
    raw = text.strip()
    span = raw.lstrip("-")
    if span[-1:] in _SPANS:
        try:
            return now - float(span[:-1]) * _SPANS[span[-1]]
        except ValueError:
            pass
    try:
        moment = dt.datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(f"{text!r}: expected a span like 24h or 7d, or an ISO date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


_fail = fail


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class Affinity(StrEnum):
    """How hard a placement wish is."""

    none = "none"
    preferred = "preferred"
    required = "required"


def _pending(job: dict[str, Any]) -> str:
    """Why a QUEUED job waits: `code: message` (from the last scheduling cycle)."""
    p = job.get("pending")
    if not p:
        return "-"
    return f"{p['code']}: {p['message']}"


def _gpus_of(job: dict[str, Any]) -> str:
    a = job.get("allocation")
    if not a:
        return "-"
    tasks = a.get("tasks") or [a]
    return " ".join(f"{t['node']}:{','.join(str(i) for i in t['gpu_indices'])}" for t in tasks)


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
    # Off a terminal (pipes, CI logs) rich would squeeze tables into 80 columns; COLUMNS wins.
    wide = sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()
    out = Console(highlight=False, width=None if wide else 220)

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
            raise _fail(str(exc), exc.exit_code) from None

    def job_or_array(server: str, method: str, job_id: str, suffix: str = "") -> tuple[Any, bool]:
        """(the job's JSON, False), or for an array id (array's JSON, True)."""
        try:
            return session.client(server).json(method, f"/v1/jobs/{job_id}{suffix}"), False
        except ApiError as exc:
            if exc.exit_code != EXIT["not_found"]:
                raise _fail(str(exc), exc.exit_code) from None
            try:
                return session.client(server).json(method, f"/v1/arrays/{job_id}{suffix}"), True
            except ApiError:
                raise _fail(str(exc), exc.exit_code) from None

    def emit(output: Output, data: Any) -> bool:
        """Print `data` as JSON when asked; True if done (else the caller draws a table)."""
        if output is Output.json:
            sys.stdout.write(json.dumps(data, indent=2) + "\n")
            return True
        return False

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
            raise _fail("agent: not available in this build")
        names = tuple(s.strip() for s in servers.split(",") if s.strip())
        if not names:
            raise _fail("--servers: give at least one host:port", 2)
        hooks.agent(
            AgentOptions(
                names, node, sim_profile, address, data_dir, config, metrics_port, fault_injection
            )
        )

    @app.command(context_settings={"allow_interspersed_args": False})
    def submit(
        command: Annotated[list[str], typer.Argument(help="The program and its arguments.")],
        gpus: Annotated[
            str, typer.Option(help="GPUs per task: whole (2) or a share of one GPU (0.25).")
        ] = "0",
        gpu_memory: Annotated[
            str | None,
            typer.Option(help="A share's pinned GPU memory (MPS limit), e.g. 10G."),
        ] = None,
        cpus: Annotated[str | None, typer.Option(help="CPUs per task, e.g. 4 or 0.5.")] = None,
        vendor: Annotated[str | None, typer.Option(help="GPU vendor: nvidia, amd, intel.")] = None,
        sharing: Annotated[
            str | None,
            typer.Option(help="A share runs under mps or timeslice (default: mps on NVIDIA)."),
        ] = None,
        tasks: Annotated[
            int, typer.Option(help="Tasks of a gang: all start together (RANK, WORLD_SIZE...).")
        ] = 1,
        name: Annotated[str, typer.Option(help="A name for humans.")] = "",
        env: Annotated[
            list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE, repeatable.")
        ] = None,
        priority: Annotated[int, typer.Option(help="Higher runs first.")] = 0,
        preemptible: Annotated[
            bool,
            typer.Option(
                "--preemptible/--no-preemptible", help="May be re-queued for higher priority."
            ),
        ] = True,
        after: Annotated[
            list[str] | None,
            typer.Option("--after", help="Start only after this job COMPLETED (repeatable)."),
        ] = None,
        gpu_model: Annotated[
            list[str] | None,
            typer.Option(
                "--gpu-model", help="Accepted GPU model, as `gpus` lists it (repeatable)."
            ),
        ] = None,
        mig: Annotated[
            str | None,
            typer.Option(
                "--mig", help="One MIG instance of this profile (e.g. 1g.10gb); implies --gpus 1."
            ),
        ] = None,
        nvlink: Annotated[
            Affinity, typer.Option(help="GPUs of a task all NVLink-connected.")
        ] = Affinity.preferred,
        numa: Annotated[Affinity, typer.Option(help="GPUs of a task on one NUMA node.")] = (
            Affinity.preferred
        ),
        same_rack: Annotated[
            Affinity, typer.Option(help="Nodes of a gang under one rack label.")
        ] = Affinity.preferred,
        tenant: Annotated[str | None, typer.Option(help="Default: your token's tenant.")] = None,
        cwd: Annotated[str | None, typer.Option(help="Working directory on the node.")] = None,
        image: Annotated[
            str | None,
            typer.Option(help="Run the command in this container image (the node's runtime)."),
        ] = None,
        mount: Annotated[
            list[str] | None,
            typer.Option(
                "--mount", help="HOST:CONTAINER[:ro] bind mount, with --image (repeatable)."
            ),
        ] = None,
        memory: Annotated[
            str | None, typer.Option(help="Host memory cap, e.g. 512M, 4G (binary units).")
        ] = None,
        time_limit: Annotated[
            str | None, typer.Option(help="Run-time limit per attempt: SECONDS or [HH:]MM:SS.")
        ] = None,
        user: Annotated[str | None, typer.Option(help="Run as this account on the node.")] = None,
        max_attempts: Annotated[
            int,
            typer.Option(
                help="Faults (GPU, XID, node loss) before the job ends FAILED; preemptions "
                "and restarts do not count."
            ),
        ] = 3,
        retry_backoff: Annotated[
            float, typer.Option(help="Seconds before a re-queued attempt, doubled per attempt.")
        ] = 0.0,
        array: Annotated[
            str | None,
            typer.Option(
                "--array",
                "-a",
                help="A job array, Slurm's syntax: 0-999, 1,3,5, 0-15:4, then %N to run at "
                "most N tasks at once. Each task gets ARRAY_TASK_ID (and SLURM_ARRAY_TASK_ID).",
            ),
        ] = None,
        server: ServerOpt = DEFAULT_SERVER,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the id.")] = False,
        wait: Annotated[
            bool, typer.Option("--wait", help="Wait (with a spinner) until the job has ended.")
        ] = False,
        output: OutputOpt = Output.table,
    ) -> None:
        """Submit a job: gpu-platform submit --gpus 2 -- python3 train.py --epochs 3"""
        env_map: dict[str, str] = {}
        for item in env or []:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise _fail(f"--env {item!r}: expected KEY=VALUE", 2)
            env_map[key] = value
        try:
            shares = share_body(gpus, gpu_memory, cpus, vendor, sharing)
        except ValueError as exc:
            raise _fail(str(exc), 2) from None
        if mig is not None and shares["gpus"] == 0:
            shares["gpus"] = 1  # a MIG job holds one GPU; any other count is refused by the server
        body: dict[str, Any] = {
            "command": command,
            **shares,
            "tasks": tasks,
            "preemptible": preemptible,
            "depends_on": after or [],
            "gpu_models": gpu_model or [],
            "nvlink": nvlink.value,
            "numa": numa.value,
            "same_rack": same_rack.value,
            "mig_profile": mig,
            "name": name,
            "env": env_map,
            "priority": priority,
            "tenant": tenant,
            "cwd": cwd,
            "user": user,
            "max_attempts": max_attempts,
            "retry_backoff_s": retry_backoff,
        }
        if image is not None or mount:
            body.update(image=image, mounts=mount or [])
        try:
            if memory is not None:
                body["memory_bytes"] = parse_size(memory)
            if time_limit is not None:
                body["time_limit_s"] = parse_duration(time_limit)
        except ValueError as exc:
            raise _fail(str(exc), 2) from None
        if array is not None:
            made = call(server, "POST", "/v1/arrays", json={**body, "array": array})
            made = wait_array(server, made["id"]) if wait else made
            if not emit(output, made):
                line = f"submitted array {made['id']}: {made['count']} tasks ({made['array']})"
                out.print(made["id"] if quiet else line)
            return
        try:
            job = session.client(server).submit(body)
        except ApiError as exc:
            raise _fail(str(exc), exc.exit_code) from None
        if wait:
            job = wait_job(server, job["id"])
        if not emit(output, job):
            out.print(job["id"] if quiet else f"submitted {job['id']} ({job['state']})")
        if wait and job["state"] != "COMPLETED":  # as srun: the job's failure is the exit status
            code = job.get("exit_code")
            raise typer.Exit(code if isinstance(code, int) and 0 < code < 256 else 1)

    def wait_job(server: str, job_id: str) -> Any:
        """Poll until the job has ended, with a spinner on a terminal."""

        terminal = {"COMPLETED", "FAILED", "CANCELLED"}
        with out.status(f"waiting for {job_id}...", spinner="dots"):
            while True:
                job = call(server, "GET", f"/v1/jobs/{job_id}")
                if job["state"] in terminal:
                    return job
                time.sleep(0.5)

    def wait_array(server: str, array_id: str) -> Any:
        """Poll until every task of the array has ended."""
        import time

        with out.status(f"waiting for array {array_id}...", spinner="dots"):
            while True:
                a = call(server, "GET", f"/v1/arrays/{array_id}")
                ended = sum(a["tasks_by_state"].get(s, 0) for s in ("COMPLETED", "FAILED"))
                if ended + a["tasks_by_state"].get("CANCELLED", 0) == a["count"]:
                    return a
                time.sleep(0.5)

    @jobs.command("list")
    def jobs_list(
        state: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
        tenant: Annotated[str | None, typer.Option(help="Only this tenant's jobs.")] = None,
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """All jobs you may see (your tenant's; every tenant's for operators), oldest first."""
        params = {"state": state.upper()} if state else {}
        if tenant:
            params["tenant"] = tenant
        rows = call(server, "GET", "/v1/jobs", params=params)
        if emit(output, rows):
            return
        out.print(jobs_table(group_pending_tasks(rows), time.time(), max(80, out.width)))

    @jobs.command("describe")
    def jobs_describe(
        job_id: Annotated[str, typer.Argument(metavar="ID")],
        server: ServerOpt = DEFAULT_SERVER,
        tail: Annotated[int, typer.Option(help="Bytes of output to show.")] = 4096,
        output: OutputOpt = Output.table,
    ) -> None:
        """Everything about one job (GPUs, NUMA placement, history), with its output's tail;
        for a job array's id, the array (its tasks by state)."""
        j, is_array = job_or_array(server, "GET", job_id)
        if emit(output, j):
            return
        if is_array:
            for key, value in array_fields(j):
                out.print(f"{key + ':':<15} {value}", soft_wrap=True)
            return
        a = j["allocation"]
        fields = [
            ("ID", j["id"]),
            ("Name", j["name"] or "-"),
            ("State", j["state"]),
            ("Reason", j["reason"] or "-"),
            ("Waiting", _pending(j)),
            ("Priority", f"{j['priority']}" + ("" if j["preemptible"] else " (not preemptible)")),
            ("Depends on", ", ".join(j["depends_on"]) or "-"),
            ("Command", " ".join(j["command"])),
            (
                "GPUs requested",
                gpus_text(j, detail=True)
                + (f" x {j['tasks']} tasks" if j["tasks"] > 1 else "")
                + (f" (one MIG {j['mig_profile']} instance)" if j.get("mig_profile") else ""),
            ),
            ("Memory cap", "-" if j["memory_bytes"] is None else f"{j['memory_bytes']} bytes"),
            ("Time limit", "-" if j["time_limit_s"] is None else f"{j['time_limit_s']:g}s"),
            ("Tenant", j["tenant"]),
            ("User", j["user"] or "-"),
            ("Tasks", _gpus_of(j) if a and len(a["tasks"]) > 1 else "-"),
            ("Node", a["node"] if a else "-"),
            ("GPU indices", ",".join(map(str, a["gpu_indices"])) if a else "-"),
            ("GPU UUIDs", ",".join(a["gpu_uuids"]) if a else "-"),
            ("NUMA nodes", ",".join(map(str, a["numa_nodes"])) if a else "-"),
            ("Attempt", str(j["attempt"])),
            ("Faults", f"{j.get('faults', 0)} of at most {j['max_attempts']}"),
            ("Interruptions", f"{j.get('interruptions', 0)} (preemptions, restarts, not counted)"),
            ("Exit code", "-" if j["exit_code"] is None else str(j["exit_code"])),
            ("Submitted", _when(j["submitted_at"])),
            ("Started", _when(j["started_at"])),
            ("Finished", _when(j["finished_at"])),
        ]
        width = max(len(k) for k, _ in fields)
        for key, value in fields:
            out.print(f"{key + ':':<{width + 1}} {value}", soft_wrap=True)
        out.print("History:")
        for h in j["history"]:
            out.print(f"  {_when(h['at'])}  {h['state']:<10} {h['reason']}", soft_wrap=True)
        if j["attempt"]:
            try:
                text = (
                    session.client(server)
                    .request("GET", f"/v1/jobs/{job_id}/logs", params={"tail_bytes": tail})
                    .text
                )
            except ApiError as exc:
                raise _fail(str(exc), exc.exit_code) from None
            out.print(f"Output (attempt {j['attempt']}):")
            sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")

    @jobs.command("logs")
    def jobs_logs(
        job_id: Annotated[str, typer.Argument(metavar="ID")],
        attempt: Annotated[
            int | None, typer.Option(help="Attempt number (default: latest).")
        ] = None,
        follow: Annotated[
            bool, typer.Option("--follow", "-f", help="Keep printing until the attempt ends.")
        ] = False,
        rank: Annotated[int, typer.Option(help="Which task of a gang (default: rank 0).")] = 0,
        server: ServerOpt = DEFAULT_SERVER,
    ) -> None:
        """Print a job's output (combined stdout and stderr)."""
        params: dict[str, Any] = {"tail_bytes": 16 << 20, "rank": rank}
        if attempt is not None:
            params["attempt"] = attempt
        try:
            client = session.client(server, timeout=None if follow else 30.0)
            if follow:
                params["follow"] = "true"
                for chunk in client.stream("GET", f"/v1/jobs/{job_id}/logs", params=params):
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
                return
            text = client.request("GET", f"/v1/jobs/{job_id}/logs", params=params).text
        except ApiError as exc:
            raise _fail(str(exc), exc.exit_code) from None
        sys.stdout.write(text)

    @jobs.command("cancel")
    def jobs_cancel(
        job_id: Annotated[str, typer.Argument(metavar="ID")],
        server: ServerOpt = DEFAULT_SERVER,
        wait: Annotated[bool, typer.Option("--wait", help="Wait until it has stopped.")] = False,
        output: OutputOpt = Output.table,
    ) -> None:
        """Cancel a job (graceful): SIGTERM, then SIGKILL after the server's grace period.
        An array's id cancels every task of it; `ARRAY_7` cancels task 7 alone."""
        j, is_array = job_or_array(server, "POST", job_id, "/cancel")
        if is_array:
            j = wait_array(server, job_id) if wait else j
            if not emit(output, j):
                out.print(f"{j['id']} cancelled: {j['tasks_by_state']}")
            return
        j = wait_job(server, job_id) if wait else j
        if not emit(output, j):
            out.print(f"{j['id']} {j['state']}")

    @jobs.command("kill")
    def jobs_kill(
        job_id: Annotated[str, typer.Argument(metavar="ID")],
        server: ServerOpt = DEFAULT_SERVER,
        wait: Annotated[bool, typer.Option("--wait", help="Wait until it has stopped.")] = False,
        output: OutputOpt = Output.table,
    ) -> None:
        """Kill a job now (SIGKILL, no grace period)."""
        j = call(server, "POST", f"/v1/jobs/{job_id}/kill")
        j = wait_job(server, job_id) if wait else j
        if not emit(output, j):
            out.print(f"{j['id']} {j['state']}")

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
            raise _fail(str(exc)) from None
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
            raise _fail("simulate is not available in this build")
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
            raise _fail(escape(str(exc))) from None  # escape: "[sim]" is not rich markup
        sys.stdout.write(text)

    @app.command()
    def gpus(server: ServerOpt = DEFAULT_SERVER, output: OutputOpt = Output.table) -> None:
        """Every GPU with its state and the job holding it."""
        rows = call(server, "GET", "/v1/gpus")
        if emit(output, rows):
            return
        out.print(gpu_table(rows))

    def gpu_table(rows: list[dict[str, Any]]) -> Table:
        table = Table("NODE", "IDX", "MODEL", "MEMORY", "NUMA", "STATE", "JOB", "UUID", "REASON")
        for g in rows:
            table.add_row(
                g["node"],
                str(g["index"]),
                g["model"],
                f"{g['memory_bytes'] / (1 << 30):.0f} GiB",
                str(g["numa_node"]),
                g["state"] + (" (hot)" if g["hot"] else ""),
                share_cell(g),
                g["uuid"],
                g["reason"] or "-",
            )
        return table

    @app.command()
    def usage(
        tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
        since: Annotated[
            str | None, typer.Option(help="Window start: 24h, 7d, or an ISO date-time.")
        ] = None,
        until: Annotated[str | None, typer.Option(help="Window end (default: now).")] = None,
        server: ServerOpt = DEFAULT_SERVER,
        output: OutputOpt = Output.table,
    ) -> None:
        """GPU-hours per tenant and per job (time spent RUNNING x GPUs held), and gateway
        requests and tokens per tenant since the server started."""
        now = dt.datetime.now(dt.UTC).timestamp()
        params: dict[str, Any] = {}
        try:
            if since is not None:
                params["since"] = parse_when(since, now)
            if until is not None:
                params["until"] = parse_when(until, now)
        except ValueError as exc:
            raise _fail(f"--since/--until {exc}", 2) from None
        if tenant is not None:
            params["tenant"] = tenant
        report = call(server, "GET", "/v1/usage", params=params)
        if emit(output, report):
            return
        out.print(f"Window: {_when(report['since'])} .. {_when(report['until'])}")
        tenants = Table("TENANT", "GPU-HOURS")
        for name, hours in sorted(report["gpu_hours_by_tenant"].items()):
            tenants.add_row(name, f"{hours:.3f}")
        tenants.add_row("total", f"{report['gpu_hours']:.3f}")
        out.print(tenants)
        jobs_table = Table("JOB", "TENANT", "GPUS", "RUNNING", "GPU-HOURS")
        for j in report["jobs"]:
            jobs_table.add_row(
                j["job_id"],
                j["tenant"],
                str(j["gpus"]),
                f"{j['running_s']:.0f}s",
                f"{j['gpu_hours']:.3f}",
            )
        out.print(jobs_table)
        serving = report.get("serving_by_tenant") or {}
        if serving:  # the OpenAI-compatible gateway, since the server started
            tokens = Table("TENANT", "REQUESTS", "PROMPT TOKENS", "COMPLETION TOKENS")
            for name, u in sorted(serving.items()):
                tokens.add_row(
                    name,
                    str(u["requests"]),
                    str(u["prompt_tokens"]),
                    str(u["completion_tokens"]),
                )
            out.print(tokens)

    @app.command()
    def status(
        server: ServerOpt = DEFAULT_SERVER,
        all_gpus: Annotated[
            bool, typer.Option("--all", help="Also every GPU with its health state.")
        ] = False,
        output: OutputOpt = Output.table,
    ) -> None:
        """Cluster summary: inventory source, GPUs free/total, jobs by state (--all: GPUs)."""
        s = call(server, "GET", "/v1/status")
        rows = call(server, "GET", "/v1/gpus") if all_gpus else None
        if emit(output, s if rows is None else {**s, "gpus": rows}):
            return
        kind = "SIMULATED" if s["simulated"] else "real hardware"
        out.print(f"Server:    {server}")
        out.print(f"Inventory: {s['inventory_source']} ({kind})")
        out.print(f"Nodes:     {s['nodes']}")
        out.print(f"GPUs:      {s['gpus_free']} free / {s['gpus_total']} total{shared_text(s)}")
        jobs_line = ", ".join(f"{k}={v}" for k, v in sorted(s["jobs_by_state"].items())) or "none"
        out.print(f"Jobs:      {jobs_line}")
        for note in s["notes"]:
            out.print(f"Note:      {note}", soft_wrap=True)
        if rows is not None:
            out.print(gpu_table(rows))

    register_admin(app, out, call, emit)
    register_ops(app, out, call, emit, gpu_table)
    register_access(app, out, call, emit)
    register_run_as(app, out, call, emit)
    register_cluster(app, out, call, emit)
    register_services(app, out, call, emit)
    register_certs(app, out)
    return app
