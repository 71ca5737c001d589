"""Settings: every knob typed and documented; sources in priority order

    explicit overrides (CLI flags) > environment (GPU_PLATFORM_*) > TOML file (--config) > defaults

Settings are built in `main()`, never at import time. Unknown keys in the TOML file are errors.
"""

from __future__ import annotations

import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

__all__ = ["ConfigError", "Settings", "load_settings"]

_toml_data: ContextVar[dict[str, Any] | None] = ContextVar("gpu_platform_toml", default=None)


class ConfigError(Exception):
    """The configuration is invalid; the message names the file and/or the setting."""


class Settings(BaseSettings):
    """gpu-platform configuration. Environment variables are `GPU_PLATFORM_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix="GPU_PLATFORM_", extra="forbid")

    host: str = Field("127.0.0.1", description="Address the REST API listens on.")
    port: int = Field(8080, ge=0, le=65535, description="REST API port (0 = pick a free one).")
    grpc_port: int = Field(
        50051, ge=-1, le=65535, description="gRPC API port on `host` (0 = any free port, -1 = off)."
    )
    data_dir: Path = Field(
        Path(".gpu-platform"),
        description="Where the job database and job logs live (created if missing).",
    )
    inventory: str = Field(
        "auto",
        min_length=1,
        description="GPU inventory source: auto (NVML, then amdsmi, then Level Zero; the "
        "simulated profile when none finds a GPU), nvml, amdsmi, levelzero, sysfs, hwloc, "
        "sim (sim_profile), file (inventory_file), or a plugin name (docs/adapters.md).",
    )
    inventory_file: Path | None = Field(
        None, description="TOML/YAML inventory file (inventory=file, or auto's fallback)."
    )
    sim_profile: str = Field(
        "dgx-a100",
        description="Simulated profile: dgx-a100, dgx-h100, hgx-8x-pcie, mixed-vendor, or "
        "hwloc:<file.xml>.",
    )
    hwloc_xml: Path | None = Field(
        None, description="Read locality from this hwloc XML instead of running lstopo."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Minimum log level."
    )
    log_format: Literal["auto", "console", "json"] = Field(
        "auto", description="auto = pretty on a terminal, JSON lines otherwise."
    )
    otlp_endpoint: str | None = Field(
        None,
        description="OTLP/gRPC endpoint for traces (e.g. http://127.0.0.1:4317); none = no "
        "exporter. Needs the 'otlp' extra.",
    )
    stop_grace_seconds: float = Field(
        10.0, gt=0, description="SIGTERM-to-SIGKILL grace when stopping a job."
    )
    shutdown_policy: Literal["requeue", "fail"] = Field(
        "requeue",
        description="What a graceful shutdown does to running jobs: requeue (they run again "
        "on the next start) or fail (they end FAILED).",
    )
    isolation: Literal["auto", "systemd", "cgroup-v1", "cgroup-v2", "none"] = Field(
        "auto",
        description="Job confinement: auto (cgroup v2 if usable, else v1, else none, logged), "
        "cgroup-v1, cgroup-v2, or none.",
    )
    cpu_pinning: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Pin jobs to the CPUs and memory of their GPUs' NUMA nodes: auto = on for "
        "real inventories, off for simulated ones (their NUMA layout is not this host's).",
    )
    gang_port_base: int = Field(
        29500,
        ge=1024,
        le=65535 - 2048,
        description="Gangs rendezvous on MASTER_PORT = this + rank 0's first GPU index (ports "
        "this .. this+2047 are the gangs'; keep them free on every node).",
    )
    visible_devices: Literal["index", "uuid"] = Field(
        "index", description="How visible-device masks name GPUs: node-local indices or UUIDs."
    )
    mig_controller: Literal["none", "nvml"] = Field(
        "none",
        description="Who creates MIG instances for jobs that ask for a MIG profile: nvml "
        "(nvidia-ml-py; root or the mig-config capability) or none (such jobs fail to launch).",
    )
    mps_control: str = Field(
        "nvidia-cuda-mps-control",
        description="The MPS control program that runs one daemon per GPU for jobs sharing a "
        "GPU under MPS (started for a GPU's first such job, stopped after its last).",
    )
    job_log_max_bytes: int = Field(
        100 << 20, gt=0, description="Cap on each attempt's log file; the rest is discarded."
    )
    job_pids_max: int | None = Field(
        None, gt=0, description="Cap on processes per job (pids cgroup); none = no cap."
    )
    job_user: str = Field(
        "nobody",
        pattern=r"^[a-z_][a-z0-9_-]{0,30}[$]?$",
        description="The account a job naming no `user` runs as (when the agent is root); "
        "which accounts a job may name is an admin's run-as grant (docs/isolation.md).",
    )
    job_pid_namespace: bool = Field(
        True,
        description="Run each task in its own PID namespace with its own /proc (root only), "
        "so no job sees another's processes or environment.",
    )
    container_runtime: Literal["auto", "docker", "none"] = Field(
        "auto",
        description="Runs jobs that name an image: docker (the Engine API at container_host; "
        "refuses to start without it), auto (docker when its socket is there) or none (such "
        "jobs fail to launch).",
    )
    container_host: str | None = Field(
        None,
        description="The container daemon's address, e.g. unix:///run/docker.sock (default: "
        "DOCKER_HOST, else the local socket).",
    )
    container_pull: bool = Field(
        False, description="Pull a job's image when the node lacks it (else the launch fails)."
    )
    schedule_interval_seconds: float = Field(
        1.0, gt=0, description="Longest pause between scheduling cycles (they also run on events)."
    )
    scheduler_order: Literal["fifo", "priority"] = Field(
        "priority", description="Queue order: fifo (submission) or priority (higher first, aged)."
    )
    scheduler_aging_points_per_hour: float = Field(
        60.0, ge=0, description="Priority points a waiting job gains per hour (priority order)."
    )
    scheduler_aging_bound_seconds: float | None = Field(
        86400.0,
        gt=0,
        description="A job waiting this long goes ahead of every job that waited less "
        "(no starvation); none = no bound.",
    )
    scheduler_fair_share: bool = Field(
        True, description="Interleave tenants by weighted dominant resource share (DRF)."
    )
    tenant_weights: dict[str, float] = Field(
        default_factory=dict, description="Fair-share weight per tenant (default 1)."
    )
    scheduler_backfill: bool = Field(
        True,
        description="EASY backfill: later jobs run if they do not delay the head job's "
        "reservation; off = strict order (nothing passes a job that does not fit).",
    )
    scheduler_preemption: bool = Field(
        True,
        description="Stop lower-priority (or quota-borrowing) preemptible jobs to make room; "
        "victims get SIGTERM, stop_grace_seconds, then SIGKILL, and are re-queued.",
    )
    scheduler_preempt_exempt_seconds: float = Field(
        300.0,
        ge=0,
        description="A job is never preempted before it has run this long (no thrashing).",
    )
    scheduler_max_jobs_per_cycle: int = Field(
        1000, ge=1, description="Pending jobs one scheduling cycle examines at most."
    )
    quotas: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-tenant quotas: {tenant: {gpus, cohort, borrowing_limit, "
        "lending_limit, gpu_memory_bytes, cpu_milli}}; ones set at run time (REST/CLI) win.",
    )

    health_source: Literal["auto", "sim", "nvml", "telemetry", "none"] = Field(
        "auto",
        description="GPU/node health monitor: auto (NVML events and polling for an NVML "
        "inventory, telemetry polling for other real GPUs, else the simulated hardware), sim, "
        "nvml, telemetry, or none (no monitor, no heartbeat checks).",
    )
    fault_injection: bool = Field(
        True,
        description="Allow `gpu-platform debug inject` (POST /v1/debug/inject); every "
        "injection is audited.",
    )
    health_poll_seconds: float = Field(
        5.0,
        gt=0,
        description="NVML field-polling period, and the heartbeat period of the health monitor.",
    )
    node_suspect_after_seconds: float = Field(
        3.0, gt=0, description="A node with no heartbeat for this long turns SUSPECT."
    )
    node_down_after_seconds: float = Field(
        8.0,
        gt=0,
        description="A node with no heartbeat for this long goes DOWN; its jobs are re-queued. "
        "Replicated, it must cover the agents' lease: at least agent_lease_seconds + "
        "agent_fence_grace_seconds + node_suspect_after_seconds/3 + 1 s + two election "
        "timeouts (docs/replication.md, 'Timing budget').",
    )
    ecc_corrected_alert: int = Field(
        1000, ge=1, description="Corrected (single-bit) ECC errors on a GPU that raise an alert."
    )
    thermal_hot_celsius: float = Field(
        90.0, description="At this temperature a GPU takes no new work (running work continues)."
    )
    thermal_cool_celsius: float = Field(
        80.0, description="A hot GPU takes new work again at or below this temperature."
    )
    xid_overrides: dict[int, Literal["ignore", "job", "unhealthy", "reset", "reboot"]] = Field(
        default_factory=dict,
        description='Per-XID class overrides of NVIDIA\'s catalogue, e.g. {109 = "job"} in '
        'TOML or GPU_PLATFORM_XID_OVERRIDES=\'{"109": "job"}\' (docs/faults.md).',
    )
    retry_backoff_max_seconds: float = Field(
        300.0, ge=0, description="Cap on a re-queued job's restart backoff."
    )

    # -- replication (docs/replication.md) -----------------------------------------------------
    server_id: int = Field(
        1,
        ge=0,
        description="This server's Raft id (its entry in `peers`). 0 = the embedded control "
        "plane: no Raft and no agents, jobs run in this process (for embedding the library).",
    )
    peers: str = Field(
        "",
        description="Raft voters as id=host:port[,id=host:port...] (each server's Raft "
        "address; this server listens on its own). Empty = a one-voter cluster on "
        "`raft_port`.",
    )
    raft_port: int = Field(
        7001,
        ge=0,
        le=65535,
        description="Raft port of a one-voter cluster (peers empty) on `host`; 0 = any free "
        "port. With peers, this server's entry there gives the port.",
    )
    join: bool = Field(
        False,
        description="Replicated: this server joins a running cluster (it bootstraps no "
        "configuration; add it with `gpu-platform cluster add-server`).",
    )
    agent_port: int = Field(
        50053,
        ge=0,
        le=65535,
        description="Port of the agents' stream API on `host` (0 = any free port).",
    )
    advertise_host: str | None = Field(
        None,
        description="Host name clients and agents are redirected to for this server "
        "(default: `host`, or 127.0.0.1 when `host` is a wildcard).",
    )
    local_agent: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Also run an agent in this process for this host's GPUs: auto = on for a "
        "one-voter cluster (peers empty), off when peers are given.",
    )
    raft_tick_seconds: float = Field(
        0.015,
        gt=0,
        description="Raft tick length; the leader heartbeats every tick (etcd's low-latency "
        "setting: 15 ms heartbeat, 10x election timeout; docs/raft.md has the budget).",
    )
    raft_election_ticks: int = Field(
        10,
        ge=2,
        description="Election timeout in ticks: a follower that hears no leader for a random "
        "time in [N, 2N) ticks campaigns (pre-vote and check-quorum on; 150-300 ms by default).",
    )
    raft_transport: Literal["grpc", "tcp"] = Field(
        "grpc",
        description="How Raft messages travel between servers: grpc (grpcio streams) or tcp "
        "(plain sockets written from the Raft loop: fewer thread hand-offs, faster "
        "single-client commits; docs/raft.md has the figures). Same TLS, token and member "
        "rules; every server of a cluster must use the same one.",
    )
    raft_snapshot_entries: int = Field(
        10_000, ge=0, description="Applied log entries between state snapshots (0 = never)."
    )
    agent_heartbeat_seconds: float = Field(
        1.0, gt=0, description="How often agents send a heartbeat on their stream."
    )
    agent_lease_seconds: float = Field(
        3.0,
        gt=0,
        description="An agent whose heartbeats the leader has not acknowledged for this long "
        "(counted from the sending of the last acknowledged one) stops its tasks itself.",
    )
    cluster_token: str | None = Field(
        None,
        min_length=16,
        description="The cluster's shared secret: agents and joining servers present it; a "
        "one-voter server with none creates <data_dir>/cluster-token (docs/replication.md).",
    )
    cluster_token_file: Path | None = Field(
        None, description="Read the cluster token from this file (e.g. a server's cluster-token)."
    )
    agent_fence_grace_seconds: float = Field(
        1.0,
        gt=0,
        description="SIGTERM-to-SIGKILL grace when an agent's lease has run out.",
    )

    # -- APIs, tenancy and security (docs/api.md) ---------------------------------------------
    auth: Literal["on", "off"] = Field(
        "off",
        description="Require bearer tokens (on) or treat every caller as the anonymous admin "
        "(off, logged as a warning at startup). On first start with auth on, an admin token "
        "is created and written to <data_dir>/admin-token (mode 0600).",
    )
    rate_limit_per_second: float = Field(
        50.0, ge=0, description="Requests per second per token (token bucket); 0 = no limit."
    )
    rate_limit_burst: float = Field(
        100.0, ge=1, description="Token-bucket size: requests a token may make at once."
    )
    auth_failures_per_minute: int = Field(
        20,
        ge=0,
        description="Unknown or revoked tokens one client address may present per minute; "
        "past that its requests are answered 429 until the minute has passed (0 = no limit).",
    )
    max_queued_jobs_per_tenant: int = Field(
        0, ge=0, description="Jobs a tenant may have waiting to run; more are 429 (0 = no limit)."
    )
    max_pending_gpus_per_tenant: int = Field(
        0,
        ge=0,
        description="GPUs a tenant's waiting jobs may ask for in all; more are 429 (0 = no limit).",
    )
    max_argv_bytes: int = Field(
        128 << 10, gt=0, description="Largest job argv (bytes, each argument plus a NUL)."
    )
    max_env_vars: int = Field(256, gt=0, description="Most environment variables per job.")
    max_env_bytes: int = Field(
        64 << 10, gt=0, description="Largest job environment (bytes, each KEY=VALUE plus a NUL)."
    )
    max_gpus_per_job: int = Field(1024, gt=0, description="Most GPUs one job may ask for.")
    max_array_size: int = Field(
        1_000_000,
        gt=0,
        le=1 << 31,
        description="Job arrays: indices must be below this (like Slurm's MaxArraySize).",
    )
    audit_file: Path | None = Field(
        None, description="The hash-chained audit log (JSON lines); none = <data_dir>/audit.jsonl."
    )
    audit_key_file: Path | None = Field(
        None,
        description="A secret key (kept outside the data directory) that seals the audit "
        "chain with an HMAC: `audit verify` then detects a cut tail or a re-hashed chain. "
        "Created (mode 0600) if missing; none = chain hashes only.",
    )
    max_request_bytes: int = Field(
        1 << 20,
        gt=0,
        description="Largest REST request body and gRPC API message (bytes); larger is 413 / "
        "RESOURCE_EXHAUSTED, refused before it is read whole.",
    )
    metrics_auth: Literal["none", "token"] = Field(
        "none",
        description="/metrics: none = anyone may scrape; token = a viewer, operator or admin "
        "bearer token is required (the exposition names tenants and jobs).",
    )
    agent_metrics_token_file: Path | None = Field(
        None,
        description="An agent's /metrics (--metrics-port) requires `Authorization: Bearer` "
        "with this file's contents; none = anyone who reaches the port may scrape.",
    )
    tls_cert_file: Path | None = Field(
        None, description="PEM certificate for REST and gRPC; with tls_key_file turns TLS on."
    )
    tls_key_file: Path | None = Field(None, description="PEM private key of tls_cert_file.")
    tls_client_ca_file: Path | None = Field(
        None,
        description="PEM CA bundle: when set (with TLS on), REST and gRPC require client "
        "certificates signed by it (mTLS).",
    )

    # -- OpenAI-compatible gateway (docs/gateway.md) ------------------------------------------
    gateway: Literal["on", "off"] = Field(
        "on",
        description="Serve /v1/chat/completions, /v1/completions, /v1/embeddings and "
        "/v1/models on the REST port, proxied to the replicas of each model.",
    )
    gateway_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Serve the gateway on this port (its own thread and event loop) instead "
        "of the REST port; 0 = any free port (reported in ports.json as 'gateway').",
    )
    gateway_requests_per_second: float = Field(
        0.0, ge=0, description="Gateway requests per second per API key; 0 = no limit."
    )
    gateway_request_burst: float = Field(
        50.0, ge=1, description="Gateway requests an API key may send at once."
    )
    gateway_tokens_per_minute: float = Field(
        0.0, ge=0, description="Prompt + completion tokens per minute per API key; 0 = no limit."
    )
    gateway_retries: int = Field(
        2, ge=0, le=10, description="Other replicas to try after one refused the connection."
    )
    gateway_max_body_bytes: int = Field(
        16 << 20, gt=0, description="Largest gateway request body (bytes); larger is 413."
    )
    gateway_read_timeout_seconds: float = Field(
        600.0, gt=0, description="Longest wait for a replica's next bytes before giving up."
    )
    gateway_session_header: str = Field(
        "X-Session-Id",
        min_length=1,
        description="Requests with the same value of this header go to the same replica.",
    )
    gateway_routes_file: Path | None = Field(
        None,
        description="Also route to the models listed in this JSON file (replicas the platform "
        "does not run); re-read when it changes.",
    )

    @field_validator("local_agent", mode="before")
    @classmethod
    def _local_agent_bool(cls, value: object) -> object:
        """true/false (the --local-agent flag, old configurations) mean on/off."""
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
            return "on" if value.lower() in ("true", "1", "yes") else "off"
        return value

    @model_validator(mode="after")
    def _timing_budget(self) -> Settings:
        """Node loss must not re-run work before a cut-off agent has stopped it (fencing)."""
        if self.node_down_after_seconds <= self.node_suspect_after_seconds:
            raise ValueError(
                f"node_down_after_seconds ({self.node_down_after_seconds:g}) must exceed "
                f"node_suspect_after_seconds ({self.node_suspect_after_seconds:g})"
            )
        if self.node_suspect_after_seconds <= self.agent_heartbeat_seconds:
            raise ValueError(
                f"node_suspect_after_seconds ({self.node_suspect_after_seconds:g}) must exceed "
                f"agent_heartbeat_seconds ({self.agent_heartbeat_seconds:g})"
            )
        need = self.fence_budget_seconds
        if self.server_id != 0 and self.node_down_after_seconds < need:
            raise ValueError(
                f"node_down_after_seconds ({self.node_down_after_seconds:g}) must be at least "
                f"{need:g}: agent_lease_seconds + agent_fence_grace_seconds + "
                "node_suspect_after_seconds/3 + 1 s + two election timeouts, or a cut-off "
                "agent's tasks could still run when their jobs start elsewhere"
            )
        return self

    @property
    def fence_budget_seconds(self) -> float:
        """The least node_down_after_seconds that keeps fencing safe (docs/replication.md)."""
        election = self.raft_tick_seconds * self.raft_election_ticks
        return round(
            self.agent_lease_seconds
            + self.agent_fence_grace_seconds
            + self.node_suspect_after_seconds / 3
            + 1.0
            + 2 * election,
            3,
        )

    @property
    def runs_local_agent(self) -> bool:
        """Whether this (replicated) server runs an agent in its own process."""
        if self.server_id == 0:
            return False
        if self.local_agent == "auto":
            return not self.peers.strip()
        return self.local_agent == "on"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = InitSettingsSource(settings_cls, init_kwargs=_toml_data.get() or {})
        return (init_settings, env_settings, toml)


def load_settings(config_file: str | Path | None = None, **overrides: Any) -> Settings:
    """Build Settings from overrides, environment and an optional TOML file.

    `overrides` whose value is None are ignored (an unset CLI flag). Raises ConfigError.
    """
    data: dict[str, Any] = {}
    if config_file is not None:
        path = Path(config_file)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path}: not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: invalid TOML: {exc}") from None
        data = data.get("gpu_platform", data)
    token = _toml_data.set(data)
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        where = f"config file {config_file}" if config_file else "configuration"
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '?'}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"{where}: {problems}") from None
    finally:
        _toml_data.reset(token)
