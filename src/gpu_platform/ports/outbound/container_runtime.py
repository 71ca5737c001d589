"""ContainerRuntime: runs, stops and reports on containers for a node's tasks.

The shape is the common ground of Docker/podman (Engine API) and Apptainer: a container is
started from an image with an argv, an environment, bind mounts, device nodes, GPU requests
and resource limits; it is watched until it exits, its output read as one stream, and it is
removed. Containers the platform starts carry `labels` so that a restarted agent can find
those it no longer knows (`list_ours`) and stop them.

Errors::

    ContainerError            the runtime refused or failed (daemon down, bad spec)
     └── ImageNotFound        the image is not on the node (and no registry gave it)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = [
    "OWNER_LABEL",
    "ContainerError",
    "ContainerExit",
    "ContainerInfo",
    "ContainerRuntime",
    "ContainerSpec",
    "GpuRequest",
    "ImageNotFound",
    "Mount",
]

OWNER_LABEL = "io.gpu-platform.owner"  # every container we start has it: the agent's node


class ContainerError(Exception):
    """The runtime could not do what was asked (the message says why)."""


class ImageNotFound(ContainerError):
    """The image is not present on the node and could not be pulled."""


@dataclass(frozen=True, slots=True)
class Mount:
    """A bind mount of host path `source` at `target` in the container."""

    source: str
    target: str
    read_only: bool = False

    @classmethod
    def parse(cls, text: str) -> Mount:
        """From "HOST:CONTAINER[:ro|rw]" (JobSpec.mounts validates the form)."""
        parts = text.split(":")
        return cls(parts[0], parts[1], len(parts) > 2 and parts[2] == "ro")


@dataclass(frozen=True, slots=True)
class GpuRequest:
    """GPUs handed to the container by the runtime's GPU plugin (NVIDIA container toolkit /
    CDI): `driver` ("nvidia"), `device_ids` (host indices or UUIDs, MIG UUIDs included)."""

    driver: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """One container. `env` is the whole environment (the image's own is kept underneath);
    `devices` are host device nodes passed through unchanged; `memory_bytes` caps memory with
    no swap beyond it; `cpus`/`mems` pin to host CPUs / NUMA nodes; `user` is "UID:GID" or a
    name known in the image; the container shares the host's network (gang rendezvous)."""

    name: str
    image: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[str, ...] = ()
    gpus: GpuRequest | None = None
    memory_bytes: int | None = None
    cpus: tuple[int, ...] = ()
    mems: tuple[int, ...] = ()
    pids_max: int | None = None
    user: str | None = None
    workdir: str | None = None


@dataclass(frozen=True, slots=True)
class ContainerExit:
    """How a container ended: its main process's `exit_code` (128+N when killed by signal N,
    as the runtimes report it) and whether the kernel's OOM killer ended it."""

    exit_code: int
    oom_killed: bool = False


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    """A container found on the node: its id, name, labels and whether it still runs."""

    id: str
    name: str
    labels: Mapping[str, str]
    running: bool


@runtime_checkable
class ContainerRuntime(Protocol):
    """A node's container runtime. Thread-safe; every call may block on the runtime (seconds).

    Promises: `run` returns the id of a started container or raises ImageNotFound /
    ContainerError (argv[0] not in the image included), leaving nothing behind; `wait`
    blocks until the container has exited and says how (callable after the exit, until
    `remove`); `logs` yields its combined stdout/stderr from the start, following it until
    it exits; `stop` sends SIGTERM, then SIGKILL after `grace_s` seconds, and returns once
    it has exited (an exited or unknown container is no error); `kill` sends SIGKILL now;
    `remove` deletes it (idempotent); `list_ours` lists every container, running or not,
    whose labels include all of `labels`; `close` releases the runtime's connections
    (containers are left as they are).
    """

    name: str

    def run(self, spec: ContainerSpec) -> str: ...

    def wait(self, container_id: str) -> ContainerExit: ...

    def logs(self, container_id: str) -> Iterator[bytes]: ...

    def stop(self, container_id: str, grace_s: float) -> None: ...

    def kill(self, container_id: str) -> None: ...

    def remove(self, container_id: str) -> None: ...

    def list_ours(self, labels: Mapping[str, str]) -> list[ContainerInfo]: ...

    def close(self) -> None: ...
