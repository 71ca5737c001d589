"""Wiring of the container runtime: which daemon runs a node's image jobs (setting
`container_runtime`), and the router that sends each task to processes or containers."""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from gpu_platform.adapters.outbound.containers import ContainerJobRunner, DockerContainerRuntime
from gpu_platform.application.image_jobs import ImageJobRouter
from gpu_platform.domain.model.node import Inventory
from gpu_platform.infrastructure.config import Settings
from gpu_platform.ports.outbound.container_runtime import ContainerError
from gpu_platform.ports.outbound.job_runner import JobRunner

__all__ = ["container_runner", "with_containers"]

log = structlog.get_logger(__name__)


def _socket_present(host: str | None) -> bool:
    """Whether a daemon may be listening, without talking to it (auto mode: cheap)."""
    address = host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if address.startswith("unix://"):
        return Path(address.removeprefix("unix://")).is_socket()
    return True  # tcp:// or ssh://: only a connection tells


def container_runner(settings: Settings, inventory: Inventory) -> ContainerJobRunner | None:
    """The node's container runner, after removing containers an earlier agent left; None
    when `container_runtime` is none (or auto and no daemon answers)."""
    mode = settings.container_runtime
    if mode == "none" or (mode == "auto" and not _socket_present(settings.container_host)):
        return None
    try:
        runtime = DockerContainerRuntime(settings.container_host, pull=settings.container_pull)
    except ContainerError as exc:
        if mode == "docker":
            raise SystemExit(f"error: container_runtime = docker: {exc}") from None
        log.warning("no container runtime: jobs with an image will fail", error=str(exc))
        return None
    owner = inventory.nodes[0].name if inventory.nodes else "local"
    runner = ContainerJobRunner(
        runtime,
        settings.data_dir / "jobs",
        owner=owner,
        visible_devices=settings.visible_devices,
        log_max_bytes=settings.job_log_max_bytes,
        pids_max=settings.job_pids_max,
        gpu_requests=not inventory.simulated and runtime.nvidia,
        default_user=settings.job_user,
        protected=(settings.data_dir,),
    )
    removed = runner.reconcile()
    if removed:
        log.warning("removed containers left by an earlier agent", node=owner, count=removed)
    return runner


def with_containers(bare: JobRunner, containers: ContainerJobRunner | None) -> JobRunner:
    """`bare` alone, or routed beside the container runner."""
    return bare if containers is None else ImageJobRouter(bare, containers)
