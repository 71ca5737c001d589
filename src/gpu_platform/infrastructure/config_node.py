"""Settings of the server and its node: where it listens, the GPU inventory, logging and
tracing, how jobs run (confinement, pinning, logs, containers), the scheduler, and health and
fault handling (docs/operations.md lists every setting).

A base of `config.Settings`, which adds the sources (flags, environment, TOML file) and the
checks across settings; never built on its own. Split from `config` only for size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import BaseSettings

__all__ = ["NodeSettings"]


class NodeSettings(BaseSettings):
    """The node's settings (fields of `Settings`, in its order)."""

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
