"""Runs job tasks in container images (the ContainerRuntime port and its Docker adapter)."""

from gpu_platform.adapters.outbound.containers.docker_runtime import (
    DockerContainerRuntime,
    docker_available,
)
from gpu_platform.adapters.outbound.containers.job_runner import ContainerJobRunner

__all__ = ["ContainerJobRunner", "DockerContainerRuntime", "docker_available"]
